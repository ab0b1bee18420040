import ArgumentParser
import Foundation
import Larder
import LarderFetch
import LarderFileSystem
import LarderPublish
import SystemPackage

extension LarderCommand {
    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Check a repository or a single bundle (the CI gate).",
            discussion: """
                A repository (a directory with index.json): the signature by a trusted key, the \
                schema, serial and expiry, the index rules (one entry per package and channel, no \
                route claimed twice, dependencies present), every bundle, file list and object with \
                its declared size and sha256, every bundle through the device's strict archive reader \
                and equal to its file list, every object inflating to its hash, the entry file, and \
                relative src/href/url() references in HTML and CSS (http(s):, data: and larder: links \
                are not checked).
                A repository URL (https://…, http://…): the same checks on the repository as the \
                server serves it, a post-deploy check — the signature file, the index, the index copy \
                the signature names, and every file list, bundle and object the index names are \
                downloaded into a temporary directory (nothing trusted; sizes capped by the index) and \
                checked there; what cannot be fetched is a problem with the fetch's code.
                An encrypted version is checked without its key as far as that goes (signature, \
                layout, the marker, the sealed bundle, list and delta manifests by size, sha256 and \
                header); with a --recipient-key that opens it, fully (its list, each object's sealed \
                bytes and content, the bundle through the strict reader, the deltas' lists).
                A bundle (a .zip): the archive rules and its references; with --files, its tree must \
                equal that file list.

                Prints one line per problem, then a summary. Exit 0 clean, 1 problems found, 64 usage.
                """)

        @Argument(help: ArgumentHelp("A repository directory or URL, or a bundle .zip.", valueName: "PATH"))
        var path: String

        @Option(
            name: .customLong("ca-file"),
            help: ArgumentHelp(
                "For a repository URL: also trust the CA certificates in this PEM file (repeatable).",
                valueName: "FILE"))
        var caFiles: [FilePath] = []

        @Flag(help: "For a repository URL: allow plain http to a host other than loopback.")
        var allowHttp = false

        @Option(
            name: .customLong("public-key"),
            help: ArgumentHelp("A trusted public key file (repeatable); required for a repository.", valueName: "FILE"))
        var publicKeys: [FilePath] = []

        @Flag(help: "Check a repository's structure without its signature.")
        var skipSignature = false

        @Option(help: ArgumentHelp("For a bundle: the files.json its tree must equal.", valueName: "FILES_JSON"))
        var files: FilePath?

        @Option(help: "For a bundle: the entry file name used for directory links.")
        var entry = "index.html"

        @Option(
            name: .customLong("recipient-key"),
            help: ArgumentHelp(
                "A recipient private key: encrypted versions it opens are checked fully (repeatable).",
                valueName: "FILE"))
        var recipientKeys: [FilePath] = []

        @OptionGroup var output: OutputOptions

        func validate() throws {
            if isRepository && publicKeys.isEmpty && !skipSignature {
                throw ValidationError("verifying a repository needs at least one --public-key (or --skip-signature)")
            }
        }

        var isRepository: Bool { !path.hasSuffix(".zip") }

        var repositoryURL: URL? {
            let lower = path.lowercased()
            guard lower.hasPrefix("https://") || lower.hasPrefix("http://") else { return nil }
            return URL(string: path.hasSuffix("/") ? path : path + "/")
        }

        func run() async throws {
            var keys: [PublicKey] = []
            for k in publicKeys {
                do { keys.append(try PublisherKeys.loadPublicKey(k)) } catch {
                    throw Output.failure(command: "verify", code: "key", message: "\(error)", json: output.json)
                }
            }
            var verifier = Verifier(trustedKeys: keys, checkSignature: !skipSignature)
            for k in recipientKeys {
                do { verifier.recipientKeys.append(try PublisherKeys.loadRecipientKey(k)) } catch {
                    throw Output.failure(command: "verify", code: "key", message: "\(error)", json: output.json)
                }
            }
            let report: VerifyReport
            if let base = repositoryURL {
                report = try await verifyRemote(base, verifier)
            } else if isRepository {
                report = verifier.verifyRepository(FilePath(path))
            } else {
                var list: FileList?
                if let f = files {
                    do { list = try Larder.loadFileList(f) } catch {
                        throw Output.failure(
                            command: "verify", code: "file-list", message: "\(error)", json: output.json)
                    }
                }
                report = verifier.verifyBundle(FilePath(path), fileList: list, entryName: entry)
            }
            try Output.emit(
                VerifyOutput(report: report, signatureSkipped: skipSignature && isRepository), json: output.json)
            if !report.ok { throw ExitStatus.failure }
        }

        /// The repository at `base`, downloaded into a temporary directory and verified there.
        private func verifyRemote(_ base: URL, _ verifier: Verifier) async throws -> VerifyReport {
            var options = HTTPOptions()
            options.caFiles =
                caFiles.map(\.string) + (Environment["LARDER_CA_FILE"].map { [$0] } ?? [])
            options.allowInsecureHTTP = allowHttp
            let transport: HTTPTransport
            do { transport = try HTTPTransport(options: options, stack: .platform) } catch {
                throw Output.failure(command: "verify", code: error.code, message: "\(error)", json: output.json)
            }
            let scratch = FilePath(Environment["TMPDIR"] ?? "/tmp").joined(
                "larder-verify-\(ProcessInfo.processInfo.processIdentifier)-\(UInt32.random(in: 0...UInt32.max))")
            do { try SystemCalls.mkdir(scratch, permissions: [.ownerReadWriteExecute]) } catch {
                throw Output.failure(command: "verify", code: "io", message: "\(error)", json: output.json)
            }
            defer { try? SystemCalls.removeTree(scratch) }
            return await Larder.verifyRemoteRepository(base, verifier: verifier, transport: transport, scratch: scratch)
        }
    }
}
