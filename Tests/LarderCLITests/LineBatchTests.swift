import Foundation
import Synchronization
import Testing

@testable import larder

/// `serve`'s line per request goes out in batches (Sources/larder/Output.swift): in order,
/// escaped as `Output.line` escapes, at most `delay` late, and at once when `limit` bytes wait.
@Suite("Batched output lines")
struct LineBatchTests {
    /// What a sink received: each write, in order.
    final class Capture: Sendable {
        private let writes = Mutex<[String]>([])
        var sink: OutputSink {
            OutputSink(
                out: { data in self.writes.withLock { $0.append(String(decoding: data, as: UTF8.self)) } },
                err: { _ in })
        }
        var all: [String] { writes.withLock { $0 } }
    }

    @Test("lines from many threads arrive whole, each thread's in order, in fewer writes than lines")
    func orderAndBatching() async throws {
        let capture = Capture()
        let lines = LineBatch(sink: capture.sink, delay: .milliseconds(20))
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            for i in 0..<500 { lines.add("thread \(t) line \(i)") }
        }
        lines.flush()
        let text = capture.all.joined()
        let got = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(got.count == 2000)
        for t in 0..<4 {
            let mine = got.filter { $0.hasPrefix("thread \(t) ") }
            #expect(mine == (0..<500).map { "thread \(t) line \($0)"[...] }, "thread \(t)'s lines in order")
        }
        #expect(capture.all.count < 200, "\(capture.all.count) writes for 2000 lines")
        #expect(capture.all.allSatisfy { $0.hasSuffix("\n") }, "a write ends at the end of a line")
    }

    @Test("a line waits at most about the delay, with no flush asked for")
    func delay() async throws {
        let capture = Capture()
        let lines = LineBatch(sink: capture.sink, delay: .milliseconds(20))
        lines.add("GET larder://app/x 200 app@1.0.0 10B 0ms")
        #expect(capture.all.isEmpty, "not written at once")
        let deadline = Date().addingTimeInterval(5)
        while capture.all.isEmpty && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(capture.all == ["GET larder://app/x 200 app@1.0.0 10B 0ms\n"])
    }

    @Test("the limit writes at once; control characters are escaped as Output.line escapes them")
    func limitAndEscaping() {
        let capture = Capture()
        let lines = LineBatch(sink: capture.sink, delay: .seconds(60), limit: 64)
        lines.add("a\u{1B}[31mred\ttab")
        #expect(capture.all.isEmpty)
        lines.add(String(repeating: "x", count: 70))
        #expect(capture.all == ["a\\u{1B}[31mred\ttab\n" + String(repeating: "x", count: 70) + "\n"])
        lines.flush()
        #expect(capture.all.count == 1, "nothing left to write")
    }
}
