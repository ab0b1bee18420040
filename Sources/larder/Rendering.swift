import Foundation
import Larder
import LarderPublish

// The text form of every report `larder` prints. The JSON form is the report's own `Encodable`
// shape (see `Output.emit`); these lines are for people.

extension KeygenReport: RenderedReport {
    var textLines: [String] {
        [
            "key id:      \(keyId)",
            "public key:  \(publicKey)",
            "private key: \(privateKeyFile) (mode 0600)",
            "public file: \(publicKeyFile)",
        ]
    }
}

extension PackReport: RenderedReport {
    var textLines: [String] {
        [
            "packed \(id) \(version) (channel \(channel)): \(fileCount) files, \(Output.bytes(totalSize))",
            "  bundle  \(bundle.path)  \(Output.bytes(bundle.size))  sha256 \(bundle.sha256)",
            "  files   \(fileList.path)",
            "  objects \(objectsWritten) written (\(Output.bytes(objectBytesWritten)) gzip), \(objectsReused) already present",
            "  index   serial \(serial), expires \(ManifestCoding.formatRFC3339(expires)), signed by \(signedBy)",
        ]
            + (encryptedTo.map { ["  sealed  encrypted to [\($0.joined(separator: ", "))]"] } ?? [])
            + (part.map {
                [
                    "  part    team \($0.team) serial \($0.serial)\($0.composed ? "" : " (index not composed: run `larder compose`)")"
                ]
            } ?? [])
            + deltas.map { d in
                "  delta   from \(d.from): \(d.patches) patch(es) \(Output.bytes(d.patchBytes)), \(d.objects) object(s) "
                    + "\(Output.bytes(d.objectBytes)), \(d.linked) linked, manifest \(Output.bytes(d.manifest.size)) "
                    + "(objects alone: \(Output.bytes(d.objectBytesWithoutPatches)))"
            }
    }
}

extension RevokeReport: RenderedReport {
    var textLines: [String] {
        ["revoked \(id) \(version): index serial \(serial), signed by \(signedBy)"]
            + (part.map {
                [
                    "  part    team \($0.team) serial \($0.serial)\($0.composed ? "" : " (index not composed: run `larder compose`)")"
                ]
            } ?? [])
    }
}

extension RewrapReport: RenderedReport {
    var textLines: [String] {
        [
            "rewrapped \(versions.joined(separator: ", ")) for [\(recipients.joined(separator: ", "))]: "
                + "index serial \(serial), signed by \(signedBy)"
        ]
    }
}

extension Publisher.RotationReport: RenderedReport {
    var textLines: [String] {
        [
            "index serial \(serial) names the trusted keys [\(keys.joined(separator: ", "))], signed by [\(signedBy.joined(separator: ", "))]"
        ]
    }
}

/// `verify`'s report with what the text form says about a skipped signature check.
struct VerifyOutput: RenderedReport {
    let report: VerifyReport
    let signatureSkipped: Bool

    func encode(to encoder: Encoder) throws { try report.encode(to: encoder) }

    var textLines: [String] {
        var summary = "\(report.kind) \(report.path): \(report.problems.count) problem(s); "
        summary +=
            "\(report.packagesChecked) package(s), \(report.filesChecked) file(s), \(report.objectsChecked) object(s)"
            + (report.deltasChecked > 0 ? ", \(report.deltasChecked) delta(s)" : "")
            + (report.shardsChecked > 0 ? ", \(report.shardsChecked) index shard(s)" : "") + " checked"
        if let s = report.serial { summary += "; serial \(s)" }
        if let r = report.rootVersion { summary += "; root \(r), \(report.teamsChecked) team part(s)" }
        if let k = report.signedBy { summary += "; signed by \(k)" }
        if signatureSkipped { summary += "; signature NOT checked" }
        if report.encryptedChecked > 0 {
            let closed = report.encryptedChecked - report.encryptedOpened
            summary += "; \(report.encryptedChecked) encrypted version(s)"
            summary +=
                closed == 0 ? ", all opened" : ", \(closed) checked without the key (no --recipient-key opens it)"
        }
        return report.problems.map(\.description) + [summary]
    }
}

/// `init`'s config with the sandbox it was written to.
struct InitOutput: RenderedReport {
    let config: SyncConfig
    let root: String

    func encode(to encoder: Encoder) throws { try config.encode(to: encoder) }

    var textLines: [String] {
        [
            "initialised \(root): repository \(config.repository), channel \(config.channel), app \(config.appVersion), device \(config.deviceId)"
                + (config.diskBudget.map { ", disk budget \(Output.bytes($0))" } ?? "")
        ]
    }
}

extension Plan: RenderedReport {
    var textLines: [String] {
        guard !actions.isEmpty else { return ["nothing to do"] }
        return actions.map { a in
            var line = "\(a.kind.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)) \(a.id)"
            if let f = a.from { line += " \(f)" }
            if let t = a.to, t != a.from { line += a.from == nil ? " \(t)" : " → \(t)" }
            if let c = a.cost {
                line +=
                    "  [\(c.method.rawValue): \(Output.bytes(c.bytes)) in \(c.requests) request(s), \(c.reused) file(s) reused; bundle \(Output.bytes(c.bundleBytes))]"
                let others = (c.alternatives ?? []).filter { $0.method != c.method }
                if !others.isEmpty {
                    line +=
                        " (weighed: "
                        + others.map { "\($0.method.rawValue) \(Output.bytes($0.bytes)) in \($0.requests)" }.joined(
                            separator: ", ") + ")"
                }
            }
            return line + "  — \(a.reason)"
        }
    }
}

