import CLarderShim
import Foundation
import LarderCore
import LarderFileSystem
import LarderStore
import Synchronization
import SystemPackage

/// Resolves URLs to files of a sandbox, for the life of an app or a gateway. Takes no lock on
/// the sandbox and never waits for a writer.
///
/// It holds one immutable `Snapshot` at a time. Each call first checks the sandbox's generation
/// word (`<root>/generation`, mapped into memory once, so the check is one memory load and no
/// system call); when a writer has committed a new state, the calling thread builds the new
/// snapshot and swaps it in, while other threads go on resolving with the old one. Where the word
/// cannot be mapped (a sandbox written by an older Larder, or not yet written), the state file's
/// identity is checked instead, at most every 5 ms.
public final class Resolver: Sendable {
    /// The sandbox's root directory.
    public let root: FilePath
    /// Custom schemes routed like `larder:` (lower case).
    public let schemes: Set<String>
    /// The sandbox's file layout under `root` (state file, generation word, version trees).
    package let layout: SandboxLayout
    /// `layout.packages` as text, for `filePath`.
    private let packagesDirectory: String
    /// What this process's syncs hand over, if the app shares one with them.
    let handoff: ServingHandoff?
    private let watch: GenerationWatch
    /// The snapshot resolved with, the generation token it was built for, and whether a thread
    /// is building the next one.
    private struct Live {
        var current: Snapshot
        var seenToken: UInt64
        var rebuilding = false
    }

    private let live: Mutex<Live>

    /// Opens the sandbox at `root` for resolving and reads its current state. `handoff`, when
    /// the app's syncs share it, hands this resolver what they wrote (see `ServingHandoff`).
    public init(root: FilePath, schemes: Set<String> = [], handoff: ServingHandoff? = nil) throws(StoreError) {
        self.root = root
        self.schemes = Set(schemes.map { $0.lowercased() })
        self.handoff = handoff
        layout = SandboxLayout(root: root)
        packagesDirectory = layout.packages.string
        watch = GenerationWatch(layout: layout)
        let token = watch.token()
        handoff?.readerOpened()
        do {
            live = Mutex(
                Live(current: try Snapshot.load(root: root, schemes: self.schemes, handoff: handoff), seenToken: token))
        } catch {
            handoff?.readerClosed()
            throw error
        }
    }

    deinit { handoff?.readerClosed() }

    /// A resolver for a one-shot lookup of `url` (`larder resolve`): its first snapshot routes
    /// every package but reads the file list only of the package `url` routes to, so the lookup
    /// costs one list however many packages are installed. Other packages' URLs find no file
    /// until the sandbox changes (the next snapshot is a whole one): resolve `url`, or other URLs
    /// of its package, with it.
    public init(root: FilePath, schemes: Set<String> = [], onlyFor url: String) throws(StoreError) {
        self.root = root
        self.schemes = Set(schemes.map { $0.lowercased() })
        layout = SandboxLayout(root: root)
        packagesDirectory = layout.packages.string
        watch = GenerationWatch(layout: layout)
        let token = watch.token()
        handoff = nil
        live = Mutex(
            Live(
                current: try Snapshot.load(root: root, schemes: self.schemes, handoff: nil, onlyFor: url),
                seenToken: token))
    }

    /// The snapshot to resolve with now: the current one, or — when the sandbox changed since it
    /// was built — a new one (built by this thread unless another is already building it, in
    /// which case this thread keeps the current one).
    package func snapshot() -> Snapshot {
        let token = watch.token()
        let (snap, build) = live.withLock { live in
            guard token != live.seenToken, !live.rebuilding else { return (live.current, false) }
            live.rebuilding = true
            return (live.current, true)
        }
        guard build else { return snap }
        let fresh = try? Snapshot.load(root: root, schemes: schemes, handoff: handoff, reusing: snap)
        let now = live.withLock { live in
            live.rebuilding = false
            // An unreadable state (a writer's bug, a damaged disk) keeps the last good snapshot;
            // the token is still recorded so the failure is not retried on every call.
            live.seenToken = token
            if let fresh { live.current = fresh }
            return live.current
        }
        if fresh != nil { Self.retire(consume snap) }
        return now
    }

