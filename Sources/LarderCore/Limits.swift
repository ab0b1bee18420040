/// Bounds on a package's tree, enforced identically by `pack` (publisher), `verify` (CI) and the
/// archive reader (device), so that anything a publisher can pack a device can install.
package struct TreeLimits: Sendable, Equatable, Codable {
    /// Most files (regular entries) in one package.
    package var maxFiles: Int
    /// Most entries of any kind (files and directories) in one archive.
    package var maxEntries: Int
    /// Most bytes of all files together, uncompressed.
    package var maxTotalBytes: Int64
    /// Most bytes of one file, uncompressed.
    package var maxFileBytes: Int64
    /// Most bytes of a relative path (UTF-8).
    package var maxPathBytes: Int
    /// Most bytes of one path component (UTF-8).
    package var maxComponentBytes: Int
    /// Most components in a path.
    package var maxDepth: Int
    /// Highest ratio of uncompressed to compressed bytes of the whole archive, checked once the
    /// uncompressed total passes `ratioFloorBytes` (small files of zeros compress very well and
    /// are harmless).
    package var maxCompressionRatio: Int64
    /// Uncompressed bytes below which the compression ratio is not checked.
    package var ratioFloorBytes: Int64

    /// The documented defaults (see manifests/README.md, "Limits").
    package static let standard = TreeLimits(
        maxFiles: 50_000, maxEntries: 100_000, maxTotalBytes: 2 << 30, maxFileBytes: 512 << 20,
        maxPathBytes: 1024, maxComponentBytes: 255, maxDepth: 32,
        maxCompressionRatio: 200, ratioFloorBytes: 16 << 20)

    /// Creates limits.
    package init(
        maxFiles: Int, maxEntries: Int, maxTotalBytes: Int64, maxFileBytes: Int64, maxPathBytes: Int,
        maxComponentBytes: Int, maxDepth: Int, maxCompressionRatio: Int64, ratioFloorBytes: Int64
    ) {
        self.maxFiles = maxFiles
        self.maxEntries = maxEntries
        self.maxTotalBytes = maxTotalBytes
        self.maxFileBytes = maxFileBytes
        self.maxPathBytes = maxPathBytes
        self.maxComponentBytes = maxComponentBytes
        self.maxDepth = maxDepth
        self.maxCompressionRatio = maxCompressionRatio
        self.ratioFloorBytes = ratioFloorBytes
    }
}
