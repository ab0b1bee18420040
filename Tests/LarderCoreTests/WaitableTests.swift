import Dispatch
import LarderCore
import Testing

@Suite("Waitable: a Mutex that threads wait on")
struct WaitableTests {
    @Test("a thread waiting for a state is woken by the update that makes it")
    func wakesOnUpdate() {
        let state = Waitable(0)
        let seen = Waitable<Int?>(nil)
        BlockingWork.start("test.waiter") {
            let value = state.wait { $0 >= 3 ? $0 : nil }
            seen.update { $0 = value }
        }
        for _ in 0..<3 { state.update { $0 += 1 } }
        #expect(seen.wait { $0 } == 3)
    }

    @Test("what the waiter changes as it answers wakes the other waiters (a bounded queue)")
    func boundedQueue() {
        // One producer, one consumer, a queue of at most 2: each side waits for the other's change.
        let queue = Waitable((items: [Int](), closed: false))
        let total = Waitable<Int?>(nil)
        BlockingWork.start("test.consumer") {
            var sum = 0
            while let item = queue.wait(until: { q -> Int?? in
                if !q.items.isEmpty { return .some(q.items.removeFirst()) }
                return q.closed ? .some(nil) : nil
            }) {
                sum += item
            }
            total.update { $0 = sum }
        }
        for i in 1...1000 {
            queue.wait { q -> Bool? in
                guard q.items.count < 2 else { return nil }
                q.items.append(i)
                return true
            }
        }
        queue.update { $0.closed = true }
        #expect(total.wait { $0 } == 500_500)
    }

    @Test("a wait with a deadline gives nil when the state never comes")
    func deadline() {
        let state = Waitable(false)
        let started = DispatchTime.now()
        let answer = state.wait(until: { $0 ? true : nil }, deadline: .now() + .milliseconds(50))
        #expect(answer == nil)
        #expect(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds >= 50_000_000)
        state.update { $0 = true }
        #expect(state.wait(until: { $0 ? true : nil }, deadline: .now() + .milliseconds(50)) == true)
    }
}