    /// Lets go of a replaced snapshot on a background queue: when it is the last reference, freeing
    /// its table and the settings and versions of every package (milliseconds at 10,000
    /// packages) is not done on the thread that resolves.
    private static func retire(_ old: Snapshot) {
        DispatchQueue.global(qos: .utility).async { withExtendedLifetime(old) {} }
    }

    /// Rebuilds the snapshot now, whatever the generation word says (reusing the parts of the
    /// current one that have not changed).
    @discardableResult
    package func reload() throws(StoreError) -> Snapshot {
        let token = watch.token()
        let previous = live.withLock { $0.current }
        let fresh = try Snapshot.load(root: root, schemes: schemes, handoff: handoff, reusing: previous)
        live.withLock { live in
            live.seenToken = token
            live.current = fresh
        }
        Self.retire(consume previous)
        return fresh
    }

    /// Resolves a URL with the current snapshot.
    public func resolve(_ url: String) -> Resolution {
        snapshot().resolve(url)
    }

    /// The file on disk for a local resolution.
    package func filePath(_ f: LocalFile) -> FilePath {
        // Joined as text and made a path once (every request that opens a file asks this): the
        // same path as `layout.tree(f.package, f.version).joined(f.path.string)`, whose
        // components are plain names and a relative path already checked.
        FilePath("\(packagesDirectory)/\(f.package.rawValue)/\(f.version)/\(f.path.string)")
    }

    /// Whether the file a resolution names is on disk as a regular file (one `stat`; the hot
    /// path never asks this, the loader finds out when it opens the file).
    package func isOnDisk(_ f: LocalFile) -> Bool {
        (try? SystemCalls.stat(filePath(f)))?.kind == .regular
    }

    /// Starts a session (e.g. one web view) that pins the active version of each package in
    /// `ids`: until the session is released or this process dies, those packages resolve to the
    /// versions pinned here — even after an update activates another — and gc keeps them on
    /// disk. Other packages resolve as the sandbox changes.
    package func session(pinning ids: [String]) throws(StoreError) -> ResolverSession {
        var typed: [PackageID] = []
        for text in ids {
            guard let id = PackageID(text) else { throw .badID(text) }
            typed.append(id)
        }
        return try session(pinning: typed)
    }

    /// As `session(pinning:)` with the ids typed.
    package func session(pinning ids: [PackageID]) throws(StoreError) -> ResolverSession {
        let reader = SandboxReader(root: root)
        var leases: [PinLease] = []
        var pinned: [RoutedPackage] = []
        for id in ids {
            let lease = try reader.pin(id: id)
            leases.append(lease)
            guard let pkg = snapshot().routed(layout, lease.id, lease.version) else {
                for l in leases { l.release() }
                throw .notInstalled(id: id.rawValue, version: lease.version.description)
            }
            pinned.append(pkg)
        }
        return ResolverSession(resolver: self, leases: leases, pinned: pinned)
    }
}

/// A set of pinned package versions over a live resolver (see `Resolver.session(pinning:)`).
public final class ResolverSession: Sendable {
    /// The live resolver; packages the session does not pin resolve through it as the sandbox changes.
    package let resolver: Resolver
    /// One lease per pinned package, in the order pinned; `release()` gives them all back.
    package let leases: [PinLease]
    let pinned: [RoutedPackage]
    /// The last table made, with the snapshot it was made from.
    private let cache = Mutex<(Snapshot, RouteTable)?>(nil)

    init(resolver: Resolver, leases: [PinLease], pinned: [RoutedPackage]) {
        self.resolver = resolver
        self.leases = leases
        self.pinned = pinned
    }

