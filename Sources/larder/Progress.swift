import ArgumentParser
import Foundation
import Larder
import Synchronization

/// `sync --progress`: how progress reaches stderr.
enum ProgressMode: String, CaseIterable {
    /// A bar when stderr is a terminal, nothing otherwise.
    case auto
    /// One JSON object per line.
    case json
    /// Nothing.
    case none

    /// What `auto` means here.
    func resolved(isTerminal: Bool) -> ProgressRenderer.Mode {
        switch self {
        case .auto: isTerminal ? .bar : .none
        case .json: .json
        case .none: .none
        }
    }
}

/// One line of `--progress json`.
struct ProgressLine: Encodable, Equatable {
    /// `index`, `bytes` or `package`.
    let event: String
    var serial: UInt64?
    var changed: Bool?
    var package: String?
    var done: Int64?
    var total: Int64?
    var overallDone: Int64?
    var overallTotal: Int64?
    var outcome: String?
}

/// Renders sync events on stderr: a one-line bar on a terminal, or JSON lines. Byte events are
/// throttled to `interval` (a transfer reports every chunk it writes); index and package events
/// are never dropped, and the last byte counts are flushed before a package's result.
final class ProgressRenderer: Sendable {
    /// What is drawn.
    enum Mode: Equatable {
        case bar, json, none
    }

    let mode: Mode
    private let interval: TimeInterval
    private let clock: @Sendable () -> Date
    private let output: @Sendable (String) -> Void
    /// The byte counts so far, and what was drawn when (behind `state`'s lock: events arrive
    /// from several transfers).
    private struct State {
        var done: [String: Int64] = [:]
        var totals: [String: Int64] = [:]
        var last: (id: String, done: Int64, total: Int64)?
        var lastEmitted = Date.distantPast
        var pending = false
    }

    private let state = Mutex(State())
    private let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// A renderer; `output` receives each piece of output (stderr by default).
    init(
        mode: Mode, interval: TimeInterval = 0.25, clock: @escaping @Sendable () -> Date = { Date() },
        output: @escaping @Sendable (String) -> Void = { [sink = Output.sink] in sink.err(Data($0.utf8)) }
    ) {
        self.mode = mode
        self.interval = interval
        self.clock = clock
        self.output = output
    }

    /// The handler to give the syncer.
    var handle: @Sendable (SyncEvent) -> Void { { [self] e in self.render(e) } }

    /// Renders one event.
    func render(_ e: SyncEvent) {
        state.withLock { s in
            switch e {
            case .index(let serial, let changed):
                emit(ProgressLine(event: "index", serial: serial, changed: changed), bar: "index \(serial)")
            case .bytes(let id, let d, let t):
                s.done[id] = d
                s.totals[id] = t
                s.last = (id, d, t)
                let now = clock()
                if now.timeIntervalSince(s.lastEmitted) >= interval {
                    s.lastEmitted = now
                    emitBytes(&s)
                } else {
                    s.pending = true
                }
            case .package(let id, let outcome):
                if s.pending { emitBytes(&s) }
                if mode == .json {
                    emit(ProgressLine(event: "package", package: id, outcome: outcome.rawValue), bar: nil)
                }
            }
        }
    }

    /// Flushes the last byte counts and ends the bar's line.
    func finish() {
        state.withLock { s in
            if s.pending { emitBytes(&s) }
            if mode == .bar { output("\n") }
        }
    }

    private func emitBytes(_ s: inout State) {
        s.pending = false
        guard let (id, d, t) = s.last else { return }
        let all = s.done.values.reduce(0, +)
        let total = s.totals.values.reduce(0, +)
        let pct = total > 0 ? min(100, Int(all * 100 / total)) : 0
        let bar = String(repeating: "#", count: pct / 4).padding(toLength: 25, withPad: ".", startingAt: 0)
        emit(
            ProgressLine(
                event: "bytes", package: id, done: d, total: t, overallDone: all, overallTotal: total),
            bar: "\r[\(bar)] \(pct)% \(Output.bytes(all)) of \(Output.bytes(total))")
    }

    private func emit(_ line: ProgressLine, bar: String?) {
        switch mode {
        case .json:
            guard let data = try? encoder.encode(line) else { return }
            output(String(decoding: data, as: UTF8.self) + "\n")
        case .bar:
            if let bar { output(bar) }
        case .none:
            return
        }
    }
}
