import ArgumentParser
import Foundation
import Larder
import SystemPackage

/// Options shared by the commands that work on a device sandbox.
struct SandboxOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The sandbox directory.", valueName: "DIR"))
    var root: String

    @Option(help: ArgumentHelp("Seconds to wait for another writer's lock.", valueName: "SECONDS"))
    var lockTimeout = 10.0

    func open(allowCorruptState: Bool = false) throws(StoreError) -> Sandbox {
        var o = Sandbox.Options()
        o.lockTimeout = lockTimeout
        o.allowCorruptState = allowCorruptState
        return try Sandbox.open(FilePath(root), options: o)
    }
}

/// Runs a sandbox use case, mapping its typed error to the exit code and message.
func withSandbox<T>(_ command: String, _ json: Bool, _ body: () throws(StoreError) -> T) throws -> T {
    do {
        return try body()
    } catch {
        throw Output.failure(command: command, code: error.code, message: error.description, json: json)
    }
}

struct Install: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Install a bundle into a sandbox and activate it (side-load).",
        discussion: """
            Extracts BUNDLE into a fresh staging directory with the strict archive reader, hashing \
            while writing; checks every file against FILES_JSON (size, sha256, nothing missing, \
            nothing extra); makes it durable; moves it into packages/ID/VERSION; and activates it \
            as pending, keeping the previous active version as fallback. Without --files the \
            bundle itself is trusted and the list computed from it is recorded — use --files for \
            anything that came over a network. A version already on disk is activated without \
            extracting. A version rolled back off before is refused unless --force.
            """)

    @Argument(help: ArgumentHelp("The bundle (.zip).", valueName: "BUNDLE")) var bundle: String
    @OptionGroup var sandbox: SandboxOptions
    @Option(help: "Package id.") var id: String
    @Option(help: "Version (SemVer 2.0.0).") var version: String
    @Option(help: ArgumentHelp("The version's files.json to verify against.", valueName: "FILES_JSON")) var files: String?
    @Flag(help: "Install even a version that was rolled back off before.") var force = false
    @OptionGroup var output: OutputOptions

    func run() throws {
        var list: FileList?
        if let f = files {
            do { list = try Larder.loadFileList(FilePath(f)) } catch {
                throw Output.failure(command: "install", code: "file-list", message: "\(error)", json: output.json)
            }
        }
        let report = try withSandbox("install", output.json) { () throws(StoreError) in
            let s = try sandbox.open()
            defer { s.close() }
            return try s.install(bundle: FilePath(bundle), id: id, version: version, fileList: list, force: force)
        }
        if output.json { return try Output.json(report) }
        switch report.outcome {
        case .installed:
            Output.line("installed \(report.id) \(report.version): \(report.fileCount) files, \(Output.bytes(report.size)), " + (report.verifiedAgainstFileList ? "verified against the file list" : "bundle trusted (no --files)"))
        case .activated: Output.line("activated \(report.id) \(report.version) (already on disk)")
        default: Output.line("\(report.id) \(report.version) is already installed and active")
        }
        if report.outcome != .unchanged {
            Output.line("  active \(report.version) (pending until confirmed), fallback \(report.fallback ?? "none")")
        }
    }
}

struct Confirm: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Mark the active version of a package healthy.")
    @Argument(help: "Package id.") var id: String
    @OptionGroup var sandbox: SandboxOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        let o = try withSandbox("confirm", output.json) { () throws(StoreError) in
            let s = try sandbox.open()
            defer { s.close() }
            return try s.confirm(id: id)
        }
        if output.json { return try Output.json(o) }
        Output.line("\(o.id) \(o.active ?? "-") is \(o.health.rawValue)")
    }
}

