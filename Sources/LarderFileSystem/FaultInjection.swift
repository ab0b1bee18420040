import LarderCore
import Synchronization
import SystemPackage

/// A kind of system call the funnel makes (`SystemCalls`); faults are injected by kind.
///
/// The raw value is the name of the C call, which is also the `operation` of the
/// `FileSystemError` it throws (except `open` with `.exclusiveCreate`, reported as `create`).
/// The `…at` variants count as their plain kind (`openat` is `.open`, `mkdirat` is `.mkdir`,
/// `unlinkat` is `.unlink` or `.rmdir`, `fstatat` without following links is `.lstat`).
package enum SystemCall: String, Sendable, Hashable, CaseIterable {
    /// `open(2)` / `openat(2)`.
    case open
    /// `close(2)`.
    case close
    /// `read(2)`.
    case read
    /// `pread(2)`.
    case pread
    /// `write(2)`.
    case write
    /// `pwrite(2)`.
    case pwrite
    /// `lseek(2)`.
    case seek = "lseek"
    /// `fsync(2)` (`F_FULLFSYNC` first on Darwin).
    case fsync
    /// `fdatasync(2)` (`fsync` where the platform has none).
    case fdatasync
    /// `syncfs(2)` (Linux).
    case syncfs
    /// `ftruncate(2)`.
    case ftruncate
    /// `flock(2)`.
    case flock
    /// `stat(2)`.
    case stat
    /// `lstat(2)` / `fstatat(2)` with `AT_SYMLINK_NOFOLLOW`.
    case lstat
    /// `fstat(2)`.
    case fstat
    /// `rename(2)`.
    case rename
    /// `link(2)`.
    case link
    /// `unlink(2)` / `unlinkat(2)`.
    case unlink
    /// `mkdir(2)` / `mkdirat(2)`.
    case mkdir
    /// `rmdir(2)` / `unlinkat(2)` with `AT_REMOVEDIR`.
    case rmdir
    /// `opendir(3)` / `fdopendir(3)`.
    case opendir
    /// `readdir(3)`.
    case readdir
    /// `mmap(2)`.
    case mmap
    /// `munmap(2)`.
    case munmap
    /// `utimensat(2)`.
    case utimens = "utimensat"
    /// `pipe(2)`.
    case pipe
    /// `statvfs(3)`: the free space of a file system.
    case statvfs

    /// The kinds a `Fault.loseWrite` may target: writes and flushes.
    package static let losable: Set<SystemCall> = [.write, .pwrite, .fsync, .fdatasync, .syncfs]

    /// The kinds that can change what is on disk (and `open`, which may create): the points at
    /// which a crash leaves a different disk state. A `Fault.crash` counts these.
    package static let changing: Set<SystemCall> = [
        .open, .write, .pwrite, .fsync, .fdatasync, .syncfs, .ftruncate, .rename, .link, .unlink, .mkdir, .rmdir,
        .utimens,
    ]
}

