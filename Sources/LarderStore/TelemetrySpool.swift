import Foundation
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// The device's telemetry spool under `<root>/telemetry/` (format §19, "On the device").
///
/// Events are recorded only while telemetry is on in `config.json` and the accepted index names
/// a collector that samples this install. Nothing here throws to its caller: a spool that cannot
/// be written loses events (logged), never a sync or a page. Every file is written whole
/// (temporary file, fsync, rename) under `telemetry/lock`, so a crash leaves the spool as it was
/// before or after a change.
package struct TelemetrySpool: Sendable {
    /// `<root>/telemetry`.
    package let directory: FilePath
    let config: FilePath
    let logger: Logger

    /// The most bytes the spool files hold; past it the oldest are dropped (and counted).
    package static let maxBytes = 256 << 10
    /// An install id older than this is replaced.
    package static let installLifetime: TimeInterval = 30 * 86_400
    /// A spool file is added to (merged) while it is smaller than this and of the same hour.
    static let mergeBytes = 16 << 10

    /// The spool of the sandbox at `root`.
    package init(root: FilePath, logger: Logger = Logger(label: "larder.telemetry")) {
        let layout = SandboxLayout(root: root)
        directory = layout.root.joined("telemetry")
        config = layout.config
        self.logger = logger
    }

    var installFile: FilePath { directory.joined("install.json") }
    var collectorFile: FilePath { directory.joined("collector.json") }
    var spoolDirectory: FilePath { directory.joined("spool") }
    var outboxFile: FilePath { directory.joined("outbox.json") }
    var stateFile: FilePath { directory.joined("state.json") }
    var lockFile: FilePath { directory.joined("lock") }

    /// The install id, when it was made.
    struct Install: Codable {
        var id: String
        var created: Date
    }

    /// Drops, failures and back-off.
    package struct SendState: Codable, Sendable, Equatable {
        /// Events dropped since the last batch a collector took.
        package var dropped = 0
        /// Failed attempts in a row.
        package var failures = 0
        /// No attempt before this instant.
        package var nextAttempt: Date?
        /// When a collector last took a batch.
        package var lastSent: Date?
        /// The hour `checked` events were last recorded in (at most once an hour).
        package var checkedHour: Date?
    }

    /// The batch being sent, kept until a collector takes or refuses it.
    package struct Outbox: Codable, Sendable, Equatable {
        /// The highest spool sequence number it took.
        package var through: UInt64
        /// The batch, its id fixed.
        package var batch: TelemetryBatch
    }

    /// What the device would report with, when it reports at all.
    package struct Context: Sendable {
        /// The collector.
        package var collector: TelemetrySettings
        /// The install id.
        package var install: String
        /// The channel the device follows.
        package var channel: Channel
        /// The app's version.
        package var app: SemanticVersion
    }

    // MARK: switches

    /// Whether the app turned telemetry on (`config.json`'s `telemetry`).
    package var isOn: Bool { (try? SyncConfig.load(root: directory.removingLastComponent()))?.telemetry == true }

    /// Records the accepted index's collector (nil removes it). Called when a sync accepts an index.
    package func setCollector(_ settings: TelemetrySettings?) {
        guard isOn || settings == nil else { return }
        let current: TelemetrySettings? = load(collectorFile)
        guard current != settings else { return }
        attempt("record the collector") { () throws(FileSystemError) in
            if let s = settings {
                try AtomicFile.makeDirectories(directory)
                try AtomicFile.write(try encode(s), to: collectorFile)
            } else if AtomicFile.exists(collectorFile) {
                try SystemCalls.unlink(collectorFile)
            }
        }
    }

    /// Turns telemetry off: the switch in `config.json` and every file of the spool (the install
    /// id included, so a later `on` starts as a new install).
    package func turnOff() throws(FileSystemError) {
        if AtomicFile.exists(directory) { try SystemCalls.removeTree(directory) }
    }

    /// The context events are recorded in, or nil when the device does not report (off, no
    /// collector, or not in the sample). Makes or renews the install id.
    package func context(now: Date) -> Context? {
        guard let cfg = try? SyncConfig.load(root: directory.removingLastComponent()), cfg.telemetry == true,
            let collector: TelemetrySettings = load(collectorFile)
        else { return nil }
        let install = installID(now: now)
        guard let install, collector.includes(install: install) else { return nil }
        return Context(collector: collector, install: install, channel: cfg.channel, app: cfg.appVersion)
    }

    private func installID(now: Date) -> String? {
        if let i: Install = load(installFile), now.timeIntervalSince(i.created) < Self.installLifetime,
            now >= i.created
        {
            return i.id
        }
        let fresh = Install(id: TelemetryBatch.randomID(), created: now)
        var ok = false
        attempt("make an install id") { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(directory)
            try AtomicFile.write(try encode(fresh), to: installFile)
            ok = true
        }
        return ok ? fresh.id : nil
    }

    // MARK: recording

    /// Records the events `make` builds in the device's context, when the device reports.
    package func record(now: Date = Date(), _ make: (Context) -> [TelemetryEvent]) {
        guard let ctx = context(now: now) else { return }
        var events = make(ctx)
        guard !events.isEmpty else { return }
        locked("record events") { () throws(FileSystemError) in
            // `checked` says which version runs: once an hour is enough.
            let checked = TelemetryKind.checked.rawValue
            if events.contains(where: { $0.kind == checked }) {
                var s = readState()
                let hour = TelemetryEvent.hour(of: now)
                if s.checkedHour == hour {
                    events.removeAll { $0.kind == checked }
                } else {
                    s.checkedHour = hour
                    try AtomicFile.write(try encode(s), to: stateFile)
                }
            }
            guard !events.isEmpty else { return }
            try AtomicFile.makeDirectories(spoolDirectory)
            var files = try spoolFiles()
            // Merged into the newest file while it is small and of the same hour.
            if let last = files.last, last.size < Self.mergeBytes,
                let held: [TelemetryEvent] = load(spoolDirectory.joined(last.name)),
                held.first.map({ $0.hour == events[0].hour }) ?? false
            {
                let merged = TelemetryEvent.merged(held + events)
                let name = SpoolFile.name(seq: last.seq, count: merged.count)
                try AtomicFile.write(try encode(merged, compact: true), to: spoolDirectory.joined(name))
                if name != last.name { try SystemCalls.unlink(spoolDirectory.joined(last.name)) }
            } else {
                let merged = TelemetryEvent.merged(events)
                let seq = max(files.last?.seq ?? 0, readOutbox()?.through ?? 0) + 1
                try AtomicFile.write(
                    try encode(merged, compact: true),
                    to: spoolDirectory.joined(SpoolFile.name(seq: seq, count: merged.count)))
            }
            files = try spoolFiles()
            try trim(files)
        }
    }

    /// Drops the oldest files while the spool is over `maxBytes`, counting their events.
    private func trim(_ files: [SpoolFile]) throws(FileSystemError) {
        var total = files.reduce(0) { $0 + $1.size }
        var dropped = 0
        for f in files where total > Self.maxBytes {
            try SystemCalls.unlink(spoolDirectory.joined(f.name))
            total -= f.size
            dropped += f.count
        }
        if dropped > 0 {
            var s = readState()
            s.dropped += dropped
            try AtomicFile.write(try encode(s), to: stateFile)
            logger.notice("telemetry spool full: dropped the \(dropped) oldest events")
        }
    }

    // MARK: sending

    /// The batch to send now: the outbox left by an earlier attempt, else a new one made of the
    /// oldest spool files (written to the outbox first, then those files removed). Nil when there
    /// is nothing to send or the back-off says not yet (`force` ignores the back-off).
    package func nextBatch(now: Date, force: Bool = false) -> (Outbox, TelemetrySettings)? {
        guard let ctx = context(now: now) else { return nil }
        if !force, let next = readState().nextAttempt, now < next { return nil }
        var out: Outbox?
        locked("make a batch") { () throws(FileSystemError) in
            if let o = readOutbox() {
                try removeSpool(through: o.through)
                out = o
                return
            }
            var events: [TelemetryEvent] = []
            var through: UInt64 = 0
            for f in try spoolFiles() {
                guard let held: [TelemetryEvent] = load(spoolDirectory.joined(f.name)) else {
                    // A file this code cannot read is dropped, and counted.
                    try SystemCalls.unlink(spoolDirectory.joined(f.name))
                    continue
                }
                if !events.isEmpty && events.count + held.count > TelemetryBatch.maxEvents { break }
                events += held.prefix(TelemetryBatch.maxEvents)
                through = f.seq
            }
            guard !events.isEmpty else { return }
            let batch = TelemetryBatch(
                batch: TelemetryBatch.randomID(), install: ctx.install, app: ctx.app.description,
                dropped: readState().dropped, events: events)
            let o = Outbox(through: through, batch: batch)
            try AtomicFile.write(try encode(o, compact: true), to: outboxFile)
            try removeSpool(through: through)
            out = o
        }
        return out.map { ($0, ctx.collector) }
    }

    /// How a send ended.
    package enum SendResult: Sendable, Equatable {
        /// The collector took it (or had it already).
        case taken
        /// The collector refused it for good: its events are dropped, and counted.
        case refused
        /// Try again later (network, 429, 5xx).
        case retry
    }

    /// Settles the outbox after a send.
    package func settle(_ outbox: Outbox, _ result: SendResult, now: Date) {
        locked("settle a batch") { () throws(FileSystemError) in
            var s = readState()
            switch result {
            case .taken, .refused:
                if AtomicFile.exists(outboxFile) { try SystemCalls.unlink(outboxFile) }
                // The batch carried `dropped` as it was when made; drops since stay counted.
                s.dropped = max(0, s.dropped - outbox.batch.dropped)
                if result == .refused { s.dropped += outbox.batch.events.count }
                s.failures = 0
                s.nextAttempt = nil
                if result == .taken { s.lastSent = now }
            case .retry:
                s.failures += 1
                s.nextAttempt = now.addingTimeInterval(Self.backOff(failures: s.failures))
            }
            try AtomicFile.write(try encode(s), to: stateFile)
        }
    }

    /// The wait after `failures` failures in a row: 1 minute doubled each time, at most 6 hours.
    package static func backOff(failures: Int) -> TimeInterval {
        min(6 * 3600, 60 * pow(2, Double(max(0, min(failures, 20) - 1))))
    }

    // MARK: status

    /// The spool's status.
    package func status(now: Date) -> TelemetryStatus {
        let collector: TelemetrySettings? = load(collectorFile)
        let on = isOn
        let files = (try? spoolFiles()) ?? []
        let outbox = readOutbox()
        let s = readState()
        let install: Install? = load(installFile)
        return TelemetryStatus(
            on: on, endpoint: collector?.endpoint, sample: collector?.rate,
            sampled: on ? collector.map { c in install.map { c.includes(install: $0.id) } ?? false } : nil,
            pendingEvents: files.reduce(0) { $0 + $1.count } + (outbox?.batch.events.count ?? 0),
            spoolBytes: files.reduce(0) { $0 + $1.size }, outbox: outbox != nil, dropped: s.dropped,
            failures: s.failures, nextAttempt: s.nextAttempt, lastSent: s.lastSent)
    }

    /// The events waiting in the spool, oldest first (not those of the outbox).
    package func spooledEvents() -> [TelemetryEvent] {
        ((try? spoolFiles()) ?? []).flatMap { f -> [TelemetryEvent] in load(spoolDirectory.joined(f.name)) ?? [] }
    }

    // MARK: files

    /// `spool/<seq>-<count>.json`.
    struct SpoolFile {
        var name: String
        var seq: UInt64
        var count: Int
        var size: Int

        static func name(seq: UInt64, count: Int) -> String { String(format: "%016llu-%d.json", seq, count) }
    }

    /// The spool's files, oldest first (a name this code did not write is ignored).
    /// A merge writes the file of a `seq` anew under a larger count and then removes the old name;
    /// when a power cut loses that removal, the larger supersedes it (it holds its events), so
    /// only it is listed (`all` lists every file, for removal).
    func spoolFiles(all: Bool = false) throws(FileSystemError) -> [SpoolFile] {
        guard AtomicFile.isDirectory(spoolDirectory) else { return [] }
        var out: [SpoolFile] = []
        for e in try SystemCalls.listDirectory(spoolDirectory) {
            let name = e.string
            guard name.hasSuffix(".json") else { continue }
            let parts = name.dropLast(5).split(separator: "-")
            guard parts.count == 2, let seq = UInt64(parts[0]), let count = Int(parts[1]) else { continue }
            let size = (try? SystemCalls.lstat(spoolDirectory.joined(name)).size).map(Int.init) ?? 0
            out.append(SpoolFile(name: name, seq: seq, count: count, size: size))
        }
        if !all {
            var newest: [UInt64: SpoolFile] = [:]
            for f in out where (newest[f.seq]?.count ?? -1) < f.count { newest[f.seq] = f }
            out = Array(newest.values)
        }
        return out.sorted { $0.seq < $1.seq }
    }

    /// Removes the spool files an outbox took, durably before anything is sent: a lost removal
    /// would bring events back after the collector took them.
    private func removeSpool(through seq: UInt64) throws(FileSystemError) {
        let taken = try spoolFiles(all: true).filter { $0.seq <= seq }
        for f in taken { try SystemCalls.unlink(spoolDirectory.joined(f.name)) }
        if !taken.isEmpty { try AtomicFile.syncDirectory(spoolDirectory) }
    }

    func readState() -> SendState { load(stateFile) ?? SendState() }
    func readOutbox() -> Outbox? { load(outboxFile) }

    private func load<T: Decodable>(_ path: FilePath) -> T? {
        guard AtomicFile.exists(path), let data = try? AtomicFile.read(path, limit: 2 << 20) else { return nil }
        return try? ManifestCoding.decode(T.self, from: data, document: path.lastComponent?.string ?? "telemetry")
    }

    private func encode<T: Encodable>(_ value: T, compact: Bool = false) throws(FileSystemError) -> Data {
        do { return try ManifestCoding.encode(value, compact: compact) } catch {
            throw FileSystemError("encode", directory, .invalidArgument)
        }
    }

    /// Runs `body` under the spool's lock; a failure is logged, never thrown.
    private func locked(_ what: String, _ body: () throws(FileSystemError) -> Void) {
        attempt(what) { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(directory)
            let lock: FileLock
            do { lock = try FileLock(path: lockFile, timeout: 5) } catch {
                throw FileSystemError("lock", lockFile, .resourceTemporarilyUnavailable)
            }
            defer { lock.unlock() }
            try body()
        }
    }

    private func attempt(_ what: String, _ body: () throws(FileSystemError) -> Void) {
        do { try body() } catch { logger.notice("telemetry: could not \(what): \(error)") }
    }
}

/// What a sandbox's telemetry spool holds (`larder telemetry status`, `OfflinePackages.telemetryStatus`).
public struct TelemetryStatus: Codable, Sendable, Equatable {
    /// The app turned telemetry on.
    public var on: Bool
    /// The collector the accepted index names.
    public var endpoint: String?
    /// Its sample rate.
    public var sample: Double?
    /// Whether this install is in the sample (nil when off or no collector).
    public var sampled: Bool?
    /// Events waiting in the spool and the outbox.
    public var pendingEvents: Int
    /// The spool's bytes.
    public var spoolBytes: Int
    /// Whether a batch waits to be sent again.
    public var outbox: Bool
    /// Events dropped since the last batch taken.
    public var dropped: Int
    /// Failed attempts in a row.
    public var failures: Int
    /// No attempt before.
    public var nextAttempt: Date?
    /// When a collector last took a batch.
    public var lastSent: Date?
}
