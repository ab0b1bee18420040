import Foundation
import LarderCore
import LarderFileSystem
import Synchronization
import SystemPackage

/// What this process last wrote to a sandbox that a resolver reads back — the state's serving
/// form and the accepted index's serving settings — and which packages each write changed.
///
/// An app syncs and resolves in one process. After its sync commits, the resolver's next
/// snapshot would decode state.json and the index again (at 10,000 packages about 16 MB of
/// JSON) and compare every package with its previous snapshot, all on the page load that follows
/// the sync. With a resolver open in the process, the writer keeps here what it wrote and the
/// packages it changed, found by comparing with the last state and index known here (its own
/// last write, or what a resolver last read); the resolver then takes the state and settings from
/// memory and rebuilds only the packages named.
///
/// What is kept is used only while the file on disk is still the one written: same device,
/// inode, size and modification time (a file Larder replaces gets a new inode), and, for the
/// state, the generation word still naming the generation written. Anything else — another
/// process's write, a file replaced by hand — is read from the file, as without a handoff.
/// The changes are kept as a chain of writes, each from the file it compared with to the file
/// it wrote (by identity), so a resolver uses them only from the very file its snapshot read.
///
/// No process-wide instance: an app makes one and hands it to its resolver and to its syncs
/// (`Resolver(root:schemes:handoff:)`, `SyncSetup.handoff`); `OfflinePackages` does. Without
/// one, every snapshot reads what the sync wrote from disk, as another process's write.
public final class ServingHandoff: Sendable {

    /// A handoff with nothing kept.
    public init() {}

    /// How many writes' changes are kept per sandbox.
    package static let journalLength = 64

    /// What the handoff holds, behind its lock.
    private struct Shared {
        /// Live resolvers in the process; nothing is kept while there are none.
        var readers = 0
        /// By sandbox root.
        var roots: [String: Kept] = [:]
    }

    private let shared = Mutex(Shared())

    /// What is kept for one sandbox.
    private struct Kept {
        /// The state this process last wrote, and the identity of its file.
        var written: (identity: FileIdentity, state: ServingState)?
        /// The last state known here (written, or read by a resolver) and its file: what the
        /// next write is compared with.
        var known: (identity: FileIdentity, state: ServingState)?
        /// The packages each write changed from the file it was compared with (`base`) to the
        /// file it wrote, oldest first; each entry's base is the previous entry's file.
        var journal: [Change] = []
        /// The settings of the index last written, by channel and package id text.
        var index: (identity: FileIdentity, byChannel: [Channel: [String: ServingSettings]])?
        /// The last index settings known here (written, or read by a resolver), by channel.
        var knownIndex: (identity: FileIdentity, byChannel: [Channel: [String: ServingSettings]])?
        /// The packages whose settings `index` changed from the index `from`, by channel.
        var indexChanges: (from: FileIdentity, byChannel: [Channel: Set<String>])?
    }

    /// One state write: the file compared with, the file written, and the packages whose
    /// versions differ between them.
    private struct Change {
        let base: FileIdentity
        let written: FileIdentity
        let changed: Set<String>
    }

    /// A resolver opened: writers in this process start keeping what they write.
    package func readerOpened() {
        shared.withLock { s in s.readers += 1 }
    }

    /// A resolver closed; with none left, what is kept is dropped.
    package func readerClosed() {
        let dropped: [String: Kept] = shared.withLock { s in
            s.readers = max(0, s.readers - 1)
            guard s.readers == 0 else { return [:] }
            defer { s.roots = [:] }
            return s.roots
        }
        withExtendedLifetime(dropped) {}
    }

    private var wanted: Bool { shared.withLock { s in s.readers > 0 } }

    // MARK: Writers

    /// Keeps the serving form of `state`, just written to `layout.state`, and the packages it
    /// changed from the last state known here.
    package func wroteState(_ state: SandboxState, _ layout: SandboxLayout) {
        guard wanted else { return }
        let key = layout.root.string
        guard let identity = FileIdentity(layout.state) else {
            shared.withLock { s in s.roots[key] = nil }
            return
        }
        let serving = ServingState(state)
        let base = shared.withLock { s in s.roots[key]?.known }
        let change = base.map {
            Change(
                base: $0.identity, written: identity, changed: serving.packages.keysDiffering(from: $0.state.packages))
        }
        shared.withLock { s in
            guard s.readers > 0 else { return }
            var kept = s.roots[key] ?? Kept()
            kept.written = (identity, serving)
            kept.known = (identity, serving)
            if let change, kept.journal.last?.written == change.base {
                kept.journal.append(change)
                if kept.journal.count > Self.journalLength { kept.journal.removeFirst() }
            } else {
                kept.journal = change.map { [$0] } ?? []
            }
            s.roots[key] = kept
        }
    }

