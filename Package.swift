// swift-tools-version:6.0
import PackageDescription

// Dependency direction (see README "Layout"):
//   LarderCore <- LarderFileSystem <- LarderArchive <- LarderPublish, LarderStore <- LarderSync
//     <- Larder (façade) <- larder (CLI)
// LarderCore is pure values and decisions (no I/O). LarderArchive is the only module that
// imports C (libarchive for zip, zlib for gzip objects).
let package = Package(
    name: "Larder",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "Larder", targets: ["Larder"]),
        .executable(name: "larder", targets: ["larder"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"]), .brew(["libarchive"])]
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
            ]
        ),
        .target(
            name: "LarderFileSystem",
            dependencies: [
                "LarderCore",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(
            name: "LarderArchive",
            dependencies: [
                "CArchive", "CZlib", "LarderCore", "LarderFileSystem",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(
            name: "LarderPublish",
            dependencies: [
                "LarderCore", "LarderArchive", "LarderFileSystem",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(
            name: "LarderStore",
            dependencies: [
                "LarderCore", "LarderFileSystem", "LarderArchive",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(
            name: "LarderSync",
            dependencies: [
                "LarderCore", "LarderFileSystem", "LarderArchive", "LarderStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(
            name: "Larder",
            dependencies: [
                "LarderCore", "LarderArchive", "LarderFileSystem", "LarderPublish", "LarderStore", "LarderSync",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .executableTarget(
            name: "larder",
            dependencies: [
                "Larder",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "LarderCoreTests", dependencies: ["LarderCore"]),
        .testTarget(name: "LarderArchiveTests", dependencies: ["LarderArchive", "LarderCore", "LarderFileSystem"]),
        .testTarget(
            name: "LarderPublishTests",
            dependencies: ["LarderPublish", "LarderArchive", "LarderCore", "LarderFileSystem", "Larder"]
        ),
        .testTarget(
            name: "LarderStoreTests",
            dependencies: ["LarderStore", "LarderArchive", "LarderCore", "LarderFileSystem", "LarderPublish"]
        ),
        .testTarget(
            name: "LarderSyncTests",
            dependencies: ["LarderSync", "LarderStore", "LarderPublish", "LarderArchive", "LarderCore", "LarderFileSystem"]
        ),
        .testTarget(name: "LarderCLITests", dependencies: ["LarderCore"]),
    ]
)
