import Foundation

/// One activation of a package version: what a page-health verdict is about.
///
/// A package's activation number grows every time its active version changes (activation,
/// rollback), so a verdict reached about one activation is never applied to another — not to
/// a later activation of the same version either.
public struct ActivationRef: Hashable, Sendable, CustomStringConvertible {
    /// The package.
    public let package: PackageID
    /// The version that was active when the page loaded.
    public let version: SemanticVersion
    /// `PackageState.activationNumber` at that time.
    public let number: UInt64

    /// Creates a reference.
    package init(package: PackageID, version: SemanticVersion, number: UInt64) {
        self.package = package
        self.version = version
        self.number = number
    }

    /// `<id>@<version> (activation N)`.
    public var description: String { "\(package)@\(version) (activation \(number))" }
}

/// The page-health settings: how long a page may take, and how many script errors it may throw.
public struct PageHealthSettings: Sendable, Equatable {
    /// Seconds a page has to call `larder.ready()` after its main document finished loading
    /// (and, before that, to finish loading at all).
    public var readyDeadline: TimeInterval
    /// Uncaught script errors (and unhandled rejections) that fail a page before it is ready.
    public var maxScriptErrors: Int

    /// 30 seconds, 3 errors.
    public static let standard = PageHealthSettings(readyDeadline: 30, maxScriptErrors: 3)

    /// Creates settings; the deadline is at least 0.1 s and the error count at least 1.
    public init(readyDeadline: TimeInterval, maxScriptErrors: Int) {
        self.readyDeadline = max(0.1, readyDeadline)
        self.maxScriptErrors = max(1, maxScriptErrors)
    }
}

/// What a container observes about a page.
package enum PageSignal: Sendable, Equatable {
    /// The main document finished loading (the page's `load` event, WebKit's `didFinish`).
    case documentLoaded
    /// The page called `larder.ready()`.
    case ready
    /// An uncaught script error or unhandled promise rejection, as `window.onerror` saw it.
    case scriptError(message: String, source: String?, line: Int?)
    /// The main document could not be loaded (a network or HTTP error, WebKit's `didFail`).
    case loadFailed(reason: String)
    /// WebKit's web content process terminated as often as the container tolerates before the
    /// page is ready (a single termination is not a failure: the container reloads the page);
    /// `reason` says how often and why, as `WebViewHealth` words it.
    case processTerminated(reason: String)
}

/// A page's health, once decided.
public enum HealthVerdict: Sendable, Equatable, CustomStringConvertible {
    /// The page signalled ready in time: the version is confirmed.
    case healthy
    /// The page failed; the reason is for a person (and the store's history).
    case failed(reason: String)

    /// `healthy`, or `failed: <reason>`.
    public var description: String {
        switch self {
        case .healthy: "healthy"
        case .failed(let reason): "failed: \(reason)"
        }
    }
}