extension SyncReport: RenderedReport {
    var textLines: [String] {
        var lines = ["index serial \(serial)\(indexChanged ? "" : " (unchanged)")"]
        if upToDate { lines[0] += ": up to date, nothing changed since the last sync" }
        for p in packages {
            var line = "\(p.id): \(p.action.rawValue)"
            if let f = p.from { line += " \(f)" }
            if let t = p.to, t != p.from { line += p.from == nil ? " \(t)" : " → \(t)" }
            if p.action == .install || p.action == .update {
                line += " via \(p.method?.rawValue ?? "?")\(p.streamed == true ? " (extracted while downloading)" : "")"
                if let d = p.delta, p.method == .delta {
                    line +=
                        " (\(d.patchesApplied) patch(es), \(Output.bytes(d.patchBytes)); \(d.fallbacks.count) fallback(s))"
                }
                line += ", fetched \(Output.bytes(p.bytesFetched))"
                if let b = p.bundleBytes { line += " of a \(Output.bytes(b)) bundle" }
                if let m = p.metadataBytes, m > 0 { line += " (+ \(Output.bytes(m)) of metadata)" }
                line += String(format: " in %.2f s", p.seconds)
            }
            line += ": \(p.outcome.rawValue)"
            if p.outcome == .failed, let code = p.code { line += " [\(code)]" }
            if p.outcome != .done || p.action == .rollback || p.action == .remove { line += " — \(p.reason)" }
            lines.append(line)
            for f in p.delta?.fallbacks ?? [] {
                lines.append("  fell back to the \(f.to.rawValue) for \(f.content.hex.prefix(12))…: \(f.reason)")
            }
            if let unused = p.delta?.unused { lines.append("  delta not used: \(unused)") }
        }
        if !removedByGC.isEmpty { lines.append("gc removed \(removedByGC.joined(separator: ", "))") }
        if let b = budget { lines.append(b.line) }
        return lines
    }
}

extension InstallReport: RenderedReport {
    var textLines: [String] {
        var lines: [String]
        switch outcome {
        case .installed, .placed:
            lines = [
                "installed \(id) \(version): \(fileCount) files, \(Output.bytes(size)), "
                    + (verifiedAgainstFileList ? "verified against the file list" : "bundle trusted (no --files)")
            ]
        case .activated: lines = ["activated \(id) \(version) (already on disk)"]
        case .unchanged: lines = ["\(id) \(version) is already installed and active"]
        }
        if outcome != .unchanged {
            lines.append("  active \(version) (pending until confirmed), fallback \(fallback ?? "none")")
        }
        return lines
    }
}

extension HealthOutcome: RenderedReport {
    var textLines: [String] { ["\(id) \(active ?? "-") is \(health.rawValue)"] }
}

extension RollbackReport: RenderedReport {
    var textLines: [String] { ["rolled back \(id): \(from ?? "-") → \(to)"] }
}

extension StatusReport: RenderedReport {
    var textLines: [String] {
        var lines: [String] = packages.isEmpty ? ["no packages in \(root)"] : []
        if let budget = diskBudget {
            lines.append("disk budget: \(Output.bytes(diskUse)) of \(Output.bytes(budget)) used")
        }
        for p in packages {
            lines.append(
                "\(p.id): active \(p.active ?? "-") (\(p.health.rawValue)), fallback \(p.fallback ?? "-"), \(Output.bytes(p.diskUse)) on disk"
                    + (p.install.map { ", \($0)" } ?? "")
                    + (p.lastUse.map { ", last used \(ManifestCoding.formatRFC3339($0))" } ?? "")
            )
            for v in p.versions {
                lines.append(
                    "  \(v.version)  \(v.role.rawValue)\(v.pinned ? ", pinned" : "")  \(v.fileCount) files  \(Output.bytes(v.size))"
                )
            }
            for f in p.failed { lines.append("  failed \(f.version): \(f.reason)") }
            for h in p.history.suffix(10) {
                var line =
                    "  \(ManifestCoding.formatRFC3339(h.at))  \(h.event.rawValue) \(h.version?.description ?? "")"
                if let from = h.from { line += " (from \(from))" }
                if let r = h.reason { line += ": \(r)" }
                lines.append(line)
            }
        }
        return lines
    }
}

extension GCReport: RenderedReport {
    var textLines: [String] {
        var lines = [
            "removed \(removed.isEmpty ? "nothing" : removed.joined(separator: ", "))"
                + (removed.isEmpty ? "" : ", freed \(Output.bytes(freedBytes))")
        ]
        if !keptPinned.isEmpty {
            lines.append("kept (pinned by a live session): \(keptPinned.joined(separator: ", "))")
        }
        if let b = budget { lines.append(b.line) }
        return lines
    }
}

extension BudgetReport {
    /// `disk budget: 12.0 MiB of 20.0 MiB; evicted a, b (least recently used first)`.
    var line: String {
        var line = "disk budget: \(Output.bytes(after)) of \(Output.bytes(budget))"
        if !evicted.isEmpty { line += "; evicted \(evicted.joined(separator: ", ")) (least recently used first)" }
        if !keptPinned.isEmpty { line += "; kept (pinned by a live session): \(keptPinned.joined(separator: ", "))" }
        if after > budget { line += "; over budget (what is left is eager, pinned or just installed)" }
        return line
    }
}

extension DoctorReport: RenderedReport {
    var textLines: [String] {
        problems.map { "problem: \($0)" } + [
            "verified: \(verifiedVersions.isEmpty ? "none" : verifiedVersions.joined(separator: ", "))",
            ok
                ? "ok"
                : (repaired
                    ? "repaired: state rebuilt from the verified versions"
                    : "\(problems.count) problem(s); run with --repair to rebuild"),
        ]
    }
}
