import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// The CI gate: checks a repository or a single bundle the way a device will, and more.
package struct Verifier: Sendable {
    /// Keys whose signature on the index is accepted.
    package var trustedKeys: [PublicKey]
    /// Skip the signature check (structure only); `verify` without keys must say so.
    package var checkSignature: Bool
    /// The limits bundles are read with; an object may inflate to at most `maxFileBytes`.
    package var limits: TreeLimits
    let now: @Sendable () -> Date
    /// How stored blobs are decoded (`BytePipeline.standard`).
    package var pipeline: BytePipeline = .standard
    /// Recipient keys that open encrypted versions, which are then checked fully; without one,
    /// an encrypted version is checked as far as the key is not needed (manifests §16).
    package var recipientKeys: [RecipientKey] = []

    /// Creates a verifier.
    package init(
        trustedKeys: [PublicKey], checkSignature: Bool = true, limits: TreeLimits = .standard,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.trustedKeys = trustedKeys
        self.checkSignature = checkSignature
        self.limits = limits
        self.now = now
    }

    // MARK: repository

    /// Verifies the repository at `root`: signature, schema, serial and expiry, index rules, and
    /// every bundle, file list and object the index names.
    package func verifyRepository(_ root: FilePath) -> VerifyReport {
        let layout = RepositoryLayout(root: root)
        var report = VerifyReport(kind: "repository", path: root.string)
        func problem(
            _ code: ReasonCode, _ message: String, package: String? = nil, version: String? = nil, file: String? = nil
        ) {
            report.problems.append(
                VerifyProblem(code: code, package: package, version: version, file: file, message: message))
        }
        report.problems += pendingProblems(layout)
        guard let indexBytes = try? AtomicFile.read(layout.index, limit: ManifestCoding.maxDocumentBytes + 1) else {
            problem("index-missing", "cannot read \(RepositoryLayout.indexName)", file: RepositoryLayout.indexName)
            return report
        }
        report.signatureChecked = checkSignature
        guard let delegatedRoot = checkTrust(indexBytes, layout: layout, report: &report) else { return report }
        var index: RepositoryIndex
        do {
            index = try ManifestCoding.decode(
                RepositoryIndex.self, from: indexBytes, document: RepositoryLayout.indexName)
        } catch {
            problem(error.code(or: "index-schema"), error.description, file: RepositoryLayout.indexName)
            return report
        }
        if let refs = index.shards {
            // Every shard and the catalog, checked as a device checks the ones it reads, and the
            // catalog against all of them.
            do {
                index = try Publisher.withShards(index, layout)
                report.shardsChecked = refs.files.count
            } catch {
                problem("index-shard", "\(error)", file: RepositoryLayout.indexName)
                return report
            }
        }
        report.serial = index.serial
        report.problems += indexProblems(index)
        if let delegatedRoot = delegatedRoot.root {
            report.problems += delegationProblems(index, root: delegatedRoot, layout: layout)
            report.teamsChecked = index.delegations?.parts.count ?? 0
        }
        var checkedObjects: [SHA256Digest: Bool] = [:]
        for entry in index.packages {
            report.packagesChecked += 1
            verifyPackage(entry, layout: layout, report: &report, objects: &checkedObjects)
        }
        report.objectsChecked = checkedObjects.count
        return report
    }

    /// The index's signature: in a delegated repository the chain from root 1 (checked whether or
    /// not keys were given; without them, structure only), else the trusted keys. Nil when the
    /// report is final (the chain cannot be followed); otherwise the root followed, if any.
    func checkTrust(_ indexBytes: Data, layout: RepositoryLayout, report: inout VerifyReport) -> Trusted? {
        var problems: [VerifyProblem] = []
        defer { report.problems += problems }
        let problem = { (code: ReasonCode, message: String, file: String) in
            problems.append(VerifyProblem(code: code, file: file, message: message))
        }
        if isDelegated(layout) {
            guard let (root, signer) = checkDelegatedSignature(indexBytes, layout: layout, problem: problem) else {
                return nil
            }
            report.signedBy = signer
            report.rootVersion = root.document.version
            return Trusted(root: root)
        }
        if checkSignature { report.signedBy = checkIndexSignature(indexBytes, layout: layout, problem: problem) }
        return Trusted(root: nil)
    }

    /// What `checkTrust` found: the root followed in a delegated repository.
    struct Trusted {
        /// The root, or nil for a single-key repository.
        var root: HeldRoot?
    }

    /// Pending index or signature files: a publication under way or interrupted.
    func pendingProblems(_ layout: RepositoryLayout) -> [VerifyProblem] {
        [RepositoryLayout.indexName, RepositoryLayout.signatureName].compactMap { name in
            let pending = name + RepositoryLayout.pendingSuffix
            guard AtomicFile.exists(layout.root.joined(pending)) else { return nil }
            return VerifyProblem(
                code: "publication-interrupted", file: pending,
                message: "a pack or revoke was interrupted; run it again to complete or discard it")
        }
    }

    /// What the decoded index itself breaks: a serial of 0, an expiry passed, the index rules.
    func indexProblems(_ index: RepositoryIndex) -> [VerifyProblem] {
        let file = RepositoryLayout.indexName
        var out: [VerifyProblem] = []
        if index.serial == 0 {
            out.append(
                VerifyProblem(
                    code: "index-serial", package: nil, version: nil, file: file,
                    message: "serial is 0; the first published index has serial 1"))
        }
        if index.expires <= now() {
            out.append(
                VerifyProblem(
                    code: "index-expired", package: nil, version: nil, file: file,
                    message:
                        "the index expired at \(ManifestCoding.formatRFC3339(index.expires)); re-sign it (any pack or revoke does)"
                ))
        }
        for issue in IndexRules.issues(index) {
            out.append(
                VerifyProblem(
                    code: issue.code, package: issue.package, version: issue.version, file: file, message: issue.message
                ))
        }
        return out
    }

    /// The index's signature file: readable, well formed, naming these index bytes, and signed
    /// by a trusted key; returns the key id that signed it (nil when it is not).
    func checkIndexSignature(
        _ indexBytes: Data, layout: RepositoryLayout, problem: (ReasonCode, String, String) -> Void
    ) -> String? {
        do {
            let sigBytes = try AtomicFile.read(layout.signature, limit: 1 << 20)
            let sig = try ManifestCoding.decode(
                SignatureFile.self, from: sigBytes, document: RepositoryLayout.signatureName)
            checkIndexName(sig.index, indexBytes, layout: layout) { problem($0, $1, $2) }
            return try IndexSignature.verify(indexBytes, signatures: sig, trusted: trustedKeys)
        } catch let e as SigningError {
            let code: ReasonCode = if case .invalidSignature = e { "signature-invalid" } else { "signature-untrusted" }
            problem(code, e.description, RepositoryLayout.signatureName)
        } catch let e as ManifestError {
            problem(e.code(or: "signature-malformed"), e.description, RepositoryLayout.signatureName)
        } catch let e as FileSystemError {
            problem(
                "signature-missing", "cannot read \(RepositoryLayout.signatureName): \(e.errno)",
                RepositoryLayout.signatureName)
        } catch {
            problem("signature-malformed", "\(error)", RepositoryLayout.signatureName)
        }
        return nil
    }

    /// The index the signature file names (`index`): the same bytes as `index.json` (else a
    /// device sees a torn pair), and the immutable copy `indexes/<sha256>.json` a device falls
    /// back on. A signature file from before `index` names nothing and is not a problem.
    func checkIndexName(
        _ named: IndexName?, _ indexBytes: Data, layout: RepositoryLayout,
        problem: (ReasonCode, String, String) -> Void
    ) {
        guard let named else { return }
        if !named.names(indexBytes) {
            problem(
                "index-torn",
                "\(RepositoryLayout.signatureName) names another index (\(named.size) bytes, sha256 \(named.sha256)) than \(RepositoryLayout.indexName) (\(indexBytes.count) bytes, sha256 \(SHA256Digest.of(indexBytes)))",
                RepositoryLayout.signatureName)
        }
        let copyPath = RepositoryLayout.indexCopyPath(named.sha256)
        guard let copy = try? AtomicFile.read(layout.resolve(copyPath), limit: ManifestCoding.maxDocumentBytes + 1)
        else {
            problem(
                "index-copy-missing",
                "no copy of the signed index at \(copyPath): a device whose cache pairs this signature with another index cannot recover",
                copyPath)
            return
        }
        if !named.names(copy) {
            problem("index-copy-mismatch", "\(copyPath) is not the index the signature names", copyPath)
        }
    }

    // MARK: single bundle

    /// Verifies one bundle: the strict archive rules, its links, and when a file list is given,
    /// that the bundle's tree equals it exactly.
    package func verifyBundle(_ path: FilePath, fileList: FileList? = nil, entryName: String = "index.html")
        -> VerifyReport
    {
        var report = VerifyReport(kind: "bundle", path: path.string)
        func problem(_ code: ReasonCode, _ file: String?, _ message: String) {
            report.problems.append(VerifyProblem(code: code, file: file, message: message))
        }
        var collector = TextCollector()
        do {
            let listing = try ZipReader(limits: limits).read(path, into: &collector)
            report.packagesChecked = 1
            report.filesChecked = listing.files.count
            if let list = fileList { compare(listing.files, list, bundle: path.string, problem: problem) }
            checkLinks(collector.texts, files: listing.files, entryName: entryName, problem: problem)
        } catch {
            problem(error.code, nil, "bundle rejected by the archive reader: \(error)")
        }
        return report
    }
}
