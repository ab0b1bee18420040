/// One problem found in an index's contents (after its signature and schema were accepted).
package struct IndexIssue: Sendable, Equatable, CustomStringConvertible {
    /// A stable code (`duplicate-entry`, `route-conflict`, …).
    package let code: ReasonCode
    /// The package concerned.
    package let package: String?
    /// The version concerned.
    package let version: String?
    /// What is wrong, for a person.
    package let message: String

    /// The `message`, which starts with `<id> <version>: `.
    package var description: String { message }
}

/// The rules an index must follow beyond its JSON schema. Pure; used by `pack` before it signs
/// and by `verify` on what it reads.
package enum IndexRules {
    /// Every rule the index breaks, in a stable order.
    package static func issues(_ index: RepositoryIndex) -> [IndexIssue] {
        var out: [IndexIssue] = []
        var seen: Set<String> = []
        var routeOwner: [RoutePrefix: PackageID] = [:]
        let ids = Set(index.packages.map(\.id))
        let byID = Dictionary(grouping: index.packages, by: \.id)
        for p in index.packages {
            let id = p.id.rawValue
            let v = p.version.description
            func add(_ code: ReasonCode, _ message: String) {
                out.append(IndexIssue(code: code, package: id, version: v, message: "\(id) \(v): \(message)"))
            }
            if !seen.insert("\(id)\u{0}\(p.channel)").inserted {
                add("duplicate-entry", "a second entry for channel \(p.channel) (one entry per package and channel)")
            }
            if !p.channel.isValid {
                add("bad-channel", "channel \(quoted(p.channel.rawValue)) is not a valid channel name")
            }
            if !(0...100).contains(p.rollout.percent) {
                add("bad-rollout", "rollout percent \(p.rollout.percent) is outside 0...100")
            }
            if let schedule = p.rollout.schedule {
                if let why = schedule.problem { add("bad-rollout", why) }
                if schedule.steps.first != p.rollout.percent {
                    add(
                        "bad-rollout",
                        "rollout percent \(p.rollout.percent) is not the schedule's first step \(schedule.steps.first ?? 0)"
                    )
                }
            }
            if RelativePath(p.entry) == nil {
                add("bad-entry", "entry \(quoted(p.entry)) is not a valid relative path")
            }
            checkLayout(p, add)
            for b in p.policy.bypass where !b.hasPrefix("/") {
                add("bad-policy", "bypass prefix \(quoted(b)) must start with /")
            }
            checkRoutes(p, owners: &routeOwner, add)
            checkAccess(p, add)
            for d in p.dependencies where !ids.contains(d.id) {
                add("missing-dependency", "depends on \(d.id) (\(d.range)), which the index does not list")
            }
            for d in p.dependencies {
                let candidates = byID[d.id] ?? []
                if !candidates.isEmpty, !candidates.contains(where: { d.range.contains($0.version) }) {
                    add(
                        "unsatisfied-dependency",
                        "depends on \(d.id) \(d.range), but the index lists \(candidates.map { $0.version.description }.joined(separator: ", "))"
                    )
                }
            }
        }
        out += holdIssues(index)
        if let why = index.telemetry?.problem {
            out.append(IndexIssue(code: "bad-telemetry", package: nil, version: nil, message: "telemetry: \(why)"))
        }
        return out
    }

    /// Each hold well formed, at most one per package and channel (a single-key index; a delegated
    /// one repeats its rollout teams' holds, which may overlap), and none capping a release above
    /// the ceiling its entry signs (format §20).
    private static func holdIssues(_ index: RepositoryIndex) -> [IndexIssue] {
        var out: [IndexIssue] = []
        var seen = Set<String>()
        for h in index.holds ?? [] {
            func add(_ message: String) {
                out.append(
                    IndexIssue(
                        code: "bad-hold", package: h.id.rawValue, version: h.version.description,
                        message: "\(h.id) \(h.version): hold: \(message)"))
            }
            if let why = h.problem { add(why) }
            if index.delegations == nil, !seen.insert("\(h.id)\u{0}\(h.channel)").inserted {
                add("a second hold on \(h.id) (\(h.channel)): one per package and channel")
            }
            for e in index.packages { if let why = h.raise(e) { add(why) } }
        }
        return out
    }

    /// `p`'s documents where the repository layout puts them (`packages/<id>/<version>/…`), and
    /// an encrypted version's scheme, with no file list in the clear.
    private static func checkLayout(_ p: PackageEntry, _ add: (ReasonCode, String) -> Void) {
        let id = p.id.rawValue
        let v = p.version.description
        let bundleName = p.encryption == nil ? "bundle.zip" : "bundle.sealed"
        if p.bundle.path != "packages/\(id)/\(v)/\(bundleName)" {
            add("bad-layout", "bundle path \(quoted(p.bundle.path)) should be packages/\(id)/\(v)/\(bundleName)")
        }
        if let e = p.encryption {
            if e.files.path != "packages/\(id)/\(v)/files.sealed" {
                add(
                    "bad-layout",
                    "sealed file list path \(quoted(e.files.path)) should be packages/\(id)/\(v)/files.sealed")
            }
            if e.scheme != Encryption.scheme {
                add("bad-encryption", "encryption scheme \(quoted(e.scheme)) is not \(Encryption.scheme)")
            }
            if p.filesGzip != nil {
                add("bad-encryption", "an encrypted version has no filesGzip (it would be in the clear)")
            }
        }
        if p.files.path != "packages/\(id)/\(v)/files.json" {
            add("bad-layout", "file list path \(quoted(p.files.path)) should be packages/\(id)/\(v)/files.json")
        }
    }

    /// `p`'s `corsOrigins` and `networkHosts` well formed, at most `PackageAccess.maxEntries`
    /// each, and no `corsOrigins` on an encrypted version (it is never readable across origins).
    private static func checkAccess(_ p: PackageEntry, _ add: (ReasonCode, String) -> Void) {
        for (field, list) in [("corsOrigins", p.corsOrigins), ("networkHosts", p.networkHosts)] {
            if let list, list.count > PackageAccess.maxEntries {
                add("bad-access", "\(field) has \(list.count) entries, more than \(PackageAccess.maxEntries)")
            }
        }
        for o in p.corsOrigins ?? [] {
            if let why = PackageAccess.originProblem(o) { add("bad-access", "corsOrigins entry \(quoted(o)): \(why)") }
        }
        for h in p.networkHosts ?? [] {
            if let why = PackageAccess.hostProblem(h) { add("bad-access", "networkHosts entry \(quoted(h)): \(why)") }
        }
        if p.encryption != nil, !(p.corsOrigins ?? []).isEmpty {
            add("bad-access", "an encrypted version lists corsOrigins: it is never readable across origins")
        }
    }

    /// Each route of `p` well formed, written as pack normalises it, and claimed by no other
    /// package (`owners`: the first claimant of each prefix).
    private static func checkRoutes(
        _ p: PackageEntry, owners routeOwner: inout [RoutePrefix: PackageID], _ add: (ReasonCode, String) -> Void
    ) {
        for r in p.routes {
            guard let prefix = RoutePrefix(r) else {
                add("bad-route", "route \(quoted(r)): \(RoutePrefix.problem(r) ?? "invalid")")
                continue
            }
            if prefix.description != r {
                add("route-not-normalised", "route \(quoted(r)) should be written \(prefix) (pack writes it so)")
            }
            if let owner = routeOwner[prefix], owner != p.id {
                add("route-conflict", "route \(prefix) is also claimed by \(owner)")
            } else {
                routeOwner[prefix] = p.id
            }
        }
    }
}
