import Foundation
import Synchronization

// Beside Swift's own tools (actors, tasks) the product's modules use `Synchronization.Mutex` for
// small shared state, held by a final class (`Mutex` is not copyable), `Waitable` below (a `Mutex`
// with waiting) where a thread blocks until shared state changes, and `BlockingWork` for work that
// blocks a thread. No module takes an `NSLock` or `NSCondition` or makes a `Thread` of its own
// (scripts/tools/check-size.py counts them). On Linux, ThreadSanitizer sees `Mutex` only through
// the shim scripts/integration/tsan-test.sh preloads (scripts/integration/tsan-mutex.c says why).

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

/// State that threads block on until it changes — a condition variable over a `Mutex`: `update`
/// changes the state and wakes every waiting thread, `wait` blocks its thread until a predicate
/// on the state gives an answer (and, as the predicate may change the state as it answers,
/// wakes the other waiters then). For the blocking side of a pipeline (run it under `BlockingWork`, never on
/// the cooperative pool). Each waiter blocks on a semaphore of its own, registered with the lock
/// held, so a change between the check and the block is never missed.
package final class Waitable<State: Sendable>: Sendable {
    private let guarded: Mutex<(state: State, waiters: [DispatchSemaphore])>

    /// Holds `state`.
    package init(_ state: State) { guarded = Mutex((state, [])) }

    /// Runs `body` on the state with the lock held, then wakes every waiting thread.
    package func update<R: Sendable, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        try guarded.withLock { g throws(E) -> R in
            defer { Self.wake(&g.waiters) }
            return try body(&g.state)
        }
    }

    /// Runs `body` on the state with the lock held, waking nobody (a read, or a change no waiter
    /// waits for).
    package func withLock<R: Sendable, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        try guarded.withLock { g throws(E) -> R in try body(&g.state) }
    }

    /// Blocks the thread until `ready`, run with the lock held on the state as it is now and after
    /// each change, returns a value; returns it.
    @discardableResult
    package func wait<R: Sendable>(until ready: (inout State) -> R?) -> R {
        while true {
            let woken = DispatchSemaphore(value: 0)
            let answer: R? = guarded.withLock { g in
                if let r = ready(&g.state) {
                    Self.wake(&g.waiters)
                    return r
                }
                g.waiters.append(woken)
                return nil
            }
            if let answer { return answer }
            woken.wait()
        }
    }

    /// As `wait(until:)`, giving up at `deadline`: nil then.
    @discardableResult
    package func wait<R: Sendable>(until ready: (inout State) -> R?, deadline: DispatchTime) -> R? {
        while true {
            let woken = DispatchSemaphore(value: 0)
            let answer: R? = guarded.withLock { g in
                if let r = ready(&g.state) {
                    Self.wake(&g.waiters)
                    return r
                }
                g.waiters.append(woken)
                return nil
            }
            if let answer { return answer }
            if woken.wait(timeout: deadline) == .timedOut {
                // One more look: the state may have changed as the time ran out.
                return guarded.withLock { g in
                    g.waiters.removeAll { $0 === woken }
                    let r = ready(&g.state)
                    if r != nil { Self.wake(&g.waiters) }
                    return r
                }
            }
        }
    }

    private static func wake(_ waiters: inout [DispatchSemaphore]) {
        for w in waiters { w.signal() }
        waiters.removeAll()
    }
}
