import Foundation
import Larder
import LarderTestSupport
import Synchronization
import Testing

/// An app's world: a `file://` repository of the sample app (routed at `https://app.example.com/`)
/// and a sandbox directory the app's `OfflinePackages` keeps in step with it.
final class AppWorld: Sendable {
    let temporary: TemporaryDirectory
    let repository: SampleRepository

    init() throws {
        temporary = try TemporaryDirectory("app")
        repository = SampleRepository(in: temporary.url)
    }

    var root: FilePath { FilePath(temporary.appending("sandbox").path) }

    func cleanup() { temporary.remove() }

    /// Publishes `version` of the sample app (its catalogue names the version).
    func publish(_ version: String) throws {
        try repository.publish(version, configure: { $0.routes = ["https://app.example.com/"] })
    }

    /// The app's configuration: this sandbox, this repository, its publisher's key; no timer
    /// unless a test sets one.
    func configuration(trusting key: PublicKey? = nil) -> OfflinePackages.Configuration {
        var c = OfflinePackages.Configuration(
            root: root, repository: repository.url.absoluteString, trustedKeys: [key ?? repository.key.publicKey])
        c.syncInterval = nil
        c.network = .offline
        return c
    }

    /// The package's state as the sandbox records it.
    func package() throws -> PackageState? { try SandboxReader(root: root).state().packages["sample-app"] }
}

/// Every event an `OfflinePackages` publishes, collected from one subscription.
final class EventLog: Sendable {
    /// The events so far and whether the stream has ended, shared with the collecting task.
    private final class Seen: Sendable {
        let events = Mutex<[OfflinePackages.Event]>([])
        let ended = Mutex(false)
    }
    private let seen: Seen
    private let task: Task<Void, Never>

    /// Subscribes now (before `start()`, as the README says).
    init(_ packages: OfflinePackages) {
        let stream = packages.events()
        let seen = Seen()
        self.seen = seen
        task = Task {
            for await event in stream { seen.events.withLock { $0.append(event) } }
            seen.ended.withLock { $0 = true }
        }
    }

    /// The events so far.
    var all: [OfflinePackages.Event] { seen.events.withLock { $0 } }

    /// Whether the stream has ended.
    var hasEnded: Bool { seen.ended.withLock { $0 } }

    /// Waits (polling every 10 ms, at most `seconds`: generous, for a whole `swift test` run on a
    /// busy machine, where the background syncs queue behind other suites) until `condition` holds
    /// for the events so far.
    @discardableResult
    func wait(_ seconds: Double = 300, until condition: ([OfflinePackages.Event]) -> Bool) async -> Bool {
        for _ in 0..<Int(seconds * 100) {
            if condition(all) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(all)
    }

    /// Waits for the stream to end.
    func waitForEnd() async { await task.value }
}

/// The short name of an event, for comparing sequences.
func kind(_ e: OfflinePackages.Event) -> String {
    switch e {
    case .launched: "launched"
    case .syncStarted: "syncStarted"
    case .syncSkipped: "syncSkipped"
    case .synced: "synced"
    case .syncFailed: "syncFailed"
    case .pageHealth: "pageHealth"
    case .storeFailed: "storeFailed"
    case .firstUse: "firstUse"
    }
}

/// The sync reports among `events`.
func reports(_ events: [OfflinePackages.Event]) -> [SyncReport] {
    events.compactMap { if case .synced(let r) = $0 { r } else { nil } }
}

/// The page-health outcomes among `events`.
func verdicts(_ events: [OfflinePackages.Event]) -> [PageHealthOutcome] {
    events.compactMap { if case .pageHealth(let o) = $0 { o } else { nil } }
}

/// The version a URL resolves to locally, or nil.
func localVersion(_ packages: OfflinePackages, _ url: String) -> String? {
    if case .local(let file) = packages.resolver.resolve(url) { return file.version.description }
    return nil
}

/// A scheme task as WebKit would hand it to the driver, recording what it is told.
final class RecordingTask: SchemeTask, Sendable {
    let schemeRequest: SchemeRequest
    private let heads = Mutex<[SchemeResponseHead]>([])
    private let bytes = Mutex(Data())
    private let end = Mutex<Result<Void, SchemeTaskError>?>(nil)

    init(_ request: SchemeRequest) { schemeRequest = request }

    func didReceive(_ head: SchemeResponseHead) { heads.withLock { $0.append(head) } }
    func didReceive(_ data: Data) { bytes.withLock { $0.append(data) } }
    func didFinish() { end.withLock { $0 = .success(()) } }
    func didFail(_ error: SchemeTaskError) { end.withLock { $0 = .failure(error) } }

    /// The head, the body and how it ended, once it has (polling every 10 ms, at most 300 s).
    func result() async -> (head: SchemeResponseHead?, body: Data, finished: Bool)? {
        for _ in 0..<30_000 {
            if let outcome = end.withLock({ $0 }) {
                let finished = (try? outcome.get()) != nil
                return (heads.withLock { $0.first }, bytes.withLock { $0 }, finished)
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }
}
