// swift-tools-version:6.2
import PackageDescription

// Dependency direction (see README "Layout"; scripts/tools/check-layout.py enforces it):
//   LarderCore <- LarderFileSystem <- LarderArchive <- LarderPublish, LarderStore
//   LarderCore <- LarderFileSystem <- LarderFetch <- LarderFetchNIO, LarderFetchURLSession (engines)
//   LarderStore, LarderFetch, LarderArchive <- LarderSync
//   LarderStore <- LarderResolve <- LarderGateway, LarderWebView <- LarderWebKit (WebKit's glue)
//   all of them but LarderGateway <- Larder (façade: OfflinePackages) <- larder (CLI, with LarderGateway)
// LarderFetch carries HTTP over an injected engine: LarderFetchNIO (AsyncHTTPClient) on Linux,
// LarderFetchURLSession on Apple platforms, chosen in Sources/Larder/Platform.swift and injected
// into the sync (SyncSetup.engine), which depends on LarderFetch alone;
// LarderCore is pure values and decisions (no I/O). LarderArchive is the only module that
// imports C libraries (libarchive for zip, zlib for gzip objects); CLarderShim is one inline
// atomic load for LarderResolve. LarderGateway (the `serve` HTTP gateway) is the only module on
// Hummingbird, so an app that embeds the library does not link a server.
// The project's own Swift targets build with every warning an error (dependencies are not
// affected: SwiftPM applies a target's settings to that target only).
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]
// The HTTP engine is URLSession on Apple platforms and AsyncHTTPClient on Linux
// (Sources/Larder/Platform.swift); LARDER_URLSESSION=1 in the environment builds URLSession on
// Linux too, for a side-by-side measurement (scripts/bench --net).
let urlSessionEverywhere = Context.environment["LARDER_URLSESSION"] != nil
// WebKitGTK's glue (LarderWebKitGTK) and the program that opens a package in it (larder-webview)
// are built only on request, LARDER_WEBKITGTK=1 in the environment (scripts/webview and
// scripts/test set it), so the package builds and tests without WebKitGTK installed.
let webKitGTK = Context.environment["LARDER_WEBKITGTK"] != nil
let apple: [Platform] = [.macOS, .iOS, .tvOS, .watchOS, .visionOS, .macCatalyst]