/// A fault to inject into the funnel: the `nth` call of a kind (and the `times - 1` after it)
/// fails with an errno, or loses its write, instead of doing what it was asked.
package struct Fault: Sendable, Equatable, CustomStringConvertible {
    /// What a hit call does.
    package enum Effect: Sendable, Equatable {
        /// The call is not made; it fails with this errno (`.interrupted` is retried as a real
        /// `EINTR` would be, and counts as a further call).
        case fail(Errno)
        /// The call reports success but nothing happens: a write's bytes are dropped (a
        /// sequential `write` still moves the file offset past them, as a lost block would
        /// leave a hole), a flush is skipped — what a lying or failing disk does.
        case loseWrite
        /// The process kills itself with SIGKILL before the call, after one line on stderr
        /// naming the call and its path: a crash at exactly that point.
        case crash
    }

    /// The kind of call it targets.
    package var kind: SystemCall
    /// For a crash: every kind it counts (`SystemCall.changing`), instead of `kind` alone.
    package var kinds: Set<SystemCall>? = nil
    /// The first call it hits, counting from 1 the calls of `kind` on paths under the scope's
    /// root (retries after `EINTR` count).
    package var nth: Int
    /// How many consecutive calls it hits, from the `nth` (`Int.max`: every one after it).
    package var times: Int
    /// What the hit calls do.
    package var effect: Effect
    /// Whether a hit call names itself on stderr (`larder: fault injected: …`), as a crash
    /// always does: for the CLI's fault seam, whose scripts need to know that the fault hit.
    package var announced = false

    /// The `nth` call of `kind` (and `times - 1` more) fails with `errno`.
    package static func fail(kind: SystemCall, nth: Int = 1, times: Int = 1, errno: Errno) -> Fault {
        precondition(nth >= 1 && times >= 1, "a fault hits from the first call on, at least once")
        return Fault(kind: kind, nth: nth, times: times, effect: .fail(errno))
    }

    /// The `nth` write or flush of `kind` (and `times - 1` more) reports success and does nothing.
    package static func loseWrite(kind: SystemCall = .write, nth: Int = 1, times: Int = 1) -> Fault {
        precondition(SystemCall.losable.contains(kind), "only writes and flushes can be lost, not \(kind)")
        precondition(nth >= 1 && times >= 1, "a fault hits from the first call on, at least once")
        return Fault(kind: kind, nth: nth, times: times, effect: .loseWrite)
    }

    /// The process dies (SIGKILL) just before the `nth` call that can change the disk
    /// (`SystemCall.changing`, counted together) on a path under the scope's root.
    package static func crash(nth: Int) -> Fault {
        precondition(nth >= 1, "a crash hits from the first call on")
        return Fault(kind: .open, kinds: SystemCall.changing, nth: nth, times: 1, effect: .crash)
    }

    /// Whether it counts calls of `call`.
    func counts(_ call: SystemCall) -> Bool { kinds?.contains(call) ?? (kind == call) }

    /// Whether the `n`th call of its kind is hit.
    func hits(_ n: Int) -> Bool { n >= nth && n - nth < times }

    /// For example `write #3 fails with ENOSPC`.
    package var description: String {
        let which = times == 1 ? "#\(nth)" : times == .max ? "#\(nth) onwards" : "#\(nth)…#\(nth + times - 1)"
        switch effect {
        case .fail(let e): return "\(kind.rawValue) \(which) fails with errno \(e.rawValue) (\(e))"
        case .loseWrite: return "\(kind.rawValue) \(which) is lost"
        case .crash: return "the process crashes before changing call \(which)"
        }
    }
}

/// Faults installed for the system calls on paths under one directory, until removed.
///
/// Hold it for as long as the faults should apply: `remove()` (or the scope's deallocation)
/// takes them out. `FaultInjector.withFaults` does both for a block.
package final class FaultScope: Sendable {
    /// The directory whose paths (and the paths below it) the faults apply to.
    package let root: FilePath
    /// The faults, in the order given.
    package let faults: [Fault]
    let id: Int

    init(root: FilePath, faults: [Fault], id: Int) {
        self.root = root
        self.faults = faults
        self.id = id
    }

    /// How many calls each fault has hit so far (in the order of `faults`); kept after `remove()`.
    package var hits: [Int] { faultTable?.hits(id) ?? faults.map { _ in 0 } }

    /// Takes the faults out (idempotent); `hits` stays readable.
    package func remove() { faultTable?.remove(id) }

    deinit { faultTable?.forget(id) }
}

