import Foundation
import LarderCore
import LarderStore
import LarderTestSupport
import SystemPackage
import Testing

@Suite("Store: SandboxReader")
struct ReaderTests {
    @Test("a reader reads the state without the lock while a writer holds it")
    func readsWhileWriterOpen() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let reader = env.reader
        #expect(try reader.state() == SandboxState())  // nothing yet

        let sandbox = try env.open()
        defer { sandbox.close() }
        try env.install(sandbox, "1.0.0")
        // The writer still holds the lock: another writer is refused, a reader is not.
        expectStoreError("locked") { _ = try env.open() }
        let start = Date()
        let state = try reader.state()
        #expect(Date().timeIntervalSince(start) < 2, "the reader waited for the lock")
        #expect(try ManifestCoding.encode(state, compact: true) == (try env.stateBytes()))
        #expect(state.generation == sandbox.state.generation)
        #expect(state[pid(sampleID)].active == ver("1.0.0"))
        #expect(try reader.status().packages.map(\.active) == ["1.0.0"])

        // It sees each new state as soon as it is written.
        try env.install(sandbox, "1.1.0")
        #expect(try reader.state()[pid(sampleID)].active == ver("1.1.0"))
        _ = try sandbox.confirm(id: try packageID(sampleID))
        #expect(try reader.state()[pid(sampleID)].health == .confirmed)
        #expect(try reader.state().generation == sandbox.state.generation)

        // And may pin while the writer works.
        let lease = try reader.pin(id: try packageID(sampleID))
        #expect(lease.version == ver("1.1.0"))
        lease.release()
    }

    @Test("pin refuses unknown packages and bad ids")
    func pinRefusals() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        let reader = env.reader
        expectStoreError("unknown-package") { _ = try reader.pin(id: try packageID(sampleID)) }
        try env.withSandbox { try env.install($0, "1.0.0") }
        expectStoreError("unknown-package") { _ = try reader.pin(id: try packageID("ghost")) }
        #expect(PackageID("Not An ID") == nil)  // text is read at the edge (the CLI: bad-id)
        #expect(names(env.layout.pins).allSatisfy { $0 == sampleID })
        #expect(!env.fileExists(env.layout.pins.appending("ghost")))
        let lease = try reader.pin(id: try packageID(sampleID))
        #expect(lease.version == ver("1.0.0"))
        lease.release()
    }

    @Test("a lease is released when it is deallocated")
    func leaseDeinit() throws {
        let env = try StoreEnv()
        defer { env.cleanup() }
        try env.withSandbox { try env.installConfirmed($0, ["1.0.0"]) }
        let dir = env.layout.pinDirectory(pid(sampleID), ver("1.0.0"))
        do {
            let lease = try env.reader.pin(id: try packageID(sampleID))
            #expect(names(dir).count == 1)
            withExtendedLifetime(lease) {}
        }
        #expect(names(dir) == [])
    }
}
