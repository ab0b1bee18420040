import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import Logging
import SystemPackage

/// The index pair: loaded and trusted, published through `.pending` files, an interrupted
/// publication completed or discarded, under the repository's publish lock.
extension Publisher {
    /// Reads the current index, first completing or discarding a half-published pair. The index
    /// must be signed by this publisher's key; `nil` for a repository with no index yet.
    /// `trusted` defaults to the publisher's own keys.
    func loadIndex(_ layout: RepositoryLayout, trusted: [PublicKey]? = nil) throws(PublishError) -> RepositoryIndex? {
        let trusted = trusted ?? ownKeys
        try recoverPending(layout, trusted: trusted)
        guard AtomicFile.exists(layout.index) else {
            if AtomicFile.exists(layout.signature) {
                throw .existingIndexUntrusted(detail: "\(layout.signature) exists without \(layout.index)")
            }
            return nil
        }
        let bytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.index) }
        let sigBytes = try io { () throws(FileSystemError) in try AtomicFile.read(layout.signature) }
        do {
            let sig = try ManifestCoding.decode(
                SignatureFile.self, from: sigBytes, document: RepositoryLayout.signatureName)
            try IndexSignature.verify(bytes, signatures: sig, trusted: trusted)
            let root = try ManifestCoding.decode(
                RepositoryIndex.self, from: bytes, document: RepositoryLayout.indexName)
            return try Self.withShards(root, layout)
        } catch let e as ShardError {
            throw .existingIndexUntrusted(detail: e.description)
        } catch let e as SigningError {
            throw .existingIndexUntrusted(detail: e.description)
        } catch let e as ManifestError {
            throw .existingIndexUntrusted(detail: e.description)
        } catch {
            throw .existingIndexUntrusted(detail: "\(error)")
        }
    }

    /// A sharded index whole: its entries and every shard's, read from the repository and
    /// checked against the sizes and digests it names. The result keeps `shards` (the layout to
    /// publish with) and is otherwise an inline index.
    static func withShards(_ root: RepositoryIndex, _ layout: RepositoryLayout) throws -> RepositoryIndex {
        guard let refs = root.shards else { return root }
        func contents(_ ref: BlobRef) throws -> Data {
            do { return try AtomicFile.read(layout.resolve(ref.path), limit: ManifestCoding.maxDocumentBytes) } catch {
                throw ShardError("\(ref.path) cannot be read: \(error)")
            }
        }
        var full = try ShardedIndex.assemble(
            root: root, shards: try refs.files.map(contents), catalog: try contents(refs.catalog))
        full.shards = refs
        return full
    }

    /// Completes a publication interrupted between writing the pending pair and renaming it, when
    /// the pending index verifies; otherwise discards the pending files.
    func recoverPending(_ layout: RepositoryLayout, trusted: [PublicKey]) throws(PublishError) {
        guard AtomicFile.exists(layout.pendingIndex) else {
            try? SystemCalls.unlink(layout.pendingSignature)
            return
        }
        let sigPath = AtomicFile.exists(layout.pendingSignature) ? layout.pendingSignature : layout.signature
        var valid = false
        if let bytes = try? AtomicFile.read(layout.pendingIndex), let sigBytes = try? AtomicFile.read(sigPath),
            let sig = try? ManifestCoding.decode(SignatureFile.self, from: sigBytes, document: "signature"),
            (try? IndexSignature.verify(bytes, signatures: sig, trusted: trusted)) != nil,
            (try? ManifestCoding.decode(RepositoryIndex.self, from: bytes, document: "index")) != nil
        {
            valid = true
        }
        logger.notice(
            "found an interrupted publication",
            metadata: [
                "repository": "\(layout.root)",
                "action": "\(valid ? "completing it" : "discarding it (does not verify)")",
            ])
        if valid {
            if sigPath == layout.pendingSignature {
                try renameDurably(layout.pendingSignature, layout.signature, in: layout.root)
            }
            try renameDurably(layout.pendingIndex, layout.index, in: layout.root)
        } else {
            try? SystemCalls.unlink(layout.pendingSignature)
            try? SystemCalls.unlink(layout.pendingIndex)
            try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(layout.root) }
        }
    }

    /// Bumps the serial and expiry, signs, and publishes the pair: both written as `.pending`
    /// files, then the signature renamed into place, then the index.
    /// `signers` default to the publisher's key and co-signers; a delegated repository's index is
    /// signed by the index keys, and its signature file names the `root`.
    func publish(
        _ index: inout RepositoryIndex, _ layout: RepositoryLayout, ttl: TimeInterval, signers: [PrivateKey]? = nil,
        root: RootName? = nil
    ) throws(PublishError) -> RepositoryIndex {
        guard index.serial < UInt64.max else { throw .serialExhausted }
        index.serial += 1
        index.expires = Date(timeIntervalSince1970: (now().timeIntervalSince1970 + ttl).rounded(.down))
        index.packages.sort { ($0.id, $0.channel) < ($1.id, $1.channel) }
        if let issue = IndexRules.issues(index).first { throw .indexRule(issue) }
        var signed = index
        signed.shards = nil
        signed.schemaVersion = currentSchemaVersion
        if (indexLayout ?? (index.shards != nil ? .sharded : .inline)) == .sharded {
            // The shards and catalog first, each under its digest (immutable, never rewritten):
            // the index that names them is published only once they are all durable.
            let split: (root: RepositoryIndex, files: [ShardedIndex.File])
            do { split = try ShardedIndex.split(signed) } catch {
                throw .manifest(.malformed(document: "index shards", detail: "\(error)"))
            }
            for file in split.files {
                let path = layout.resolve(file.ref.path)
                if AtomicFile.exists(path) { continue }
                try io { () throws(FileSystemError) in
                    try AtomicFile.makeDirectories(path.parentPath)
                    try AtomicFile.write(file.bytes, to: path)
                }
            }
            signed = split.root
            index.shards = split.root.shards
        } else {
            index.shards = nil
        }
        let bytes = try encode(signed)
        let sig: SignatureFile
        do { sig = try IndexSignature.sign(bytes, with: signers ?? ([key] + coSigners), root: root) } catch {
            throw .signing(.badKeyFile(path: "(signing key)", detail: "\(error)"))
        }
        let sigBytes = try encode(sig)
        // The immutable copy the signature names, before the pair that names it: a device whose
        // cache pairs this signature with another index fetches it.
        try writeIndexCopy(bytes, layout)
        try io { () throws(FileSystemError) in try AtomicFile.write(sigBytes, to: layout.pendingSignature) }
        try io { () throws(FileSystemError) in try AtomicFile.write(bytes, to: layout.pendingIndex) }
        try renameDurably(layout.pendingSignature, layout.signature, in: layout.root)
        try renameDurably(layout.pendingIndex, layout.index, in: layout.root)
        pruneShards(layout)
        return index
    }

    /// Removes the shard and catalog files that no kept index copy names (`keptIndexCopies`
    /// publications: a device that read one of those indexes may still fetch its shards). Best
    /// effort: a file left behind costs space, never correctness.
    func pruneShards(_ layout: RepositoryLayout) {
        let dir = layout.root.joined("shards")
        guard let buckets = try? SystemCalls.listDirectory(dir) else { return }
        var named = Set<String>()
        guard let copies = try? SystemCalls.listDirectory(layout.indexes) else { return }
        for copy in copies where copy.name.string.hasSuffix(".json") {
            guard
                let bytes = try? AtomicFile.read(
                    layout.indexes.joined(copy.name), limit: ManifestCoding.maxDocumentBytes)
            else { return }
            // An inline index (no `shards` member anywhere in it) names none: not decoded.
            if bytes.range(of: Data("\"shards\"".utf8)) == nil { continue }
            guard
                let index = try? ManifestCoding.decode(RepositoryIndex.self, from: bytes, document: "index copy")
            else { return }  // An unreadable copy: keep everything.
            for ref in (index.shards?.files ?? []) + (index.shards.map { [$0.catalog] } ?? []) {
                named.insert(ref.path)
            }
        }
        for bucket in buckets {
            let sub = dir.joined(bucket.name)
            guard let files = try? SystemCalls.listDirectory(sub) else { continue }
            for file in files where !named.contains("shards/\(bucket.name.string)/\(file.name.string)") {
                try? SystemCalls.unlink(sub.joined(file.name))
            }
            try? SystemCalls.rmdir(sub)
        }
    }

    func renameDurably(_ from: FilePath, _ to: FilePath, in dir: FilePath) throws(PublishError) {
        do { try SystemCalls.rename(from, to: to) } catch { throw .io(error) }
        try io { () throws(FileSystemError) in try AtomicFile.syncDirectory(dir) }
    }

    /// The publishers' lock of a repository (`.larder-publish.lock`): one pack, revoke or
    /// rotate-key at a time, so serials never collide and no staging directory in use is removed.
    func publishLock(_ layout: RepositoryLayout) throws(PublishError) -> FileLock {
        do { return try FileLock(path: layout.root.joined(".larder-publish.lock"), timeout: lockTimeout) } catch {
            switch error {
            case .locked(let pid, _): throw .busy(holderPID: pid)
            case .io(let e): throw .io(e)
            }
        }
    }

    /// How many publications' index copies `indexes/` keeps: a device needs the copy only while
    /// an edge still serves that publication's signature (minutes).
    package static let keptIndexCopies = 8

    /// Writes `indexes/<sha256>.json` durably, and removes the copies of all but the last
    /// `keptIndexCopies` publications (oldest modification first).
    func writeIndexCopy(_ bytes: Data, _ layout: RepositoryLayout) throws(PublishError) {
        let copy = layout.resolve(RepositoryLayout.indexCopyPath(SHA256Digest.of(bytes)))
        try io { () throws(FileSystemError) in
            try AtomicFile.makeDirectories(layout.indexes)
            try AtomicFile.write(bytes, to: copy)
        }
        guard let names = try? SystemCalls.listDirectory(layout.indexes) else { return }
        let copies = names.filter { $0.name.string.hasSuffix(".json") }.map { layout.indexes.joined($0.name) }
        guard copies.count > Self.keptIndexCopies else { return }
        let dated = copies.map { ($0, (try? SystemCalls.stat($0))?.modificationTime ?? FileTime(seconds: 0)) }
        for (path, _) in dated.sorted(by: { $0.1 > $1.1 }).dropFirst(Self.keptIndexCopies) where path != copy {
            try? SystemCalls.unlink(path)
        }
    }

    func removeStaleStaging(in dir: FilePath) {
        guard let entries = try? SystemCalls.listDirectory(dir) else { return }
        for entry in entries where entry.string.hasPrefix(".") && entry.string.contains(".staging-") {
            let path = dir.joined(entry.name)
            logger.notice("removing a staging directory left by an interrupted pack", metadata: ["path": "\(path)"])
            try? SystemCalls.removeTree(path)
        }
    }

    func encode<T: Encodable>(_ value: T) throws(PublishError) -> Data {
        do { return try ManifestCoding.encode(value) } catch {
            throw .manifest(.malformed(document: "\(T.self)", detail: "\(error)"))
        }
    }
}
