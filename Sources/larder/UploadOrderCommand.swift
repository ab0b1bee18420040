import ArgumentParser
import Larder
import LarderPublish
import SystemPackage

extension LarderCommand {
    struct Upload: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "upload-order",
            abstract: "Print (or perform, to a directory) the order that uploads a repository safely.",
            discussion: """
                Lists every file a server needs, in the order that never exposes an index before the \
                files it names: the immutable files first (objects/, packages/, indexes/, patches/, shards/: \
                any order, and already-uploaded ones can be skipped), then index.json, then \
                index.json.sig last (devices read it first). One line per file: PHASE PATH SIZE, \
                phase immutable, index or signature. With --to DIR, copies the repository to that \
                directory (a web server's root, a mounted bucket) in that order, each file written \
                under a temporary name, synced and renamed into place, and immutable files already \
                there with the same length skipped. Refuses a repository with a pack or revoke under \
                way or interrupted. For a bucket, upload with your tool in the same three steps \
                (see docs/publishing.md, "Upload order").
                """)

        @Argument(help: "The repository directory (as `larder pack` writes it).") var repo: FilePath
        @Option(help: ArgumentHelp("Copy the repository to this directory in that order.", valueName: "DIR"))
        var to: FilePath?
        @OptionGroup var output: OutputOptions

        func run() throws {
            do {
                if let to {
                    let report = try UploadOrder.perform(repo, to: to)
                    try Output.emit(UploadOutput(target: to.string, report: report), json: output.json)
                } else {
                    try Output.emit(UploadPlanOutput(steps: try UploadOrder.plan(repo)), json: output.json)
                }
            } catch let e as PublishError {
                throw Output.failure(command: "upload-order", code: e.code, message: e.description, json: output.json)
            }
        }
    }
}

/// `upload-order REPO`: the files in order.
struct UploadPlanOutput: RenderedReport {
    let steps: [UploadOrder.Step]
    var textLines: [String] { steps.map { "\($0.phase.rawValue) \($0.path) \($0.size)" } }
}

/// `upload-order REPO --to DIR`: what was copied.
struct UploadOutput: RenderedReport {
    let target: String
    let report: UploadOrder.Report
    var textLines: [String] {
        [
            "uploaded to \(target): \(report.copied.count) file(s) copied (\(Output.bytes(report.bytes))), "
                + "\(report.skipped) already there; index.json.sig last"
        ]
    }
}