    /// The pinned version of each pinned package.
    public var versions: [PackageID: SemanticVersion] {
        Dictionary(pinned.map { ($0.id, $0.version) }, uniquingKeysWith: { a, _ in a })
    }

    /// The table this session resolves with: the resolver's current one with the pinned versions
    /// put back.
    package func table() -> (Snapshot, RouteTable) {
        let snap = resolver.snapshot()
        if let c = cache.withLock({ $0 }), c.0 === snap { return c }
        let t = snap.table.replacing(pinned)
        cache.withLock { $0 = (snap, t) }
        return (snap, t)
    }

    /// Resolves a URL with the pinned versions.
    public func resolve(_ url: String) -> Resolution {
        table().1.resolve(url)
    }

    /// Gives the pinned versions back to gc. Idempotent; also done when the session is freed.
    public func release() {
        for l in leases { l.release() }
    }
}

/// Tells cheaply whether the sandbox's state may have changed (see `Resolver`).
final class GenerationWatch: @unchecked Sendable {
    // @unchecked: `mapped` (a raw pointer) is immutable after init; the rest is behind `fallback`.
    let layout: SandboxLayout
    /// The generation word, mapped read-only (8 bytes of `<root>/generation`).
    private let mapped: UnsafeRawPointer?
    /// Without the word at init: its mapping once the file has it, else the last token and when
    /// it was computed.
    private struct Fallback {
        var lateMapping: UnsafeRawPointer?
        var lastCheck: UInt64 = 0
        var lastToken: UInt64 = 0
    }

    private let fallback = Mutex(Fallback())

    init(layout: SandboxLayout) {
        self.layout = layout
        mapped = Self.map(layout.generation)
    }

    deinit {
        if let m = mapped { try? SystemCalls.unmap(m, length: 8, path: layout.generation) }
        if let m = fallback.withLock({ $0.lateMapping }) {
            try? SystemCalls.unmap(m, length: 8, path: layout.generation)
        }
    }

    /// A number that changes when the state changes: the generation word; else (no word yet) a
    /// digest of state.json's inode and modification time, looked at most every 5 ms.
    func token() -> UInt64 {
        if let m = mapped { return larder_load_u64(m) }
        return slowToken()
    }

    private func slowToken() -> UInt64 {
        fallback.withLock { f in
            if let m = f.lateMapping { return larder_load_u64(m) }
            let now = Self.monotonicMilliseconds()
            if f.lastCheck != 0 && now &- f.lastCheck < 5 { return f.lastToken }
            f.lastCheck = now
            if let m = Self.map(layout.generation) {
                f.lateMapping = m
                return larder_load_u64(m)
            }
            guard let st = try? SystemCalls.stat(layout.state) else {
                f.lastToken = 0
                return 0
            }
            let mtime = st.modificationTime
            let nanos =
                UInt64(truncatingIfNeeded: mtime.seconds) &* 1_000_000_000
                &+ UInt64(truncatingIfNeeded: mtime.nanoseconds)
            f.lastToken = (st.inode &* 0x9E37_79B9_7F4A_7C15) ^ nanos ^ (1 << 63)
            return f.lastToken
        }
    }

    /// Maps the first 8 bytes of `path` read-only, when the file holds at least 8 bytes (a
    /// mapping past the end of a file faults on access).
    static func map(_ path: FilePath) -> UnsafeRawPointer? {
        guard let fd = try? SystemCalls.open(path, .readOnly) else { return nil }
        defer { try? SystemCalls.close(fd, path: path) }
        guard let st = try? SystemCalls.fstat(fd, path: path), st.kind == .regular, st.size >= 8 else { return nil }
        return try? SystemCalls.mapReadOnly(fd, length: 8, path: path)
    }

    static func monotonicMilliseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1000 &+ UInt64(ts.tv_nsec) / 1_000_000
    }
}