/// The funnel's fault seam: tests install faults that make chosen system calls fail or lose
/// their writes, to prove what the code above does about ENOSPC, EIO, EINTR and lost writes.
///
/// **Scoping.** Faults apply to calls whose path (for a descriptor, the path the caller gives
/// with it; for `rename`/`link`, either path) lies lexically under a scope's `root`, compared
/// component by component after normalising. Tests run in parallel in one process, each in its
/// own temporary directory, so a test's faults never reach another test's calls — and they do
/// reach every thread the code under test starts (hashing pipelines, streamed extraction,
/// dispatch queues), which a task-local or thread-local seam would miss. Use absolute roots.
///
/// **Cost.** With no scope installed, a system call pays one relaxed atomic load to learn that
/// (plus the once-token check of a global); the table behind a `Mutex` is consulted only while
/// a scope is installed.
///
/// **Platforms.** It uses `Synchronization` (`Atomic`, `Mutex`), which Apple ships from macOS 15
/// and iOS 18: on older Apple systems no fault is ever injected and `install` stops the process.
package enum FaultInjector {
    /// Installs `faults` for paths under `root` until the returned scope is removed (or freed).
    package static func install(_ faults: [Fault], under root: FilePath) -> FaultScope {
        guard let table = faultTable else {
            preconditionFailure("fault injection needs Synchronization (macOS 15, iOS 18 or later)")
        }
        return table.add(faults, under: root)
    }

    /// Installs `faults` for paths under `root` until the returned scope is removed (or freed).
    package static func install(_ faults: Fault..., under root: FilePath) -> FaultScope {
        install(faults, under: root)
    }

    /// Runs `body` with `faults` installed for paths under `root`, and removes them after.
    package static func withFaults<R, E: Error>(
        _ faults: Fault..., under root: FilePath, _ body: (FaultScope) throws(E) -> R
    ) throws(E) -> R {
        let scope = install(faults, under: root)
        defer { scope.remove() }
        return try body(scope)
    }

    /// Runs `body` with `faults` installed for paths under `root`, and removes them after.
    package static func withFaults<R, E: Error>(
        _ faults: Fault..., under root: FilePath, isolation: isolated (any Actor)? = #isolation,
        _ body: (FaultScope) async throws(E) -> R
    ) async throws(E) -> R {
        let scope = install(faults, under: root)
        defer { scope.remove() }
        return try await body(scope)
    }

    /// Whether any scope is installed: the funnel's one check on every call.
    @inline(__always)
    static var isArmed: Bool { faultTable?.isArmed ?? false }

    /// What the funnel must do instead of the call, when a fault hits it.
    static func effect(for call: SystemCall, _ path: FilePath, _ other: FilePath?) -> (Fault.Effect, announced: Bool)? {
        faultTable?.effect(for: call, path, other)
    }
}

/// The installed scopes, behind whatever synchronisation the platform offers.
protocol FaultTable: AnyObject, Sendable {
    /// Whether any scope is installed (a relaxed load).
    var isArmed: Bool { get }
    /// Counts the call in every scope that covers it and returns the first hit's effect.
    func effect(for call: SystemCall, _ path: FilePath, _ other: FilePath?) -> (Fault.Effect, announced: Bool)?
    /// Installs a scope.
    func add(_ faults: [Fault], under root: FilePath) -> FaultScope
    /// Stops a scope's faults (idempotent); its counters stay until `forget`.
    func remove(_ id: Int)
    /// Drops a scope and its counters.
    func forget(_ id: Int)
    /// How many calls each fault of a scope has hit.
    func hits(_ id: Int) -> [Int]
}

/// The process's fault table (optional only so that a platform without it could leave it out).
let faultTable: (any FaultTable)? = SynchronizedFaultTable()

/// The fault table: an atomic count of installed scopes for the hot path, and the scopes with
/// their per-fault counters behind a lock.
final class SynchronizedFaultTable: FaultTable {
    private struct Installed {
        let id: Int
        let root: FilePath
        let faults: [Fault]
        /// Calls of each fault's kind seen under `root`.
        var seen: [Int]
        /// Calls each fault hit.
        var hits: [Int]
        /// Whether the faults still apply (false once removed; the counters stay readable).
        var active = true

