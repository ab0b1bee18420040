import Foundation
import LarderCore
import LarderFileSystem
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
/// States are named by their generation, which only grows in a sandbox.
package final class ServingHandoff: @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`.
    /// The one handoff of the process.
    package static let shared = ServingHandoff()

    /// How many writes' changes are kept per sandbox.
    static let journalLength = 64

    private let lock = NSLock()
    /// Live resolvers in the process; nothing is kept while there are none.
    private var readers = 0
    /// By sandbox root.
    private var roots: [String: Kept] = [:]

    /// What is kept for one sandbox.
    private struct Kept {
        /// The state this process last wrote, and the identity of its file.
        var written: (identity: FileIdentity, state: ServingState)?
        /// The last state known here (written, or read by a resolver): what the next write is
        /// compared with.
        var known: ServingState?
        /// The packages each generation changed from the one before, oldest first, contiguous.
        var journal: [(generation: UInt64, changed: Set<String>)] = []
        /// The settings of the index last written, by channel and package id text.
        var index: (identity: FileIdentity, byChannel: [String: [String: ServingSettings]])?
        /// The last index settings known here (written, or read by a resolver), by channel.
        var knownIndex: (identity: FileIdentity, byChannel: [String: [String: ServingSettings]])?
        /// The packages whose settings `index` changed from the index `from`, by channel.
        var indexChanges: (from: FileIdentity, byChannel: [String: Set<String>])?
    }

    /// A resolver opened: writers in this process start keeping what they write.
    package func readerOpened() {
        lock.withLock { readers += 1 }
    }

    /// A resolver closed; with none left, what is kept is dropped.
    package func readerClosed() {
        let dropped: [String: Kept] = lock.withLock {
            readers = max(0, readers - 1)
            guard readers == 0 else { return [:] }
            defer { roots = [:] }
            return roots
        }
        withExtendedLifetime(dropped) {}
    }

    private var wanted: Bool { lock.withLock { readers > 0 } }

    // MARK: Writers

    /// Keeps the serving form of `state`, just written to `layout.state`, and the packages it
    /// changed from the last state known here when that is the generation before.
    package func wroteState(_ state: SandboxState, _ layout: SandboxLayout) {
        guard wanted else { return }
        let key = layout.root.string
        let serving = ServingState(state)
        let identity = FileIdentity(layout.state)
        let base = lock.withLock { roots[key]?.known }
        let changed = base.flatMap { $0.generation &+ 1 == serving.generation ? serving.changedIDs(from: $0) : nil }
        lock.withLock {
            var kept = roots[key] ?? Kept()
            kept.written = identity.map { ($0, serving) }
            kept.known = serving
            if let changed, kept.journal.last.map({ $0.generation &+ 1 == serving.generation }) ?? true {
                kept.journal.append((serving.generation, changed))
                if kept.journal.count > Self.journalLength { kept.journal.removeFirst() }
            } else {
                kept.journal = changed.map { [(serving.generation, $0)] } ?? []
            }
            roots[key] = kept
        }
    }

    /// Keeps the serving settings of every entry of `entries` (by channel, then package id
    /// text), just written to `layout.acceptedIndex`, and which packages' settings differ from
    /// the last index known here.
    package func wroteIndex(_ entries: [PackageEntry], _ layout: SandboxLayout) {
        guard wanted else { return }
        let key = layout.root.string
        let all = entries.map(ServingSettings.init)
        var byChannel: [String: [String: ServingSettings]] = [:]
        for channel in Set(all.map(\.channel)) { byChannel[channel] = ServingSettings.byID(all, channel: channel) }
        guard let identity = FileIdentity(layout.acceptedIndex) else {
            lock.withLock {
                roots[key]?.index = nil
                roots[key]?.indexChanges = nil
            }
            return
        }
        let base = lock.withLock { roots[key]?.knownIndex }
        var changes: (from: FileIdentity, byChannel: [String: Set<String>])?
        if let base {
            var sets: [String: Set<String>] = [:]
            for (channel, old) in base.byChannel {
                sets[channel] = ServingSettings.changedIDs(old, byChannel[channel] ?? [:])
            }
            changes = (base.identity, sets)
        }
        lock.withLock {
            var kept = roots[key] ?? Kept()
            kept.index = (identity, byChannel)
            kept.knownIndex = (identity, byChannel)
            kept.indexChanges = changes
            roots[key] = kept
        }
    }

    // MARK: Resolvers

    /// The serving state kept for the file now at `layout.state`, if it is the one written and
    /// the generation word names its generation.
    package func state(_ layout: SandboxLayout) -> ServingState? {
        guard let kept = lock.withLock({ roots[layout.root.string]?.written }),
            FileIdentity(layout.state) == kept.identity,
            GenerationFile.read(layout) == kept.state.generation
        else { return nil }
        return kept.state
    }

    /// A resolver read `state` from the file: the next write here is compared with it.
    package func readState(_ state: ServingState, _ layout: SandboxLayout) {
        lock.withLock {
            guard readers > 0 else { return }
            let key = layout.root.string
            if let known = roots[key]?.known, known.generation > state.generation { return }
            roots[key, default: Kept()].known = state
        }
    }

    /// The packages changed by the generations after `from` up to `to`; nil when a write in
    /// between is not known here.
    package func changes(_ layout: SandboxLayout, from: UInt64, to: UInt64) -> Set<String>? {
        guard from <= to else { return nil }
        if from == to { return [] }
        return lock.withLock {
            guard let journal = roots[layout.root.string]?.journal, let first = journal.first,
                first.generation <= from &+ 1, let last = journal.last, last.generation >= to
            else { return nil }
            var out = Set<String>()
            for entry in journal where entry.generation > from && entry.generation <= to {
                out.formUnion(entry.changed)
            }
            return out
        }
    }

    /// The serving settings of `channel` kept for the index file now at `layout.acceptedIndex`
    /// (identity `identity`), if it is the one written.
    package func settings(_ layout: SandboxLayout, identity: FileIdentity?, channel: String)
        -> [String: ServingSettings]?
    {
        guard let identity, let kept = lock.withLock({ roots[layout.root.string]?.index }), kept.identity == identity
        else { return nil }
        return kept.byChannel[channel] ?? [:]
    }

    /// A resolver read the settings of `channel` from the index file with identity `identity`:
    /// the next index written here is compared with them.
    package func readSettings(
        _ settings: [String: ServingSettings], channel: String, identity: FileIdentity?, _ layout: SandboxLayout
    ) {
        guard let identity else { return }
        lock.withLock {
            guard readers > 0, roots[layout.root.string]?.knownIndex?.identity != identity else { return }
            roots[layout.root.string, default: Kept()].knownIndex = (identity, [channel: settings])
        }
    }

    /// The packages of `channel` whose settings differ between the index file `from` and the
    /// index file `to` (the one written here); nil when that is not known here.
    package func settingsChanges(_ layout: SandboxLayout, from: FileIdentity?, to: FileIdentity?, channel: String)
        -> Set<String>?
    {
        guard let from, let to else { return nil }
        if from == to { return [] }
        return lock.withLock {
            guard let kept = roots[layout.root.string], kept.index?.identity == to,
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

    /// The ids of the packages whose versions differ from `base`'s (present in one only included).
    package func changedIDs(from base: ServingState) -> Set<String> {
        var out = Set<String>()
        for (id, v) in packages where base.packages[id] != v { out.insert(id) }
        for id in base.packages.keys where packages[id] == nil { out.insert(id) }
        return out
    }
}

extension ServingSettings {
    /// The ids whose settings differ between `old` and `new` (present in one only included).
    package static func changedIDs(_ old: [String: ServingSettings], _ new: [String: ServingSettings]) -> Set<String> {
        var out = Set<String>()
        for (id, s) in new where old[id] != s { out.insert(id) }
        for id in old.keys where new[id] == nil { out.insert(id) }
        return out
    }
}
