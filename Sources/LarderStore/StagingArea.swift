import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

/// A fresh directory under `staging/` for one version of one package, which nothing else
/// shares. Extracting into it touches nothing else of the sandbox, so it may run on any thread
/// while the writer goes on (sync extracts a bundle while it downloads); only
/// `Sandbox.install(staged:…)` makes the result part of the sandbox. An area left behind by a
/// crash is emptied by the next `Sandbox.open`.
package struct StagingArea: Sendable {
    /// The package whose version is staged.
    package let id: PackageID
    /// The version staged.
    package let version: SemanticVersion
    /// The directory (removed by `discard()`); the tree is extracted into its `tree/`.
    package let directory: FilePath
    let limits: TreeLimits
    /// The files the version's list names, when known (a memory hint for the read:
    /// `ZipReader.expected`).
    var expected: [FileEntry] = []
    /// How stored bundles and objects are decoded (the sandbox's `Options.pipeline`).
    package var pipeline: BytePipeline = .standard

    /// Where the version's tree is built: `<directory>/tree`.
    package var tree: FilePath { directory.joined("tree") }

    /// Extracts a bundle whose bytes are still arriving, as `ZipReader.read(streaming:…)` reads
    /// it, then makes the tree durable. Blocks while the source waits for bytes. Only for a
    /// pipeline whose bundles are stored as is (`BytePipeline.streamsBundles`).
    package func extract(streaming source: some ArchiveByteSource, size: Int64) throws(StoreError) -> StagedBundle {
        // Installing against a signed file list checks every SHA-256, which makes the CRC redundant.
        var reader = ZipReader(limits: limits)
        reader.checkCRC = false
        reader.expected = expected
        return try extract { (extractor: inout Extractor) throws(ArchiveError) in
            try reader.read(streaming: source, size: size, into: &extractor)
        }
    }

    /// Extracts a complete bundle file, inflating on several threads as `parallelism` allows
    /// (`ZipReader.parallelism`).
    package func extract(bundle: FilePath, checkCRC: Bool, parallelism: ReadParallelism = .automatic)
        throws(StoreError) -> StagedBundle
    {
        var reader = ZipReader(limits: limits)
        reader.checkCRC = checkCRC
        reader.parallelism = parallelism
        return try extract { (extractor: inout Extractor) throws(ArchiveError) in
            try pipeline.withZip(of: bundle, limit: limits.maxTotalBytes) { (zip) throws(ArchiveError) in
                try reader.read(zip, into: &extractor)
            }
        }
    }

    private func extract(_ read: (inout Extractor) throws(ArchiveError) -> ArchiveListing) throws(StoreError)
        -> StagedBundle
    {
        var extractor: Extractor
        do { extractor = try Extractor(root: tree) } catch { throw .io(error) }
        defer { extractor.close() }
        let listing: ArchiveListing
        do { listing = try read(&extractor) } catch { throw .archive(error) }
        // Durable before it can become visible; an error here abandons the staged version.
        do { try extractor.makeDurable() } catch { throw .io(error) }
        return StagedBundle(area: self, listing: listing)
    }

    /// Removes the directory and everything in it.
    package func discard() {
        try? SystemCalls.removeTree(directory)
    }
}

/// A bundle extracted into a staging area, durable, not yet checked against its file list.
package struct StagedBundle: Sendable {
    /// The area holding the extracted tree.
    package let area: StagingArea
    /// What the read found: every file with the size and SHA-256 computed while extracting.
    package let listing: ArchiveListing
}
