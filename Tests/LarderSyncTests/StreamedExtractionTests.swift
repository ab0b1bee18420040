import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@testable import LarderFetch
@testable import LarderSync

/// A transport over a file:// repository that delivers a bundle in steps the test controls, to
/// observe extraction while the download is still under way. Documents come from the real
/// `FileTransport`.
final class PacedTransport: Transport, @unchecked Sendable {
    // @unchecked: the flags are written by the one download running at a time and read by the
    // test after the sync returns.
    enum Script {
        /// The first half, then wait for extracted files to appear, then the rest.
        case waitForExtraction
        /// The first half, then (once extracted files appear) start over, as after a server
        /// ignoring Range, then everything.
        case restartHalfway
        /// The first half, then a connection error.
        case failHalfway
    }

    let script: Script
    let staging: FilePath
    var sawExtractionMidway = false
    var resumedFrom: Int64 = -1

    init(_ script: Script, staging: FilePath) {
        self.script = script
        self.staging = staging
    }

    func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument {
        try await FileTransport().document(url, etag: etag, maxBytes: maxBytes)
    }

    func download(
        _ url: URL, to part: FilePath, expecting: LarderFetch.Expectation, progress: ProgressHandler?,
        watch: GrowingPart?
    ) async throws(FetchError) {
        guard url.path.hasSuffix(".zip") else {
            return try await FileTransport().download(
                url, to: part, expecting: expecting, progress: progress, watch: watch)
        }
        let data: Data
        do { data = try Data(contentsOf: url) } catch { throw .io("\(error)") }
        var file = try PartFile(part, url: url.absoluteString, expecting: expecting, watch: watch)
        defer { file.close() }
        resumedFrom = file.have
        let half = data.count / 2
        func send(_ range: Range<Int>) throws(FetchError) {
            var at = range.lowerBound
            while at < range.upperBound {
                let end = min(at + 16_384, range.upperBound)
                try file.append(data.subdata(in: at..<end))
                at = end
            }
        }
        if file.have < half { try send(Int(file.have)..<half) }
        switch script {
        case .waitForExtraction:
            // A bound, not a timing: the extraction normally starts within milliseconds, but under
            // ThreadSanitizer on a loaded machine it once took longer than 20 s.
            let deadline = Date().addingTimeInterval(300)
            while Date() < deadline, !extractedFileExists() { try? await Task.sleep(nanoseconds: 10_000_000) }
            sawExtractionMidway = extractedFileExists()
            try send(Int(file.have)..<data.count)
        case .restartHalfway:
            // Once the extraction has read from the file, a restart cannot be followed.
            let deadline = Date().addingTimeInterval(300)
            while Date() < deadline, !extractedFileExists() { try? await Task.sleep(nanoseconds: 10_000_000) }
            sawExtractionMidway = extractedFileExists()
            file.reset()
            try send(0..<data.count)
        case .failHalfway:
            throw .connection(url: url.absoluteString, detail: "connection reset (injected)")
        }
        try file.finish()
    }

    /// Whether a regular file exists under some `staging/*/tree/`.
    func extractedFileExists() -> Bool {
        let fm = FileManager.default
        for area in (try? fm.contentsOfDirectory(atPath: staging.string)) ?? [] {
            let tree = staging.appending(area).appending("tree").string
            guard let walk = fm.enumerator(atPath: tree) else { continue }
            for case let name as String in walk {
                var isDir: ObjCBool = false
                if fm.fileExists(atPath: tree + "/" + name, isDirectory: &isDir), !isDir.boolValue { return true }
            }
        }
        return false
    }
}

/// A transport that downloads through `FileTransport` and never tells the watch anything.
struct SilentTransport: Transport {
    func document(_ url: URL, etag: String?, maxBytes: Int) async throws(FetchError) -> FetchedDocument {
        try await FileTransport().document(url, etag: etag, maxBytes: maxBytes)
    }

    func download(
        _ url: URL, to part: FilePath, expecting: LarderFetch.Expectation, progress: ProgressHandler?,
        watch: GrowingPart?
    ) async throws(FetchError) {
        try await FileTransport().download(url, to: part, expecting: expecting, progress: progress, watch: nil)
    }
}