        /// `root` as text, for the quick test below.
        let rootText: String

        /// Whether `path` lies under `root`. Every file-system call of the process asks this
        /// while any scope is installed — and every test of the process makes its calls while
        /// another test's scope is installed — so a path already in normal form (absolute, no
        /// `.` or `..` component, no doubled separator: nearly every path the code makes) is
        /// answered by comparing bytes at a component boundary. Only another path is normalised,
        /// which is slow, especially in a debug build (swift-system checks its invariants on
        /// every edit there: that took most of the test suite's time).
        func covers(_ path: FilePath) -> Bool {
            let text = path.string
            if Self.isNormalAbsolute(text.utf8) {
                let t = text.utf8
                let r = rootText.utf8
                guard t.starts(with: r) else { return false }
                if t.count == r.count || r.last == UInt8(ascii: "/") { return true }
                return t[t.index(t.startIndex, offsetBy: r.count)] == UInt8(ascii: "/")
            }
            return path.lexicallyNormalized().starts(with: root)
        }

        /// Whether `bytes` is an absolute path with no empty, `.` or `..` component (a trailing
        /// separator aside): what lexical normalisation leaves unchanged.
        static func isNormalAbsolute(_ bytes: String.UTF8View) -> Bool {
            let slash = UInt8(ascii: "/")
            let dot = UInt8(ascii: ".")
            guard bytes.first == slash else { return false }
            // The bytes of the current component so far: how many, and whether all are dots.
            var length = 0
            var dots = true
            for b in bytes.dropFirst() {
                if b == slash {
                    if length == 0 || (dots && length <= 2) { return false }
                    length = 0
                    dots = true
                } else {
                    length += 1
                    dots = dots && b == dot
                }
            }
            return !(dots && (length == 1 || length == 2))
        }
    }

    private struct State {
        var nextID = 1
        var scopes: [Installed] = []
    }

    private let armed = Atomic<Int>(0)
    private let state = Mutex(State())

    var isArmed: Bool { armed.load(ordering: .relaxed) != 0 }

    func effect(for call: SystemCall, _ path: FilePath, _ other: FilePath?) -> (Fault.Effect, announced: Bool)? {
        state.withLock { state in
            var effect: (Fault.Effect, announced: Bool)?
            for i in state.scopes.indices where state.scopes[i].active {
                guard state.scopes[i].covers(path) || (other.map(state.scopes[i].covers) ?? false) else { continue }
                for j in state.scopes[i].faults.indices where state.scopes[i].faults[j].counts(call) {
                    state.scopes[i].seen[j] += 1
                    if state.scopes[i].faults[j].hits(state.scopes[i].seen[j]), effect == nil {
                        state.scopes[i].hits[j] += 1
                        effect = (state.scopes[i].faults[j].effect, state.scopes[i].faults[j].announced)
                    }
                }
            }
            return effect
        }
    }

    func add(_ faults: [Fault], under root: FilePath) -> FaultScope {
        let normalized = root.lexicallyNormalized()
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            let zeros = faults.map { _ in 0 }
            state.scopes.append(
                Installed(
                    id: id, root: normalized, faults: faults, seen: zeros, hits: zeros, rootText: normalized.string))
            armed.add(1, ordering: .relaxed)
            return id
        }
        return FaultScope(root: normalized, faults: faults, id: id)
    }

    func remove(_ id: Int) {
        state.withLock { state in
            guard let i = state.scopes.firstIndex(where: { $0.id == id }), state.scopes[i].active else { return }
            state.scopes[i].active = false
            armed.subtract(1, ordering: .relaxed)
        }
    }

    func forget(_ id: Int) {
        remove(id)
        state.withLock { state in state.scopes.removeAll { $0.id == id } }
    }

    func hits(_ id: Int) -> [Int] {
        state.withLock { state in state.scopes.first { $0.id == id }?.hits ?? [] }
    }
}
