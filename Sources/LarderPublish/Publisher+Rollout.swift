import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// What a rollout verb does (format §20).
package enum RolloutAction: Sendable, Equatable {
    /// Release key: signs the release's ceiling (`percent`) or a schedule from now.
    case start(percent: Int?, steps: [Int]?, every: Int?)
    /// Rollout key: devices not on the version do not take it.
    case pause
    /// Rollout key: lifts a pause or halt (a cap stays).
    case resume
    /// Rollout key: caps the share at `percent` (not above the ceiling); at the ceiling, no cap.
    case advance(percent: Int)
    /// Rollout key: devices treat the version as revoked.
    case halt

    /// The verb's name.
    package var verb: String {
        switch self {
        case .start: "start"
        case .pause: "pause"
        case .resume: "resume"
        case .advance: "advance"
        case .halt: "halt"
        }
    }
}

/// One rollout verb, on one release.
package struct RolloutChange: Sendable, Equatable {
    /// The package.
    package var id: String
    /// Its channel.
    package var channel: String = Channel.default.rawValue
    /// The version; nil: the one the channel's entry publishes.
    package var version: String?
    /// What to do.
    package var action: RolloutAction
    /// Who sets a hold (`guard` for the guard).
    package var by: String = "manual"
    /// Why, for people.
    package var reason: String?

    /// Creates one.
    package init(id: String, channel: String = Channel.default.rawValue, version: String? = nil, action: RolloutAction)
    {
        self.id = id
        self.channel = channel
        self.version = version
        self.action = action
    }
}

/// One release as the rollout verbs and the guard see it.
package struct RolloutRelease: Sendable, Codable, Equatable {
    /// The package, channel and version.
    package var id: String
    package var channel: String
    package var version: String
    /// The signed `percent` (a schedule's first step).
    package var percent: Int
    /// The signed schedule, if any.
    package var schedule: RolloutSchedule?
    /// The most the release key signed.
    package var ceiling: Int
    /// The signed share now.
    package var signedNow: Int
    /// The holds on it.
    package var holds: [RolloutHold]
    /// The strictest hold's state, nil when none.
    package var state: HoldState?
    /// The share in effect now.
    package var share: Int
    /// Whether the release key revoked it.
    package var revoked: Bool

    /// The release of `entry` with `holds` at `now`.
    package init(_ entry: PackageEntry, holds all: [RolloutHold], at now: Date) {
        let held = HeldRelease(entry, holds: all, at: now)
        id = entry.id.rawValue
        channel = entry.channel.rawValue
        version = entry.version.description
        percent = entry.rollout.percent
        schedule = entry.rollout.schedule
        ceiling = entry.rollout.ceiling
        signedNow = held.signed
        holds = all.filter { $0.holds(entry) }
        state = held.state
        share = held.share
        revoked = entry.revoked.contains(entry.version)
    }
}

/// What a rollout verb did.
package struct RolloutReport: Sendable, Codable, Equatable {
    /// The verb.
    package var verb: String
    /// Whether anything was published (false: the release was already so).
    package var changed: Bool
    /// The serial of the index published (nil when nothing was, or only a part was written).
    package var serial: UInt64?
    /// In a delegated repository, the part written.
    package var part: PartReport?
    /// The release after the change (as published, or as it would be once composed).
    package var release: RolloutRelease
}

