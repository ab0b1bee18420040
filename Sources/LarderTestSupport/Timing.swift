import Dispatch
import LarderCore
import Synchronization
import Testing

/// Threads of the tests' own for the async work whose timing a test asserts (a server's answers,
/// a client's stall timeout), away from Swift's cooperative pool: in a whole `swift test` run the
/// pool's few threads are busy for seconds at a time with the bodies of other suites' tests, and
/// a continuation queued behind them can wait longer than any timeout a fast test may use.
///
/// Jobs go round-robin to a few serial dispatch queues; those get threads of their own even when
/// the pool is saturated.
package final class OwnThreads: TaskExecutor {
    /// The one instance the suites share.
    package static let shared = OwnThreads(width: 16)

    private let queues: [DispatchQueue]
    private let next = Mutex(0)

    private init(width: Int) {
        queues = (0..<width).map { DispatchQueue(label: "larder.test-threads.\($0)") }
    }

    /// Runs the job on the next queue.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let count = queues.count
        let i = next.withLock { n in
            defer { n = (n + 1) % count }
            return n
        }
        let executor = asUnownedTaskExecutor()
        queues[i].async { job.runSynchronously(on: executor) }
    }
}

/// Runs `body` (and the child tasks it makes) on `OwnThreads`.
package func onOwnThreads<T>(_ body: () async throws -> T) async throws -> T {
    try await withTaskExecutorPreference(OwnThreads.shared) { try await body() }
}

/// Starts an unstructured task on `OwnThreads`.
@discardableResult
package func detachedOnOwnThreads<T: Sendable>(
    _ body: @escaping @Sendable () async throws -> T
) -> Task<T, any Error> {
    Task(executorPreference: OwnThreads.shared) { try await body() }
}

extension Trait where Self == TimeLimitTrait {
    /// A guard against a test that hangs (a Retry-After not capped would wait an hour), not a
    /// measure of speed: a whole `swift test` on a small machine takes about ten minutes, and a
    /// test queued behind the others must not fail for it.
    package static var hangGuard: Self { .timeLimit(.minutes(30)) }
}