/// The page-health state machine of one page load: bound to the activation it watches, driven
/// by signals and by an injected clock (`now` in seconds on any monotonic clock), it reaches one
/// verdict and then ignores everything — a late signal changes nothing.
///
/// - Loading: `ready` → healthy; `documentLoaded` → waiting for ready; no signal until
///   `started + deadline` → failed (the page did not finish loading).
/// - Waiting: `ready` → healthy; `now ≥ loaded + deadline` → failed, naming the deadline and the
///   last script error seen.
/// - In both: the `maxScriptErrors`-th uncaught error, a load failure or a terminated content
///   process → failed at once.
package struct HealthMonitor: Sendable, Equatable {
    /// Where the page is in its life.
    package enum Phase: Sendable, Equatable {
        /// The main document is loading; the page must finish loading by the deadline.
        case loading(deadline: TimeInterval)
        /// Loaded; the page must signal ready by the deadline.
        case waiting(deadline: TimeInterval)
        /// Decided; nothing changes it.
        case decided(HealthVerdict)
    }

    /// The activation the page was loaded from.
    package let activation: ActivationRef
    /// The deadline and error limit.
    package let settings: PageHealthSettings
    /// The current phase.
    package private(set) var phase: Phase
    /// Uncaught script errors seen, as text (`message (source:line)`); the last few only.
    package private(set) var scriptErrors: [String] = []
    /// How many uncaught script errors were seen in all.
    package private(set) var scriptErrorCount = 0
    /// Why the page failed, as telemetry's `health-failed` reasons name it (`not-ready`,
    /// `script-error`, `load-failed`, `process-terminated`); nil while undecided or healthy.
    package private(set) var failureKind: String?

    /// A monitor for a page of `activation` whose load began at `now`.
    package init(activation: ActivationRef, settings: PageHealthSettings = .standard, startedAt now: TimeInterval) {
        self.activation = activation
        self.settings = settings
        phase = .loading(deadline: now + settings.readyDeadline)
    }

    /// The verdict, once reached.
    package var verdict: HealthVerdict? {
        if case .decided(let v) = phase { return v }
        return nil
    }

    /// When the monitor next decides on its own if no signal comes (nil once decided).
    package var deadline: TimeInterval? {
        switch phase {
        case .loading(let d), .waiting(let d): d
        case .decided: nil
        }
    }

    /// Applies `signal` observed at `now`; returns the verdict when this call reached it. A
    /// deadline that passed before `now` is applied first, so a ready signal after the deadline
    /// does not rescue the page.
    package mutating func handle(_ signal: PageSignal, at now: TimeInterval) -> HealthVerdict? {
        if let v = tick(at: now) { return v }
        guard verdict == nil else { return nil }
        switch signal {
        case .ready:
            return decide(.healthy)
        case .documentLoaded:
            if case .loading = phase { phase = .waiting(deadline: now + settings.readyDeadline) }
            return nil
        case .scriptError(let message, let source, let line):
            scriptErrorCount += 1
            scriptErrors.append(Self.describe(message: message, source: source, line: line))
            if scriptErrors.count > 5 { scriptErrors.removeFirst(scriptErrors.count - 5) }
            guard scriptErrorCount >= settings.maxScriptErrors else { return nil }
            let count =
                scriptErrorCount == 1 ? "an uncaught script error" : "\(scriptErrorCount) uncaught script errors"
            return decide(.failed(reason: "\(count) before the page was ready, the last: \(lastError)"), "script-error")
        case .loadFailed(let reason):
            return decide(.failed(reason: "the main document failed to load: \(reason)" + errorsSuffix), "load-failed")
        case .processTerminated(let reason):
            return decide(.failed(reason: "the web content process \(reason)" + errorsSuffix), "process-terminated")
        }
    }

    /// Applies the clock: returns the verdict when a deadline passed at `now` (and this call
    /// reached it).
    package mutating func tick(at now: TimeInterval) -> HealthVerdict? {
        switch phase {
        case .decided:
            return nil
        case .loading(let d) where now >= d:
            return decide(
                .failed(reason: "the page did not finish loading within \(seconds) s" + errorsSuffix), "not-ready")
        case .waiting(let d) where now >= d:
            return decide(
                .failed(reason: "no ready signal within \(seconds) s after the page loaded" + errorsSuffix), "not-ready"
            )
        case .loading, .waiting:
            return nil
        }
    }

    private mutating func decide(_ v: HealthVerdict, _ kind: String? = nil) -> HealthVerdict {
        phase = .decided(v)
        failureKind = kind
        return v
    }

    /// What telemetry reports about the page once decided (format §19).
    package var facts: PageFacts { PageFacts(failure: failureKind, scriptErrors: scriptErrorCount) }

    private var seconds: String {
        let d = settings.readyDeadline
        return d == d.rounded() ? "\(Int(d))" : String(format: "%.1f", d)
    }

    private var lastError: String { scriptErrors.last ?? "" }

    private var errorsSuffix: String {
        switch scriptErrorCount {
        case 0: ""
        case 1: "; an uncaught script error: \(lastError)"
        default: "; \(scriptErrorCount) uncaught script errors, the last: \(lastError)"
        }
    }

    /// `message (source:line)`, each part cut to a readable length.
    static func describe(message: String, source: String?, line: Int?) -> String {
        var text = Self.cut(message.isEmpty ? "(no message)" : message, 300)
        if let s = source, !s.isEmpty { text += " (\(Self.cut(s, 200))\(line.map { ":\($0)" } ?? ""))" }
        return text
    }

    static func cut(_ s: String, _ n: Int) -> String {
        let flat = s.replacingOccurrences(of: "\n", with: " ")
        return flat.count <= n ? flat : String(flat.prefix(n)) + "…"
    }
}

extension PageSignal {
    /// Decodes a message the page-health script posts: `{"event": "ready" | "loaded" | "error",
    /// "message", "source", "line"}`. Returns why not when the message is not one of those.
    package static func decode(_ data: Data) -> Result<PageSignal, PageSignalError> {
        guard data.count <= 64 << 10 else { return .failure(PageSignalError("the message is larger than 64 KiB")) }
        guard let object = try? JSONSerialization.jsonObject(with: data), let fields = object as? [String: Any] else {
            return .failure(PageSignalError("the message is not a JSON object"))
        }
        guard let event = fields["event"] as? String else {
            return .failure(PageSignalError("the message has no \"event\" string"))
        }
        switch event {
        case "ready": return .success(.ready)
        case "loaded": return .success(.documentLoaded)
        case "error":
            let line = (fields["line"] as? NSNumber)?.intValue
            return .success(
                .scriptError(
                    message: fields["message"] as? String ?? "", source: fields["source"] as? String,
                    line: line.flatMap { $0 > 0 ? $0 : nil }))
        default:
            return .failure(PageSignalError("unknown event \"\(HealthMonitor.cut(event, 40))\" (ready, loaded, error)"))
        }
    }
}

/// Why a page-health message was refused.
public struct PageSignalError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong.
    public let description: String
    /// Creates an error.
    package init(_ description: String) { self.description = description }
}

/// What telemetry reports about one page's verdict (format §19): why it failed, and how many
/// uncaught script errors it threw while watched.
package struct PageFacts: Sendable, Equatable {
    /// `health-failed`'s reason, or nil for a healthy page.
    package var failure: String?
    /// Uncaught script errors (and unhandled rejections) seen.
    package var scriptErrors: Int

    /// Nothing to report.
    package static let none = PageFacts(failure: nil, scriptErrors: 0)

    /// Creates facts.
    package init(failure: String?, scriptErrors: Int) {
        self.failure = failure
        self.scriptErrors = scriptErrors
    }
}
