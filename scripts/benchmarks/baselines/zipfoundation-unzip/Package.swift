// swift-tools-version:5.9
// The ZIPFoundation baseline of `scripts/bench`: a small program that extracts a zip with
// ZIPFoundation's `FileManager.unzipItem(at:to:)`, built in release mode beside the project
// (never linked into Larder).
import PackageDescription

let package = Package(
    name: "zipfoundation-unzip",
    dependencies: [.package(url: "https://github.com/weichsel/ZIPFoundation", exact: "0.9.20")],
    targets: [
        .executableTarget(
            name: "zipfoundation-unzip",
            dependencies: [.product(name: "ZIPFoundation", package: "ZIPFoundation")])
    ]
)
