import CArchive
import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Where the read loop sends entries: straight to the consumer (hashing inline), or through a
/// pipeline to a worker thread.
protocol EntrySink {
    mutating func directory(_ path: RelativePath) throws(ArchiveError)
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError)
    mutating func write(_ chunk: UnsafeRawBufferPointer, of path: RelativePath) throws(ArchiveError)
    mutating func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError)
}

struct DirectSink<C: ArchiveConsumer>: EntrySink {
    var consumer: C
    var hasher = SHA256Stream()
    var digests: [SHA256Digest] = []

    init(consumer: C) { self.consumer = consumer }

    mutating func directory(_ path: RelativePath) throws(ArchiveError) {
        do { try consumer.directory(path) } catch { throw .sink(entry: path.string, detail: "\(error)") }
    }
    mutating func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError) {
        do { try consumer.beginFile(path, declaredSize: declaredSize) } catch {
            throw .sink(entry: path.string, detail: "\(error)")
        }
    }
    mutating func write(_ chunk: UnsafeRawBufferPointer, of path: RelativePath) throws(ArchiveError) {
        hasher.update(chunk)
        do { try consumer.write(chunk) } catch { throw .sink(entry: path.string, detail: "\(error)") }
    }
    mutating func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError) {
        digests.append(hasher.finish())
        hasher = SHA256Stream()
        do { try consumer.endFile(path, size: size) } catch { throw .sink(entry: path.string, detail: "\(error)") }
    }
}

struct PipelineSink<C: ArchiveConsumer>: EntrySink {
    let pipeline: ConsumerPipeline<C>
    init(_ pipeline: ConsumerPipeline<C>) { self.pipeline = pipeline }

    func directory(_ path: RelativePath) throws(ArchiveError) { try pipeline.directory(path) }
    func beginFile(_ path: RelativePath, declaredSize: Int64?) throws(ArchiveError) {
        try pipeline.beginFile(path, declaredSize: declaredSize)
    }
    func write(_ chunk: UnsafeRawBufferPointer, of path: RelativePath) throws(ArchiveError) {
        try pipeline.append(chunk)
    }
    func endFile(_ path: RelativePath, size: Int64) throws(ArchiveError) { try pipeline.endFile(path, size: size) }
}
