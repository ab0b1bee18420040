import ArgumentParser
import Larder
import Testing

@testable import larder

/// The options that parse into typed values (Sources/larder/ArgumentTypes.swift): the text each
/// accepts, and what a value that does not parse gets (exit 64, the option and value named, the
/// option's help line saying what it takes).
@Suite("Typed option values")
struct ArgumentTypesTests {
    @Test(
        "serve --listen takes a loopback HOST:PORT",
        arguments: [
            ("127.0.0.1:8080", "127.0.0.1", 8080), ("localhost:0", "localhost", 0), ("[::1]:9000", "::1", 9000),
            ("::1:65535", "::1", 65535),
        ])
    func listen(_ text: String, _ host: String, _ port: Int) throws {
        let address = try #require(ListenAddress(argument: text))
        #expect(address == ListenAddress(host: host, port: port))
        #expect(ListenAddress(argument: address.description) == address, "its description parses back")
    }

    @Test(
        "serve --listen refuses a host that is not loopback and a port out of range",
        arguments: [
            "0.0.0.0:8080", "example.com:80", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1", "127.0.0.1:x", "",
        ])
    func listenRefused(_ text: String) {
        #expect(ListenAddress(argument: text) == nil)
    }

    @Test("the defaults shown in --help are the values' own text")
    func defaults() {
        #expect(ListenAddress(host: "127.0.0.1", port: 8080).defaultValueDescription == "127.0.0.1:8080")
        #expect(SemanticVersion(1, 0, 0).defaultValueDescription == "1.0.0")
    }

    @Test("paths, ids and versions parse as the library reads them")
    func parsed() throws {
        let sync = try #require(
            try LarderCommand.parseAsRoot([
                "sync", "--root", "sb", "--package", "shared-ui", "--package", "app.v2", "--app-version", "3.2.0-rc.1",
                "--ca-file", "ca.pem",
            ]) as? LarderCommand.Sync)
        #expect(sync.args.root == "sb")
        #expect(sync.args.packages.map(\.rawValue) == ["shared-ui", "app.v2"])
        #expect(sync.args.appVersion == SemanticVersion("3.2.0-rc.1"))
        #expect(try sync.args.setup().http.caFiles == ["ca.pem"])
        #expect(sync.args.request.packages.map(\.rawValue) == ["shared-ui", "app.v2"])
        #expect(sync.args.request.appVersion == SemanticVersion("3.2.0-rc.1") && !sync.args.request.dryRun)
        let serve = try #require(try LarderCommand.parseAsRoot(["serve", "--root", "sb"]) as? LarderCommand.Serve)
        #expect(serve.listen == ListenAddress(host: "127.0.0.1", port: 8080))
    }

    @Test(
        "a value that does not parse is a usage error naming the option, the value and what it takes",
        arguments: [
            (["serve", "--root", "sb", "--listen", "0.0.0.0:8080"], ["--listen", "0.0.0.0:8080", "loopback"]),
            (["sync", "--root", "sb", "--app-version", "1.x"], ["--app-version", "1.x", "SemVer"]),
            (["plan", "--root", "sb", "--package", "Bad_ID"], ["--package", "Bad_ID", "[a-z0-9]"]),
            (
                ["init", "--root", "sb", "--repo", "file:///r/", "--public-key", "k.pub", "--app-version", "v1"],
                ["--app-version", "v1", "SemVer"]
            ),
            (
                ["pack", "dir", "--repo", "r", "--id", "a", "--version", "1.0.0", "--key", "k", "--policy", "bogus"],
                ["--policy", "bogus", "local-then-network"]
            ),
        ])
    func usage(_ arguments: [String], _ mentions: [String]) async {
        let r = await runInProcess(arguments)
        #expect(r.status == 64, "\(r)")
        for m in mentions { #expect(r.stderr.contains(m), "\(m): \(r)") }
        #expect(r.stdout.isEmpty, "\(r)")
    }
}