extension Publisher {
    /// Every release of the index at `repository` with its holds at `now` (`larder rollout
    /// status`): read as published, no key needed; a sharded index's on-demand entries are not
    /// listed.
    package static func rolloutStatus(repository: FilePath, at now: Date = Date()) throws(PublishError)
        -> [RolloutRelease]
    {
        let layout = RepositoryLayout(root: repository)
        let bytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.index) }
        let index: RepositoryIndex
        do { index = try ManifestCoding.decode(RepositoryIndex.self, from: bytes, document: "index.json") } catch {
            throw .manifest(error)
        }
        return index.packages.sorted { ($0.id, $0.channel) < ($1.id, $1.channel) }.map {
            RolloutRelease($0, holds: index.holds ?? [], at: now)
        }
    }

    /// Runs one rollout verb: `start` with the release key (the entry signed anew, as a pack
    /// does), the others with a rollout key (a hold in the index, or in the rollout team's part of
    /// a delegated repository).
    package func rollout(_ change: RolloutChange, repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600)
        throws(PublishError) -> RolloutReport
    {
        if case .start(let percent, let steps, let every) = change.action {
            let (id, channel, version) = try names(change)
            let layout = RepositoryLayout(root: repository)
            let lock = try publishLock(layout)
            defer { lock.unlock() }
            return try startRollout(
                id, channel, version, percent: percent, steps: steps, every: every, layout, ttl: timeToLive)
        }
        let done = try hold([change], repository: repository, timeToLive: timeToLive)
        return RolloutReport(
            verb: change.action.verb, changed: done.changed[0], serial: done.serial, part: done.part,
            release: done.releases[0])
    }

    /// What `hold` did: one publication for every change.
    package struct HoldResult: Sendable {
        /// The serial of the index published (nil when nothing was, or only a part was written).
        package var serial: UInt64?
        /// In a delegated repository, the part written.
        package var part: PartReport?
        /// Each change's release after it, in order.
        package var releases: [RolloutRelease]
        /// Whether each change changed anything.
        package var changed: [Bool]
    }

    /// Applies hold verbs (not `start`) as one publication: the index (single key) or the
    /// rollout team's next part, composed when this publisher holds the index keys.
    package func hold(_ changes: [RolloutChange], repository: FilePath, timeToLive: TimeInterval = 30 * 24 * 3600)
        throws(PublishError) -> HoldResult
    {
        let named = try changes.map { c throws(PublishError) in try names(c) }
        let layout = RepositoryLayout(root: repository)
        let lock = try publishLock(layout)
        defer { lock.unlock() }
        let repo = try loadDelegated(layout)
        var team: Team?
        let current: RepositoryIndex?
        let view: RepositoryIndex
        var holds: [RolloutHold]
        if let r = repo {
            let t = try rolloutTeam(r.root)
            for (id, _, _) in named where !t.claims(id) {
                throw .delegation(
                    .outside(
                        team: t.name, id: id,
                        detail: "not matched by its patterns \(t.packages.map(\.text).joined(separator: ", "))"))
            }
            team = t
            current = try loadIndex(layout, trusted: trustedForIndex(r.root))
            view = delegatedView(r, current: current)
            holds = r.parts[t.name]?.part.holds ?? []
        } else {
            guard let index = try loadIndex(layout) else {
                throw .existingIndexUntrusted(detail: "\(layout.index) does not exist")
            }
            current = index
            view = index
            holds = index.holds ?? []
        }
        var entries: [PackageEntry] = []
        var changed: [Bool] = []
        for (c, (id, channel, version)) in zip(changes, named) {
            let entry = try release(id, channel, version, in: view)
            entries.append(entry)
            changed.append(try applyHold(c, entry, &holds))
        }
        var result = HoldResult(serial: nil, part: nil, releases: [], changed: changed)
        var all = repo == nil ? holds : (current?.holds ?? holds)
        if changed.contains(true) {
            all = try publishHolds(holds, &result, repo: repo, team: team, current: current, layout, ttl: timeToLive)
        }
        result.releases = entries.map { RolloutRelease($0, holds: all, at: now()) }
        return result
    }

    /// Publishes changed holds: the rollout team's next part (composed when this publisher holds
    /// the index keys), or the single-key index. Returns the holds now in force.
    func publishHolds(
        _ holds: [RolloutHold], _ result: inout HoldResult, repo: DelegatedRepository?, team: Team?,
        current: RepositoryIndex?, _ layout: RepositoryLayout, ttl timeToLive: TimeInterval
    ) throws(PublishError) -> [RolloutHold] {
        guard var r = repo, let t = team else {
            guard var index = current else { return holds }
            index.holds = holds.isEmpty ? nil : holds
            result.serial = try publish(&index, layout, ttl: timeToLive).serial
            return holds
        }
        let part = TeamPart(team: t.name, serial: (r.parts[t.name]?.part.serial ?? 0) + 1, packages: [], holds: holds)
        try writeSigned(part, team: t, &r, layout)
        result.part = PartReport(team: t.name, serial: part.serial, composed: false)
        guard let signers = indexSigners(r.root) else { return holdsOfParts(r) }
        if let why = unclaimed(r, current: current) {
            logger.notice("\(why)")
            return holdsOfParts(r)
        }
        let index = try composeIndex(r, current: current, layout, signers: signers, ttl: timeToLive)
        result.part?.composed = true
        result.serial = index.serial
        return index.holds ?? []
    }

    /// The package, channel and version a change names.
    func names(_ change: RolloutChange) throws(PublishError) -> (PackageID, Channel, SemanticVersion?) {
        guard let id = PackageID(change.id) else { throw .badID(change.id) }
        guard let channel = Channel(change.channel) else { throw .badChannel(change.channel) }
        guard let text = change.version else { return (id, channel, nil) }
        guard let v = SemanticVersion(text) else { throw .badVersion(text) }
        return (id, channel, v)
    }

    /// The rollout team this publisher's key belongs to.
    func rolloutTeam(_ root: RootDocument) throws(PublishError) -> Team {
        let keyID = key.publicKey.keyID
        guard let team = root.teams.first(where: { $0.role == .rollout && $0.keyIds.contains(keyID) }) else {
            throw .delegationSetup(
                "key \(keyID) belongs to no rollout team of root \(root.version): `larder delegate add NAME --role rollout --public-key PUB --packages PATTERN` delegates one"
            )
        }
        return team
    }

    /// The entry of `id` on `channel`, which must publish `version` when one is given.
    func release(_ id: PackageID, _ channel: Channel, _ version: SemanticVersion?, in index: RepositoryIndex)
        throws(PublishError) -> PackageEntry
    {
        guard let entry = index.packages.first(where: { $0.id == id && $0.channel == channel }) else {
            throw .rollout(code: "unknown-release", detail: "the index has no entry for \(id) on channel \(channel)")
        }
        if let version, version != entry.version {
            throw .rollout(
                code: "unknown-release",
                detail:
                    "\(id) \(version) is not the release of channel \(channel) (it publishes \(entry.version)); a hold names the current release"
            )
        }
        return entry
    }

    /// Applies a hold verb to the holds of `entry`'s package and channel; false when nothing
    /// changes. A hold on an earlier version of the same package and channel is dropped (inert).
    func applyHold(_ change: RolloutChange, _ entry: PackageEntry, _ holds: inout [RolloutHold])
        throws(PublishError) -> Bool
    {
        let before = holds
        holds.removeAll { $0.id == entry.id && $0.channel == entry.channel && $0.version != entry.version }
        let current = holds.first { $0.holds(entry) }
        func set(_ state: HoldState, _ percent: Int? = nil) {
            holds.removeAll { $0.holds(entry) }
            holds.append(
                RolloutHold(
                    id: entry.id, channel: entry.channel, version: entry.version, state: state, percent: percent,
                    since: Date(timeIntervalSince1970: now().timeIntervalSince1970.rounded(.down)), by: change.by,
                    reason: change.reason))
        }
        let name = "\(entry.id) \(entry.version) (\(entry.channel))"
        switch change.action {
        case .start: break
        case .pause:
            if current?.state == .halted { throw .rollout(code: "rollout-halted", detail: "\(name) is halted") }
            if current?.state != .paused { set(.paused) }
        case .halt:
            if current?.state != .halted { set(.halted) }
        case .resume:
            if current?.state == .paused || current?.state == .halted { holds.removeAll { $0.holds(entry) } }
        case .advance(let percent):
            guard (0...100).contains(percent) else { throw .badRollout(percent) }
            if let s = current?.state, s != .capped {
                throw .rollout(
                    code: s == .paused ? "rollout-paused" : "rollout-halted",
                    detail: "\(name) is \(s.rawValue): resume it first")
            }
            guard percent <= entry.rollout.ceiling else {
                throw .rollout(
                    code: "rollout-raise",
                    detail:
                        "\(name): \(percent)% is above the \(entry.rollout.ceiling)% its release key signed; a rollout key can only hold a release back (`rollout start` with the release key raises it)"
                )
            }
            if percent == entry.rollout.ceiling {
                holds.removeAll { $0.holds(entry) }
            } else if current?.percent != percent {
                set(.capped, percent)
            }
        }
        holds.sort { ($0.id, $0.channel) < ($1.id, $1.channel) }
        return holds != before
    }

    /// `start`: the release key signs the entry's rollout anew (same salt), from now; in a
    /// single-key repository the release's holds are lifted with it.
    func startRollout(
        _ id: PackageID, _ channel: Channel, _ version: SemanticVersion?, percent: Int?, steps: [Int]?, every: Int?,
        _ layout: RepositoryLayout, ttl: TimeInterval
    ) throws(PublishError) -> RolloutReport {
        let (loaded, target) = try openTarget(layout)
        guard var index = loaded else { throw .existingIndexUntrusted(detail: "\(layout.index) does not exist") }
        if let team = target.team, let root = target.delegated?.root { try requireOwned(id, by: team, root) }
        let entry = try release(id, channel, version, in: index)
        var rollout = entry.rollout
        if let steps {
            let start = Date(timeIntervalSince1970: now().timeIntervalSince1970.rounded(.down))
            let schedule = RolloutSchedule(start: start, every: every ?? 3600, steps: steps)
            if let why = schedule.problem { throw .rollout(code: "bad-rollout", detail: why) }
            rollout = Rollout(percent: steps[0], salt: rollout.salt, schedule: schedule)
        } else {
            let p = percent ?? 100
            guard (0...100).contains(p) else { throw .badRollout(p) }
            rollout = Rollout(percent: p, salt: rollout.salt)
        }
        guard let i = index.packages.firstIndex(where: { $0.id == id && $0.channel == channel }) else {
            throw .rollout(code: "unknown-release", detail: "the index has no entry for \(id) on channel \(channel)")
        }
        index.packages[i].rollout = rollout
        if target.delegated == nil {
            index.holds?.removeAll { $0.holds(entry) }
            if index.holds?.isEmpty == true { index.holds = nil }
        }
        let (published, part) = try publishChange(&index, target, layout, ttl: ttl)
        let holds = target.delegated == nil ? (index.holds ?? []) : (published.holds ?? [])
        return RolloutReport(
            verb: "start", changed: true, serial: part.map { $0.composed ? published.serial : nil } ?? published.serial,
            part: part, release: RolloutRelease(index.packages[i], holds: holds, at: now()))
    }

    /// The rollout a pack signs: a schedule from now (its first step as `percent`), else the percent.
    func rollout(_ request: PackRequest, salt: String) -> Rollout {
        guard let steps = request.rolloutSteps, let first = steps.first else {
            return Rollout(percent: request.rolloutPercent, salt: salt)
        }
        let start = Date(timeIntervalSince1970: now().timeIntervalSince1970.rounded(.down))
        return Rollout(
            percent: first, salt: salt,
            schedule: RolloutSchedule(start: start, every: request.rolloutEvery, steps: steps))
    }

    /// The holds of every rollout team's newest part, in team order: what a composed index holds.
    func holdsOfParts(_ repo: DelegatedRepository) -> [RolloutHold] {
        repo.parts.keys.sorted().flatMap { repo.parts[$0]?.part.holds ?? [] }
    }
}