@Suite("Bundles extracted while they download")
struct StreamedExtractionTests {
    /// The sample app plus 4 MiB of incompressible files, so that the extraction's batches
    /// (1 MiB) reach the disk while the second half of the bundle has not arrived.
    func publishLarge(_ env: SyncEnv, _ version: String) throws {
        let src = try env.repository.source("sample-app", version)
        let big = src.appendingPathComponent("media")
        try FileManager.default.createDirectory(at: big, withIntermediateDirectories: true)
        var rng = SystemRandomNumberGenerator()
        for i in 0..<8 {
            let bytes = (0..<(512 << 10)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            try Data(bytes).write(to: big.appendingPathComponent("clip-\(i).bin"))
        }
        try env.publish(version)
    }

    func sync(_ env: SyncEnv, _ transport: any Transport) async throws(SyncError) -> SyncReport {
        var o = SyncSetup(engine: .tested)
        let now = env.clock
        o.clock = { now }
        return try await Syncer(root: env.root, setup: o, transport: transport).sync()
    }

    func stagingIsEmpty(_ env: SyncEnv) -> Bool {
        ((try? FileManager.default.contentsOfDirectory(atPath: env.root.appending("staging").string)) ?? []).isEmpty
    }

    @Test func filesAreWrittenBeforeTheDownloadEnds() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publishLarge(env, "1.0.0")
        try env.initialise()
        let transport = PacedTransport(.waitForExtraction, staging: env.root.appending("staging"))
        let report = try await sync(env, transport)
        let r = try #require(report.packages.first)
        #expect(r.outcome == .done && r.method == .bundle, "\(r)")
        #expect(transport.sawExtractionMidway, "no extracted file appeared while half the bundle was still to come")
        #expect(r.streamed == true)
        #expect(try env.active() == "1.0.0")
        let installed = env.root.appending("packages/sample-app/1.0.0/media/clip-7.bin").string
        #expect(try FileManager.default.attributesOfItem(atPath: installed)[.size] as? Int == 512 << 10)
        #expect(stagingIsEmpty(env))
    }

    /// The download starts over after the extraction has read from it: the stream is abandoned
    /// and the complete file is extracted instead.
    @Test func aRestartFallsBackToTheCompleteFile() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publishLarge(env, "1.0.0")
        try env.initialise()
        let transport = PacedTransport(.restartHalfway, staging: env.root.appending("staging"))
        let report = try await sync(env, transport)
        let r = try #require(report.packages.first)
        #expect(transport.sawExtractionMidway)
        #expect(r.outcome == .done, "\(r)")
        #expect(r.streamed == false)
        #expect(try env.active() == "1.0.0")
        #expect(stagingIsEmpty(env))
    }

    /// A download cut half-way: the package fails, nothing is staged or activated, the part is
    /// kept, and the next sync resumes it — extracting the bytes already on disk first.
    @Test func aCutDownloadResumesAndStreams() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try publishLarge(env, "1.0.0")
        try env.initialise()
        let staging = env.root.appending("staging")
        let cut = try await sync(env, PacedTransport(.failHalfway, staging: staging))
        let r = try #require(cut.packages.first)
        #expect(r.outcome == .failed && r.code == "connection", "\(r)")
        #expect(try env.active() == nil)
        #expect(stagingIsEmpty(env))
        let resumed = PacedTransport(.waitForExtraction, staging: staging)
        let again = try await sync(env, resumed)
        let r2 = try #require(again.packages.first)
        #expect(r2.outcome == .done && r2.streamed == true, "\(r2)")
        #expect(resumed.resumedFrom > 0, "the second sync did not resume the part file")
        #expect(try env.active() == "1.0.0")
    }

    /// A transport that ignores the watch does not leave the extraction waiting: the complete
    /// file is read after the download.
    @Test func aTransportIgnoringTheWatchStillInstalls() async throws {
        let env = try SyncEnv()
        defer { env.cleanup() }
        try env.publish("1.0.0")
        try env.initialise()
        let report = try await sync(env, SilentTransport())
        let r = try #require(report.packages.first)
        #expect(r.outcome == .done && r.method == .bundle, "\(r)")
        #expect(r.streamed == false)
        #expect(try env.active() == "1.0.0")
        #expect(stagingIsEmpty(env))
    }
}
