import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Receives the contents of an archive as the hardened reader validates it.
///
/// For each regular file: `beginFile`, any number of `write` calls with consecutive chunks, then
/// `endFile` with the size the reader counted (its SHA-256 is in the listing `read` returns —
/// hashing may run on another thread). Any error thrown stops the read; the reader reports it as
/// `ArchiveError.sink`. Its metatype is `Sendable`: the pipeline calls it on a worker thread.
package protocol ArchiveConsumer: SendableMetatype {
    /// A directory entry (already validated).
    mutating func directory(_ path: RelativePath) throws
    /// A regular file starts; `declaredSize` is the header's size when the archive states one.
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws
    /// The next chunk of the current file.
    mutating func write(_ chunk: UnsafeRawBufferPointer) throws
    /// The current file is complete and its size matches its header.
    mutating func endFile(_ path: RelativePath, size: Int64) throws
}

extension ArchiveConsumer {
    /// Ignores the directory (default for consumers that only want files).
    package mutating func directory(_ path: RelativePath) throws {}
    /// Ignores the start of a file (default).
    package mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws {}
    /// Ignores the chunk (default).
    package mutating func write(_ chunk: UnsafeRawBufferPointer) throws {}
    /// Ignores the end of a file (default).
    package mutating func endFile(_ path: RelativePath, size: Int64) throws {}
}

/// A consumer that keeps nothing: reading with it validates the archive and lists its files.
package struct ValidatingConsumer: ArchiveConsumer, Sendable {
    /// Creates one.
    package init() {}
}

/// What a successful read found.
package struct ArchiveListing: Sendable, Equatable {
    /// Every regular file, sorted by path, with the size and SHA-256 computed while reading.
    package var files: [FileEntry]
    /// Every explicit directory entry.
    package var directories: [RelativePath]
}
