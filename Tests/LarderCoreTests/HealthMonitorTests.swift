import Foundation
import LarderCore
import Testing

@Suite("Core: page-health monitor")
struct HealthMonitorTests {
    static let activation = ActivationRef(
        package: PackageID("sample-app")!, version: SemanticVersion("2.0.0")!, number: 7)
    static let settings = PageHealthSettings(readyDeadline: 10, maxScriptErrors: 3)

    /// One row: signals at times (nil signal = a tick), and the verdict expected after the last.
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let steps: [(TimeInterval, PageSignal?)]
        let expected: HealthVerdict?
        var testDescription: String { name }
    }

    static let error1 = PageSignal.scriptError(message: "Uncaught Error: boom", source: "https://a/js/app.js", line: 3)

    static let rows: [Row] = [
        Row(name: "ready before the load event", steps: [(1, .ready)], expected: .healthy),
        Row(name: "ready after load, in time", steps: [(1, .documentLoaded), (10.9, .ready)], expected: .healthy),
        Row(
            name: "ready at 80 % of the deadline after load",
            steps: [(2, .documentLoaded), (10, .ready), (30, nil)], expected: .healthy),
        Row(
            name: "no ready: the deadline counts from the load event",
            steps: [(5, .documentLoaded), (14.9, nil)], expected: nil),
        Row(
            name: "no ready by the deadline",
            steps: [(5, .documentLoaded), (15, nil)],
            expected: .failed(reason: "no ready signal within 10 s after the page loaded")),
        Row(
            name: "an error, then no ready: the reason carries the error",
            steps: [(0.5, error1), (1, .documentLoaded), (11, nil)],
            expected: .failed(
                reason:
                    "no ready signal within 10 s after the page loaded; an uncaught script error: Uncaught Error: boom (https://a/js/app.js:3)"
            )),
        Row(
            name: "never loads",
            steps: [(10, nil)], expected: .failed(reason: "the page did not finish loading within 10 s")),
        Row(
            name: "a ready signal after the deadline does not rescue the page",
            steps: [(1, .documentLoaded), (12, .ready)],
            expected: .failed(reason: "no ready signal within 10 s after the page loaded")),
        Row(
            name: "three errors fail at once",
            steps: [(1, error1), (1.1, error1), (1.2, .scriptError(message: "third", source: nil, line: nil))],
            expected: .failed(reason: "3 uncaught script errors before the page was ready, the last: third")),
        Row(
            name: "two errors and ready: healthy", steps: [(1, error1), (1.1, error1), (2, .ready)], expected: .healthy),
        Row(
            name: "errors after ready change nothing",
            steps: [(1, .ready), (2, error1), (2, error1), (2, error1), (100, nil)], expected: .healthy),
        Row(
            name: "a load failure fails at once",
            steps: [(1, .loadFailed(reason: "HTTP 404"))],
            expected: .failed(reason: "the main document failed to load: HTTP 404")),
        Row(
            name: "a termination passed on as a failure fails at once",
            steps: [(1, .documentLoaded), (2, .processTerminated(reason: "crashed 3 times"))],
            expected: .failed(reason: "the web content process crashed 3 times")),
        Row(
            name: "the verdict is final: a failure after ready is ignored",
            steps: [(1, .ready), (2, .processTerminated(reason: "crashed"))], expected: .healthy),
        Row(
            name: "a second load event does not move the deadline",
            steps: [(1, .documentLoaded), (9, .documentLoaded), (11, nil)],
            expected: .failed(reason: "no ready signal within 10 s after the page loaded")),
    ]

    @Test("verdicts", arguments: rows)
    func verdicts(_ row: Row) {
        var m = HealthMonitor(activation: Self.activation, settings: Self.settings, startedAt: 0)
        var reached: [HealthVerdict] = []
        for (t, signal) in row.steps {
            let v = signal.map { m.handle($0, at: t) } ?? m.tick(at: t)
            if let v { reached.append(v) }
        }
        #expect(m.verdict == row.expected)
        // A verdict is returned once, by the call that reached it.
        #expect(reached.count == (row.expected == nil ? 0 : 1))
        #expect(m.activation == Self.activation)
    }

    @Test("deadline: loading, then waiting, then none once decided")
    func deadlines() {
        var m = HealthMonitor(activation: Self.activation, settings: Self.settings, startedAt: 100)
        #expect(m.deadline == 110)
        _ = m.handle(.documentLoaded, at: 104)
        #expect(m.deadline == 114)
        _ = m.handle(.ready, at: 105)
        #expect(m.deadline == nil)
        #expect(m.tick(at: 1000) == nil)
    }

    @Test("messages from the page: decoded, or refused with a reason")
    func decode() throws {
        #expect(try PageSignal.decode(Data(#"{"event":"ready"}"#.utf8)).get() == .ready)
        #expect(try PageSignal.decode(Data(#"{"event":"loaded"}"#.utf8)).get() == .documentLoaded)
        #expect(
            try PageSignal.decode(Data(#"{"event":"error","message":"m","source":"s.js","line":4}"#.utf8)).get()
                == .scriptError(message: "m", source: "s.js", line: 4))
        #expect(
            try PageSignal.decode(Data(#"{"event":"error","line":0}"#.utf8)).get()
                == .scriptError(message: "", source: nil, line: nil))
        let refusals: [(String, String)] = [
            ("not json", "not a JSON object"), ("[1]", "not a JSON object"), (#"{"x":1}"#, "no \"event\""),
            (#"{"event":"boom"}"#, "unknown event \"boom\""),
        ]
        for (text, why) in refusals {
            guard case .failure(let e) = PageSignal.decode(Data(text.utf8)) else {
                Issue.record("\(text) was accepted")
                continue
            }
            #expect(e.description.contains(why), "\(text): \(e)")
        }
        guard case .failure(let big) = PageSignal.decode(Data(count: 70_000)) else {
            Issue.record("70 KB accepted")
            return
        }
        #expect(big.description.contains("64 KiB"))
    }

    @Test("a long or multi-line message is cut and flattened in the reason")
    func longMessage() {
        var m = HealthMonitor(
            activation: Self.activation, settings: PageHealthSettings(readyDeadline: 1, maxScriptErrors: 1),
            startedAt: 0)
        let v = m.handle(.scriptError(message: String(repeating: "x\n", count: 1000), source: nil, line: nil), at: 0)
        guard case .failed(let reason) = v else {
            Issue.record("not failed: \(String(describing: v))")
            return
        }
        #expect(!reason.contains("\n"))
        #expect(reason.count < 400)
        #expect(reason.hasPrefix("an uncaught script error before the page was ready"))
    }
}