    /// Keeps the serving settings of every entry of `entries` (by channel, then package id
    /// text), just written to `layout.acceptedIndex`, and which packages' settings differ from
    /// the last index known here.
    package func wroteIndex(_ entries: [PackageEntry], _ layout: SandboxLayout) {
        guard wanted else { return }
        let key = layout.root.string
        // One pass; as `ServingSettings.byID`, the last entry of an id in a channel wins.
        var byChannel: [Channel: [String: ServingSettings]] = [:]
        for e in entries { byChannel[e.channel, default: [:]][e.id.rawValue] = ServingSettings(e) }
        guard let identity = FileIdentity(layout.acceptedIndex) else {
            shared.withLock { s in
                s.roots[key]?.index = nil
                s.roots[key]?.indexChanges = nil
            }
            return
        }
        let base = shared.withLock { s in s.roots[key]?.knownIndex }
        var changes: (from: FileIdentity, byChannel: [Channel: Set<String>])?
        if let base {
            var sets: [Channel: Set<String>] = [:]
            for (channel, old) in base.byChannel {
                sets[channel] = (byChannel[channel] ?? [:]).keysDiffering(from: old)
            }
            changes = (base.identity, sets)
        }
        shared.withLock { s in
            guard s.readers > 0 else { return }
            var kept = s.roots[key] ?? Kept()
            kept.index = (identity, byChannel)
            kept.knownIndex = (identity, byChannel)
            kept.indexChanges = changes
            s.roots[key] = kept
        }
    }

    // MARK: Resolvers

    /// The serving state kept for the file now at `layout.state`, and that file's identity, if
    /// it is the one written and the generation word names its generation.
    package func state(_ layout: SandboxLayout) -> (state: ServingState, identity: FileIdentity)? {
        guard let kept = shared.withLock({ s in s.roots[layout.root.string]?.written }),
            FileIdentity(layout.state) == kept.identity,
            GenerationFile.read(layout) == kept.state.generation
        else { return nil }
        return (kept.state, kept.identity)
    }

    /// A resolver read `state` from the file with identity `identity`: the next write here is
    /// compared with it (unless what is known here is newer).
    package func readState(_ state: ServingState, identity: FileIdentity, _ layout: SandboxLayout) {
        shared.withLock { s in
            guard s.readers > 0 else { return }
            let key = layout.root.string
            if let known = s.roots[key]?.known, known.identity == identity || known.state.generation > state.generation
            {
                return
            }
            s.roots[key, default: Kept()].known = (identity, state)
        }
    }

    /// The packages whose versions changed from the state file `from` to the state file `to`,
    /// through the writes kept here; nil when that chain of writes is not known here.
    package func changes(_ layout: SandboxLayout, from: FileIdentity?, to: FileIdentity?) -> Set<String>? {
        guard let from, let to else { return nil }
        if from == to { return [] }
        return shared.withLock { s in
            guard let journal = s.roots[layout.root.string]?.journal,
                let start = journal.firstIndex(where: { $0.base == from })
            else { return nil }
            var out = Set<String>()
            for change in journal[start...] {
                out.formUnion(change.changed)
                if change.written == to { return out }
            }
            return nil
        }
    }

    /// The serving settings of `channel` kept for the index file now at `layout.acceptedIndex`
    /// (identity `identity`), if it is the one written.
    package func settings(_ layout: SandboxLayout, identity: FileIdentity?, channel: Channel)
        -> [String: ServingSettings]?
    {
        guard let identity, let kept = shared.withLock({ s in s.roots[layout.root.string]?.index }),
            kept.identity == identity
        else { return nil }
        return kept.byChannel[channel] ?? [:]
    }

    /// A resolver read the settings of `channel` from the index file with identity `identity`:
    /// the next index written here is compared with them.
    package func readSettings(
        _ settings: [String: ServingSettings], channel: Channel, identity: FileIdentity?, _ layout: SandboxLayout
    ) {
        guard let identity else { return }
        shared.withLock { s in
            guard s.readers > 0, s.roots[layout.root.string]?.knownIndex?.identity != identity else { return }
            s.roots[layout.root.string, default: Kept()].knownIndex = (identity, [channel: settings])
        }
    }

    /// The packages of `channel` whose settings differ between the index file `from` and the
    /// index file `to` (the one written here); nil when that is not known here.
    package func settingsChanges(_ layout: SandboxLayout, from: FileIdentity?, to: FileIdentity?, channel: Channel)
        -> Set<String>?
    {
        guard let from, let to else { return nil }
        if from == to { return [] }
        return shared.withLock { s in
            guard let kept = s.roots[layout.root.string], kept.index?.identity == to,
                let changes = kept.indexChanges, changes.from == from
            else { return nil }
            return changes.byChannel[channel]
        }
    }
}

extension ServingState {
    /// The serving form of a state in memory: what decoding its state.json as `ServingState` gives.
    package init(_ state: SandboxState) {
        self.init(
            schemaVersion: state.schemaVersion, generation: state.generation,
            packages: state.packages.mapValues {
                Versions(active: $0.active, fallback: $0.fallback, activation: $0.activation)
            })
    }
}

extension Dictionary where Key == String, Value: Equatable {
    /// The keys whose values differ from `base`'s, those present in one only included.
    fileprivate func keysDiffering(from base: Self) -> Set<String> {
        var out = Set<String>()
        for (key, value) in self where base[key] != value { out.insert(key) }
        for key in base.keys where self[key] == nil { out.insert(key) }
        return out
    }
}
