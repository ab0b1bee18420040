import Foundation

// The two concurrency tools the product's modules use beside Swift's own (actors, tasks):
// `Locked` for small shared state, and `BlockingWork` for work that blocks a thread. No module
// takes an `NSLock` or makes a `Thread` of its own (scripts/tools/check-size.py counts them).

/// A value behind a lock, with `Synchronization.Mutex`'s shape (`withLock`), so moving to `Mutex`
/// is a rename once the package can: `Mutex` needs macOS 15 / iOS 18, newer than the package's
/// platforms, and on Linux ThreadSanitizer does not see `Mutex`'s locking in debug builds, so
/// every access it guards is reported as a race (`scripts/integration/tsan-test.sh`). Underneath
/// is an `NSLock` (a pthread mutex), which ThreadSanitizer understands.
///
/// A final class whose mutable state is one `Locked` is `Sendable` with no `@unchecked`.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only reached inside `withLock`, under `lock`.
    private let lock = NSLock()
    private var value: Value

    /// Holds `value`.
    package init(_ value: Value) { self.value = value }

    /// Runs `body` on the value with the lock held.
    package func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Work that blocks its thread — waits on a condition, on a pipe, on a file another task is still
/// writing — and so must never run on Swift's cooperative pool, whose threads are as many as the
/// cores. Each piece gets a serial dispatch queue of its own, which libdispatch backs with a
/// thread of its overcommitting pool (a new one when every other is blocked), named for
/// debuggers and `top -H`.
package enum BlockingWork {
    /// Runs `body` on a thread of its own (see the type), named `name`.
    package static func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        DispatchQueue(label: name).async(execute: body)
    }
}
