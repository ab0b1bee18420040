// swift-tools-version:6.2
import PackageDescription

// Dependency direction (see README "Layout"; scripts/check-layout enforces it):
//   LarderCore <- LarderFileSystem <- LarderArchive <- LarderPublish, LarderStore
//   LarderCore <- LarderFileSystem <- LarderFetch
//   LarderStore, LarderFetch, LarderArchive <- LarderSync
//   LarderStore <- LarderResolve <- LarderGateway, LarderWebKit
//   all of them but LarderGateway <- Larder (façade: OfflinePackages) <- larder (CLI, with LarderGateway)
// LarderFetch carries HTTP over AsyncHTTPClient (NIO) on Linux and URLSession on Apple platforms;
// LarderCore is pure values and decisions (no I/O). LarderArchive is the only module that
// imports C libraries (libarchive for zip, zlib for gzip objects); CLarderShim is one inline
// atomic load for LarderResolve. LarderGateway (the `serve` HTTP gateway) is the only module on
// Hummingbird, so an app that embeds the library does not link a server.
// The project's own Swift targets build with every warning an error (dependencies are not
// affected: SwiftPM applies a target's settings to that target only).
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

let package = Package(
    name: "Larder",
    platforms: [.macOS(.v13), .iOS(.v16)],
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
        // Linux's HTTP engine is AsyncHTTPClient (NIO); on Apple platforms URLSession is, and
        // NIO is not linked into an app that embeds the library.
        .target(
            name: "LarderFetch",
            dependencies: [
                "LarderCore", "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(platforms: [.linux])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(platforms: [.linux])),
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
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The WebKit path: the scheme-task driver and a web view's page health (platform-neutral,
        // tested on Linux) and the thin WebKit glue over them (compiled only where WebKit exists).
        .target(name: "LarderWebKit", dependencies: ["LarderCore", "LarderResolve"], swiftSettings: strict),
        .target(
            name: "Larder",
            dependencies: [
                "LarderCore", "LarderArchive", "LarderFileSystem", "LarderPublish", "LarderStore", "LarderFetch",
                "LarderSync", "LarderResolve", "LarderWebKit",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        // The resolve benchmark (scripts/bench-resolve); not a product.
        // The README's Linux quick start (scripts/integration/quickstart runs it).
        .executableTarget(name: "larder-quickstart", dependencies: ["Larder", "LarderGateway"], swiftSettings: strict),
        .executableTarget(
            name: "larder-bench-resolve",
            dependencies: ["LarderCore", "LarderFileSystem", "LarderResolve", "LarderStore"],
            swiftSettings: strict
        ),
        // The fuzz targets (scripts/fuzz): built with -sanitize=fuzzer for libFuzzer, or plain to
        // replay inputs (scripts/test replays the committed seeds); not a product.
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
                "LarderCore", "LarderFileSystem", "LarderPublish", "LarderResolve", "LarderSync",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "larder",
            dependencies: [
                "Larder", "LarderFileSystem", "LarderGateway",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // Test support, not a product: temporary-directory trait, sample repository, process
        // runner, binary locator, recording and failing transports.
        .target(
            name: "LarderTestSupport",
            dependencies: [
                "LarderCore", "LarderFetch", "LarderPublish", "LarderStore", "LarderFileSystem",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .testTarget(name: "LarderCoreTests", dependencies: ["LarderCore"], swiftSettings: strict),
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
            name: "LarderWebKitTests",
            dependencies: [
                "LarderTestSupport", "LarderWebKit", "LarderResolve", "LarderStore", "LarderCore", "LarderFileSystem",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "LarderCLITests",
            dependencies: [
                "LarderCore", "Larder", "larder", "LarderTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
    ]
)
