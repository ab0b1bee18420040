import Foundation

/// A value behind a lock (`NSLock`, a pthread mutex): what `Synchronization.Mutex` does, in a
/// form ThreadSanitizer understands on Linux in debug builds — there `Mutex`'s locking is not
/// instrumented, so every access it guards is reported as a race (`scripts/integration/tsan-test.sh`).
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