var package = Package(
    name: "Larder",
    // Synchronization.Mutex, the one lock idiom, sets the floor on every Apple platform (docs/platforms.md).
    platforms: [.macOS(.v15), .iOS(.v18), .macCatalyst(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "Larder", targets: ["Larder"]),
        .library(name: "LarderWebKit", targets: ["LarderWebKit"]),
        .executable(name: "larder", targets: ["larder"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.100.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.30.0"),
        // The telemetry collector's stores (`larder collect`): SQLite embedded, PostgreSQL for fleets.
        .package(url: "https://github.com/vapor/sqlite-nio", from: "1.13.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // The collector's HTML report page (`larder report --html`, `/report`).
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
        // `swift package generate-documentation` (the DocC catalog in Sources/Larder/Larder.docc).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"]), .brew(["libarchive"])]
        ),
        // libzstd's patch-from mode makes and applies the binary patches of deltas.
        .systemLibrary(
            name: "CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"]), .brew(["zstd"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .target(
            name: "LarderCore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderFileSystem",
            dependencies: [
                "LarderCore",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderArchive",
            dependencies: [
                "CArchive", "CZlib", "CZstd", "LarderCore", "LarderFileSystem",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderPublish",
            dependencies: [
                "LarderCore", "LarderArchive", "LarderFileSystem",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderStore",
            dependencies: [
                "LarderCore", "LarderFileSystem", "LarderArchive",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        // Transfers with resume, retries and verification over an injected engine (HTTPStack);
        // each engine is a target of its own, chosen in one place (Sources/Larder/Platform.swift).
        .target(
            name: "LarderFetch",
            dependencies: [
                "LarderCore", "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        // Linux's HTTP engine: AsyncHTTPClient (NIO).
        .target(
            name: "LarderFetchNIO",
            dependencies: [
                "LarderCore", "LarderFetch", "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        // Apple platforms' HTTP engine: URLSession (compiled on Linux too, where FoundationNetworking
        // has it, but linked there only with LARDER_URLSESSION=1).
        .target(
            name: "LarderFetchURLSession",
            dependencies: [
                "LarderCore", "LarderFetch", "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderSync",
            dependencies: [
                "LarderCore", "LarderFileSystem", "LarderArchive", "LarderStore", "LarderFetch",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(name: "CLarderShim"),
        .target(
            name: "LarderResolve",
            dependencies: [
                "CLarderShim", "LarderCore", "LarderFileSystem", "LarderStore",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderGateway",
            dependencies: [
                "LarderCore", "LarderResolve",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The telemetry collector (`larder collect`, `larder report`): batches over Hummingbird into
        // SQLite (sqlite-nio) or PostgreSQL (postgres-nio). Linked by the CLI only, like the gateway,
        // so an app that embeds the library links no server and no database.
        .target(
            name: "LarderCollect",
            dependencies: [
                "LarderCore", "LarderArchive",
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: strict
        ),
        // The web-view path, platform-neutral (tested on Linux): the scheme-task driver and a web
        // view's page health. Each web-view engine's glue is a thin target over it: WebKit's is
        // LarderWebKit (compiled only where WebKit exists).
        .target(
            name: "LarderWebView",
            dependencies: [
                "LarderCore", "LarderFileSystem", "LarderResolve",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "LarderWebKit",
            dependencies: ["LarderResolve", "LarderWebView", .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict
        ),
        .target(
            name: "Larder",
            dependencies: [
                "LarderCore", "LarderArchive", "LarderFileSystem", "LarderPublish", "LarderStore", "LarderFetch",
                "LarderSync", "LarderResolve", "LarderWebView",
                // The HTTP engine the façade injects (Sources/Larder/Platform.swift).
                .target(name: "LarderFetchNIO", condition: .when(platforms: [.linux])),
                .target(name: "LarderFetchURLSession", condition: urlSessionEverywhere ? nil : .when(platforms: apple)),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            // Apple's privacy manifest: required-reason APIs and what telemetry can send (docs/privacy.md).
            resources: [.copy("PrivacyInfo.xcprivacy")],
            swiftSettings: strict + (urlSessionEverywhere ? [.define("LARDER_URLSESSION")] : [])
        ),
        // The resolve benchmark (scripts/benchmarks/bench-resolve.sh); not a product.
        // The README's Linux quick start (scripts/integration/quickstart.sh runs it).
        .executableTarget(name: "larder-quickstart", dependencies: ["Larder", "LarderGateway"], swiftSettings: strict),
        .executableTarget(
            name: "larder-bench-resolve",
            dependencies: ["LarderCore", "LarderFileSystem", "LarderResolve", "LarderStore"],
            swiftSettings: strict
        ),
        // The fuzz targets (scripts/tools/fuzz.sh): built with -sanitize=fuzzer for libFuzzer, or plain to
        // replay inputs (scripts/test replays the committed seeds); not a product.
        .executableTarget(
            name: "larder-bench-nio",
            dependencies: [
                "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "larder-fuzz",
            dependencies: [
                "LarderArchive", "LarderCore", "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        // The publisher side of the scale benchmark (scripts/bench --scale); not a product.
        .executableTarget(
            name: "larder-bench-scale",
            dependencies: [
                "LarderCore", "LarderFileSystem", "LarderPublish", "LarderResolve", "LarderStore", "LarderSync",
                "LarderFetchNIO",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "larder",
            dependencies: [
                "Larder", "LarderCollect", "LarderFetch", "LarderFileSystem", "LarderGateway", "LarderPublish",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The fault origin of LarderTestSupport as a process, for scripts/integration/faults.py; not a product.
        .executableTarget(name: "larder-fault-origin", dependencies: ["LarderTestSupport"], swiftSettings: strict),
        // Test support, not a product: temporary-directory trait, sample repository, process
        // runner, binary locator, recording and failing transports, and the fault-injecting HTTP
        // origin (on NIO, with NIOSSL for its TLS mode) that the transport and gateway suites start.
        .target(
            name: "LarderTestSupport",
            dependencies: [
                "LarderArchive", "LarderCore", "LarderFetch", "LarderPublish", "LarderStore", "LarderFileSystem",
                // The engine the suites sync over (HTTPStack.tested): either, by LARDER_TEST_ENGINE.
                "LarderFetchNIO", "LarderFetchURLSession",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderCoreTests",
            dependencies: ["LarderCore", .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderFileSystemTests",
            dependencies: [
                "LarderFileSystem", "LarderTestSupport", .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderArchiveTests",
            dependencies: ["LarderArchive", "LarderCore", "LarderFileSystem", "LarderTestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderPublishTests",
            dependencies: [
                "LarderTestSupport", "LarderPublish", "LarderArchive", "LarderCore", "LarderFileSystem", "Larder",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderStoreTests",
            dependencies: [
                "LarderTestSupport", "LarderStore", "LarderArchive", "LarderCore", "LarderFileSystem", "LarderPublish",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderFetchTests",
            dependencies: [
                // Both HTTP engines: one shared suite, run once with each (LARDER_TEST_ENGINE).
                "LarderTestSupport", "LarderFetch", "LarderFetchNIO", "LarderFetchURLSession", "LarderCore",
                "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderSyncTests",
            dependencies: [
                "LarderTestSupport",
                "LarderSync", "LarderFetch", "LarderStore", "LarderPublish", "LarderArchive", "LarderCore",
                "LarderFileSystem", "LarderResolve",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderResolveTests",
            dependencies: [
                "LarderTestSupport", "LarderResolve", "LarderStore", "LarderPublish", "LarderCore", "LarderFileSystem",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderGatewayTests",
            dependencies: [
                "LarderTestSupport", "LarderGateway", "LarderResolve", "LarderStore", "LarderFetch", "LarderFetchNIO",
                "LarderCore", "LarderSync", "LarderPublish",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderWebViewTests",
            dependencies: [
                "LarderTestSupport", "LarderWebView", "LarderResolve", "LarderStore", "LarderCore", "LarderFileSystem",
            ],
            swiftSettings: strict
        ),
        // The façade through its public API (what `import Larder` gives an app).
        .testTarget(name: "LarderTests", dependencies: ["Larder", "LarderTestSupport"], swiftSettings: strict),
        .testTarget(
            name: "LarderCLITests",
            dependencies: [
                "LarderCore", "LarderPublish", "Larder", "larder", "LarderTestSupport", "LarderCollect",
                "LarderArchive",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
    ]
)

if webKitGTK {
    package.products.append(.library(name: "LarderWebKitGTK", targets: ["LarderWebKitGTK"]))
    package.targets += [
        // WebKitGTK 6.0 (GTK 4), imported by LarderWebKitGTK only.
        .systemLibrary(
            name: "CWebKitGTK",
            pkgConfig: "webkitgtk-6.0",
            providers: [.apt(["libwebkitgtk-6.0-dev"])]
        ),
        // WebKitGTK's glue over LarderWebView: the custom scheme, page health over the script
        // message handler, recovery from a dead web process, the cookie bridge.
        .target(
            name: "LarderWebKitGTK",
            dependencies: ["CWebKitGTK", "Larder", "LarderFileSystem"],
            swiftSettings: strict
        ),
        // scripts/webview: opens a URL of a sandbox in a WebKitGTK view; not a product.
        .executableTarget(
            name: "larder-webview",
            dependencies: [
                "LarderWebKitGTK", "Larder", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
    ]
}
