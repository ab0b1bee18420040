import Foundation

/// A release's share following the clock (format §20): 0 before `start`, then `steps[k]` from
/// `start + k·every`, the last step held once reached. Signed with the entry by its release key.
package struct RolloutSchedule: Codable, Sendable, Equatable {
    /// When the first step begins.
    package var start: Date
    /// Seconds between steps, 60 … 2,592,000.
    package var every: Int
    /// The shares, 1 … 16 of them, strictly increasing within 0 … 100.
    package var steps: [Int]

    /// The bounds of `every`.
    package static let everyRange = 60...2_592_000
    /// At most this many steps.
    package static let maxSteps = 16

    /// Creates one.
    package init(start: Date, every: Int, steps: [Int]) {
        self.start = start
        self.every = every
        self.steps = steps
    }

    /// What is wrong with it, or nil.
    package var problem: String? {
        if !Self.everyRange.contains(every) { return "schedule every \(every) s is outside 60 … 2,592,000" }
        if steps.isEmpty || steps.count > Self.maxSteps { return "a schedule has 1 … 16 steps, not \(steps.count)" }
        if let s = steps.first(where: { !(0...100).contains($0) }) { return "schedule step \(s) is outside 0 … 100" }
        if zip(steps, steps.dropFirst()).contains(where: { $0 >= $1 }) {
            return "schedule steps \(steps.map(String.init).joined(separator: ",")) do not increase"
        }
        return nil
    }

    /// The step in force at `now`: nil before `start`, else its index.
    package func stepIndex(at now: Date) -> Int? {
        let elapsed = now.timeIntervalSince(start)
        guard elapsed >= 0, every > 0 else { return nil }
        return min(Int(min(elapsed / Double(every), Double(steps.count))), steps.count - 1)
    }

    /// The share at `now`.
    package func share(at now: Date) -> Int { stepIndex(at: now).map { steps[$0] } ?? 0 }

    /// When the share next changes after `now`, or nil once the last step is reached.
    package func nextChange(after now: Date) -> Date? {
        let next = (stepIndex(at: now) ?? -1) + 1
        guard next < steps.count else { return nil }
        return start.addingTimeInterval(Double(next) * Double(every))
    }
}

extension Rollout {
    /// The most the release key signed: the last step of a schedule, else `percent`.
    package var ceiling: Int { schedule?.steps.last ?? percent }

    /// The signed share at `now` (the schedule's step, else `percent`).
    package func share(at now: Date) -> Int { schedule?.share(at: now) ?? percent }
}

/// What a hold does to the release it names (format §20).
package enum HoldState: String, Codable, Sendable, CaseIterable, Comparable {
    /// The share is min(the signed share, the hold's percent).
    case capped
    /// Devices not on the version do not take it; those on it keep it.
    case paused
    /// The version is treated as revoked: devices on it go back.
    case halted

    /// Stricter is greater: capped < paused < halted.
    package static func < (a: HoldState, b: HoldState) -> Bool { a.rank < b.rank }

    private var rank: Int {
        switch self {
        case .capped: 0
        case .paused: 1
        case .halted: 2
        }
    }
}

