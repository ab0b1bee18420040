import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// `verify` on a delegated repository (manifests §18): the whole chain, from root 1 to the index,
/// as a device that starts from the trusted keys would walk it, then every part against the root
/// and the index's entries against the parts.
extension Verifier {
    /// Whether the repository is delegated: it has root 1, or its signature file names a root.
    func isDelegated(_ layout: RepositoryLayout) -> Bool {
        if AtomicFile.exists(layout.resolve(RootName.path(version: 1))) { return true }
        guard let bytes = try? AtomicFile.read(layout.signature, limit: 1 << 20) else { return false }
        return (try? ManifestCoding.decode(SignatureFile.self, from: bytes, document: "signature"))?.root != nil
    }

    /// Walks `roots/1.json` … up to the root the signature file names, each signed by the previous
    /// root's threshold and its own (root 1 by a trusted key, when the signature is checked), then
    /// checks the index's signature by the index keys. Returns the root and the key that signed.
    func checkDelegatedSignature(
        _ indexBytes: Data, layout: RepositoryLayout, problem: (ReasonCode, String, String) -> Void
    ) -> (HeldRoot, String?)? {
        let sig: SignatureFile
        do {
            let sigBytes = try AtomicFile.read(layout.signature, limit: 1 << 20)
            sig = try ManifestCoding.decode(
                SignatureFile.self, from: sigBytes, document: RepositoryLayout.signatureName)
        } catch {
            problem("signature-malformed", "\(error)", RepositoryLayout.signatureName)
            return nil
        }
        checkIndexName(sig.index, indexBytes, layout: layout) { problem($0, $1, $2) }
        guard let named = sig.root else {
            problem(
                "delegation-root", "the repository has roots/ but its signature file names no root",
                RepositoryLayout.signatureName)
            return nil
        }
        guard let chain = rootChain(upTo: named.version, layout: layout, problem: problem) else { return nil }
        // Every link of the chain, root 1 anchored on its own keys (the structure), then whether a
        // device configured with the keys given accepts the newest root as it would: the newest
        // root alone (an app shipped with its keys), or the chain from root 1.
        let root: HeldRoot
        do {
            let own = (try DelegationCheck.decodeRoot(chain[0].bytes, document: "roots/1.json")).keys.compactMap(
                \.publicKey)
            root = try DelegationCheck.followRoots(held: nil, configured: own, chain: chain, named: named, now: now())
        } catch {
            problem(error.code, error.description, RootName.path(version: named.version))
            return nil
        }
        if checkSignature {
            let alone = try? DelegationCheck.followRoots(
                held: nil, configured: trustedKeys, chain: [chain[chain.count - 1]], named: named, now: now())
            let walked = try? DelegationCheck.followRoots(
                held: nil, configured: trustedKeys, chain: chain, named: named, now: now())
            if alone == nil && walked == nil {
                problem(
                    "delegation-root",
                    "no root is signed by a trusted key: a device configured with [\(trustedKeys.map(\.keyID).joined(separator: ", "))] accepts neither root \(named.version) nor root 1",
                    RootName.path(version: named.version))
                return nil
            }
        }
        if let copy = try? AtomicFile.read(layout.rootDocument, limit: 1 << 20), !named.names(copy) {
            problem("delegation-root", "root.json is not the newest root (roots/\(named.version).json)", "root.json")
        }
        guard checkSignature else { return (root, nil) }
        do {
            try DelegationCheck.requireIndexSignature(indexBytes, signatures: sig, root: root.document, now: now())
        } catch {
            problem(error.code, error.description, RepositoryLayout.signatureName)
            return (root, nil)
        }
        let indexKeys = Set(root.document.roles.index.keyIds)
        return (root, sig.signatures.first { indexKeys.contains($0.keyID) }?.keyID)
    }

    /// `roots/1.json` … `roots/<version>.json` with their signatures, as a device may fetch them;
    /// nil (and a problem) when one is missing.
    func rootChain(upTo version: UInt64, layout: RepositoryLayout, problem: (ReasonCode, String, String) -> Void)
        -> [DelegationCheck.Signed]?
    {
        var chain: [DelegationCheck.Signed] = []
        for v in 1...max(1, version) {
            let rel = RootName.path(version: v)
            guard let bytes = try? AtomicFile.read(layout.resolve(rel), limit: 1 << 20),
                let s = try? AtomicFile.read(layout.resolve(rel + ".sig"), limit: 1 << 20)
            else {
                problem(
                    "delegation-root", "\(rel) or its signature is missing: a device could not follow the roots", rel)
                return nil
            }
            chain.append(DelegationCheck.Signed(bytes: bytes, signature: s))
        }
        return chain
    }

    /// The index's delegations: the root it names, every part (bytes, team threshold, patterns) and
    /// the whole index (`full`, shards read) against the parts' entries.
    func delegationProblems(_ full: RepositoryIndex, root: HeldRoot, layout: RepositoryLayout) -> [VerifyProblem] {
        let file = RepositoryLayout.indexName
        guard let member = full.delegations else {
            return [
                VerifyProblem(
                    code: "delegation-root", file: file,
                    message: "the repository is delegated but the index has no delegations member")
            ]
        }
        guard member.root == root.name else {
            return [
                VerifyProblem(
                    code: "delegation-root", file: file,
                    message: "the index names root \(member.root.version), its signature file root \(root.name.version)"
                )
            ]
        }
        var bytes: [String: Data] = [:]
        for row in member.parts {
            bytes[row.team] = try? AtomicFile.read(
                layout.resolve(row.part.path), limit: ManifestCoding.maxDocumentBytes)
        }
        do {
            let parts = try DelegationCheck.checkParts(
                member.parts, partBytes: bytes, root: root.document, accepted: [:], now: now())
            var all = full
            all.shards = nil
            try DelegationCheck.checkComposition(all, parts: parts, root: root.document)
        } catch {
            return [VerifyProblem(code: error.code, file: file, message: error.description)]
        }
        return []
    }
}