struct Rollback: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Activate the fallback version of a package, or a named version on disk.",
        discussion: "The version left is recorded as failed and is never installed again automatically.")
    @Argument(help: "Package id.") var id: String
    @Option(help: ArgumentHelp("A version on disk to activate instead of the fallback.", valueName: "VERSION")) var to: String?
    @Option(help: "Why (recorded in the history).") var reason = "rolled back by the operator"
    @OptionGroup var sandbox: SandboxOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        let r = try withSandbox("rollback", output.json) { () throws(StoreError) in
            let s = try sandbox.open()
            defer { s.close() }
            return try s.rollback(id: id, to: to, reason: reason)
        }
        if output.json { return try Output.json(r) }
        Output.line("rolled back \(r.id): \(r.from ?? "-") → \(r.to)")
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show each package's versions, health, disk use and history (takes no lock).")
    @OptionGroup var sandbox: SandboxOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        let report = try withSandbox("status", output.json) { () throws(StoreError) in
            try SandboxReader(root: FilePath(sandbox.root)).status()
        }
        if output.json { return try Output.json(report) }
        if report.packages.isEmpty { Output.line("no packages in \(report.root)") }
        for p in report.packages {
            Output.line("\(p.id): active \(p.active ?? "-") (\(p.health.rawValue)), fallback \(p.fallback ?? "-"), \(Output.bytes(p.diskUse)) on disk")
            for v in p.versions {
                Output.line("  \(v.version)  \(v.role.rawValue)\(v.pinned ? ", pinned" : "")  \(v.fileCount) files  \(Output.bytes(v.size))")
            }
            for f in p.failed { Output.line("  failed \(f.version): \(f.reason)") }
            for h in p.history.suffix(10) {
                var line = "  \(ManifestCoding.formatRFC3339(h.at))  \(h.event.rawValue) \(h.version?.description ?? "")"
                if let from = h.from { line += " (from \(from))" }
                if let r = h.reason { line += ": \(r)" }
                Output.line(line)
            }
        }
    }
}

struct GC: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gc",
        abstract: "Delete versions that are not active, fallback, pinned or retained.",
        discussion: "Pins held by live processes (an app's web views) are respected; pins of dead processes expire.")
    @Option(help: ArgumentHelp("Other versions to keep per package, newest first.", valueName: "N")) var keep = 1
    @OptionGroup var sandbox: SandboxOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard keep >= 0 else { throw ValidationError("--keep must be 0 or more") }
    }

    func run() throws {
        let r = try withSandbox("gc", output.json) { () throws(StoreError) in
            let s = try sandbox.open()
            defer { s.close() }
            return try s.gc(keep: keep)
        }
        if output.json { return try Output.json(r) }
        Output.line("removed \(r.removed.isEmpty ? "nothing" : r.removed.joined(separator: ", "))" + (r.removed.isEmpty ? "" : ", freed \(Output.bytes(r.freedBytes))"))
        if !r.keptPinned.isEmpty { Output.line("kept (pinned by a live session): \(r.keptPinned.joined(separator: ", "))") }
    }
}

struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify every installed version file by file; with --repair, rebuild the state.",
        discussion: """
            Checks each version on disk against its file list (size, sha256, nothing extra) and \
            state.json against the disk. --repair rebuilds state.json from the versions that \
            verify (also when state.json is corrupt or missing) and removes those that do not. \
            Exit 0 when nothing is wrong (or it was repaired), 1 otherwise.
            """)
    @Flag(help: "Rebuild state.json from the verified versions on disk.") var repair = false
    @OptionGroup var sandbox: SandboxOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        let r = try withSandbox("doctor", output.json) { () throws(StoreError) in
            let s = try sandbox.open(allowCorruptState: true)
            defer { s.close() }
            return try s.doctor(repair: repair)
        }
        if output.json {
            try Output.json(r)
        } else {
            for p in r.problems { Output.line("problem: \(p)") }
            Output.line("verified: \(r.verifiedVersions.isEmpty ? "none" : r.verifiedVersions.joined(separator: ", "))")
            Output.line(r.ok ? "ok" : (r.repaired ? "repaired: state rebuilt from the verified versions" : "\(r.problems.count) problem(s); run with --repair to rebuild"))
        }
        if !r.ok && !r.repaired { throw ExitCode(1) }
    }
}