/// One hold on one release: the only thing a rollout key signs (format §20). It can hold a
/// release back or halt it, never raise it.
package struct RolloutHold: Codable, Sendable, Equatable {
    /// The package held.
    package var id: PackageID
    /// Its channel.
    package var channel: Channel
    /// The version held; a hold on another version than the entry's is inert.
    package var version: SemanticVersion
    /// What it does.
    package var state: HoldState
    /// The cap (`capped` only).
    package var percent: Int?
    /// When it was set.
    package var since: Date
    /// Who set it: `guard`, or the name a verb was given (`manual` by default).
    package var by: String
    /// Why, for people; at most 256 bytes.
    package var reason: String?

    /// The longest `reason`, in UTF-8 bytes.
    package static let maxReason = 256
    /// The most holds an index (or a part) holds.
    package static let maxHolds = 4096
    /// The name the guard signs its holds with.
    package static let guardName = "guard"

    /// Creates one.
    package init(
        id: PackageID, channel: Channel, version: SemanticVersion, state: HoldState, percent: Int? = nil,
        since: Date, by: String = "manual", reason: String? = nil
    ) {
        self.id = id
        self.channel = channel
        self.version = version
        self.state = state
        self.percent = percent
        self.since = since
        self.by = by
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey { case id, channel, version, state, percent, since, by, reason }

    /// Decodes one, refusing a cap that is absent on `capped`, present on another state or outside
    /// 0 … 100, a `by` that is not a name and a reason over 256 bytes.
    package init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(PackageID.self, forKey: .id)
        channel = try c.decode(Channel.self, forKey: .channel)
        version = try c.decode(SemanticVersion.self, forKey: .version)
        state = try c.decode(HoldState.self, forKey: .state)
        percent = try c.decodeIfPresent(Int.self, forKey: .percent)
        since = try c.decode(Date.self, forKey: .since)
        by = try c.decode(String.self, forKey: .by)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        if let problem {
            throw DecodingError.dataCorruptedError(forKey: .state, in: c, debugDescription: problem)
        }
    }

    /// What is wrong with it on its own, or nil.
    package var problem: String? {
        switch (state, percent) {
        case (.capped, nil): return "a capped hold needs a percent"
        case (.capped, let p?) where !(0...100).contains(p): return "hold percent \(p) is outside 0 … 100"
        case (.paused, _?), (.halted, _?): return "only a capped hold has a percent"
        default: break
        }
        if !PackageID.isValid(by) { return "hold by \(quoted(by)) is not a name: expected [a-z0-9][a-z0-9._-]{0,63}" }
        if let reason, reason.utf8.count > Self.maxReason { return "a hold's reason is over 256 bytes" }
        return nil
    }

    /// Whether it holds `entry`'s release.
    package func holds(_ entry: PackageEntry) -> Bool {
        id == entry.id && channel == entry.channel && version == entry.version
    }

    /// Why it would raise `entry` past what its release key signed, or nil.
    package func raise(_ entry: PackageEntry) -> String? {
        guard holds(entry), state == .capped, let p = percent, p > entry.rollout.ceiling else { return nil }
        return
            "\(id) \(version) (\(channel)): a hold caps it at \(p)%, above the \(entry.rollout.ceiling)% its release key signed"
    }

    /// "id version (channel)".
    package var release: String { "\(id) \(version) (\(channel))" }
}

/// What the holds and the clock make of one release on a device.
package struct HeldRelease: Sendable, Equatable {
    /// The strictest hold in force, nil when none.
    package var state: HoldState?
    /// The signed share now.
    package var signed: Int
    /// The share in effect (0 when paused or halted).
    package var share: Int

    /// The strictest of `holds` on `entry`, and the share at `now`.
    package init(_ entry: PackageEntry, holds: [RolloutHold], at now: Date) {
        let mine = holds.filter { $0.holds(entry) }
        state = mine.map(\.state).max()
        signed = entry.rollout.share(at: now)
        switch state {
        case .halted?, .paused?: share = 0
        case .capped?: share = min(signed, mine.compactMap(\.percent).min() ?? signed)
        case nil: share = signed
        }
    }
}

extension RepositoryIndex {
    /// The first hold that would raise a release past its ceiling, as a refusal's detail (code
    /// `rollout-raise`), or nil.
    package func holdRaise() -> String? {
        guard let holds, !holds.isEmpty else { return nil }
        for h in holds {
            for e in packages where h.holds(e) { if let why = h.raise(e) { return why } }
        }
        return nil
    }

    /// The index as a device at `now` plans with it: each entry's rollout is its share in effect
    /// (the schedule's step, capped or paused by holds, with no schedule left), and a halted
    /// version is revoked. What is signed and recorded stays the index as published.
    package func effective(at now: Date) -> RepositoryIndex {
        var out = self
        let holds = self.holds ?? []
        for i in out.packages.indices {
            let e = out.packages[i]
            guard e.rollout.schedule != nil || holds.contains(where: { $0.holds(e) }) else { continue }
            let held = HeldRelease(e, holds: holds, at: now)
            out.packages[i].rollout = Rollout(percent: held.share, salt: e.rollout.salt)
            if held.state == .halted, !e.revoked.contains(e.version) {
                out.packages[i].revoked.append(e.version)
                out.packages[i].revoked.sort()
            }
        }
        return out
    }

    /// The earliest instant after `now` at which a schedule of `channel` moves to another step:
    /// until then, a plan made now stays the plan.
    package func nextScheduleChange(after now: Date, channel: Channel) -> Date? {
        packages.filter { $0.channel == channel }.compactMap { $0.rollout.schedule?.nextChange(after: now) }.min()
    }
}
