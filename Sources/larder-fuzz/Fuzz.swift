import Foundation
import LarderArchive
import LarderCore
import LarderFileSystem
import SystemPackage

// The fuzz targets (scripts/tools/fuzz.sh). Built with `-sanitize=fuzzer,address -DLARDER_FUZZ`, libFuzzer
// calls `LLVMFuzzerTestOneInput` with each input, and `LARDER_FUZZ_TARGET` picks the target. In a
// normal build the same targets run over files given on the command line (`larder-fuzz TARGET
// FILE...`): scripts/test replays the committed seeds and any crash found this way.
//
// Each target feeds untrusted bytes to one parser and checks only that it answers (returns or
// throws) — crashes, traps, hangs and memory errors are what the fuzzer looks for — plus a few
// properties that must hold whatever the input.

enum Target: String, CaseIterable {
    /// The index decoder and rules, the signature file decoder and the signature check.
    case index
    /// The zip structure check and the strict reader.
    case zip
    /// The URL reader (`BrowserURL`), route parsing and the route table's resolve.
    case url
    /// The Range and If-None-Match handling of the resource loader.
    case range
}

/// A value the targets' fixed setup cannot lack.
func must<T>(_ value: T?, _ what: String) -> T {
    guard let value else { fatalError("larder-fuzz: bad fixed \(what)") }
    return value
}

/// The table `url` resolves against: two packages, one on an internationalised host.
let routeTable: RouteTable = {
    func list(_ id: String, _ paths: [String]) -> FileList {
        FileList(
            id: must(PackageID(id), "id"), version: must(SemanticVersion("1.0.0"), "version"),
            files: paths.map {
                FileEntry(path: must(RelativePath($0), "path"), size: 1, sha256: SHA256Digest.of(Data($0.utf8)))
            })
    }
    return RouteTable(
        packages: [
            RoutedPackage(
                list: list("app", ["index.html", "css/app.css", "a/b/c.js"]),
                routes: [must(RoutePrefix("https://app.example.com/"), "route")], entry: "index.html",
                spaFallback: true,
                policy: Policy(mode: .localThenNetwork, bypass: ["/api/"])),
            RoutedPackage(
                list: list("shop", ["index.html"]),
                routes: [must(RoutePrefix("https://b\u{FC}cher.example/shop/"), "route")],
                entry: "index.html", spaFallback: false, policy: Policy(mode: .localOnly)),
        ], schemes: ["myapp"])
}()

let trusted = PrivateKey().publicKey
let scratch = FilePath(ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp").joined(
    "larder-fuzz-\(ProcessInfo.processInfo.processIdentifier).zip")

func run(_ target: Target, _ data: Data) {
    switch target {
    case .index:
        _ = try? ManifestCoding.decode(RepositoryIndex.self, from: data, document: "index.json").validatedRules()
        if let sig = try? ManifestCoding.decode(SignatureFile.self, from: data, document: "index.json.sig") {
            _ = try? IndexSignature.verify(data, signatures: sig, trusted: [trusted])
            _ = sig.index?.names(data)
        }
        _ = try? ManifestCoding.decode(FileList.self, from: data, document: "files.json")
    case .zip:
        guard (try? SystemCalls.writeFile(data, to: scratch)) != nil else { return }
        _ = try? ZipReader(limits: .standard).validate(scratch)
    case .url:
        let text = String(decoding: data, as: UTF8.self)
        let canonical = BrowserURL.canonical(text)
        // Reading a URL as a browser would is idempotent.
        if let c = canonical, let again = BrowserURL.canonical(c), again != c, !c.contains("%") {
            fatalError("BrowserURL is not idempotent: \(quoted(text)) → \(quoted(c)) → \(quoted(again))")
        }
        _ = routeTable.resolve(text)
        _ = RoutePrefix(text)
    case .range:
        let text = String(decoding: data, as: UTF8.self)
        let file = LocalFile(
            package: must(PackageID("app"), "id"), version: must(SemanticVersion("1.0.0"), "version"),
            path: must(RelativePath("a.js"), "path"),
            mime: "text/javascript", length: Int64(data.count) * 37, etag: "\"abc\"")
        let plan = ResponsePlanner.plan(method: .get, range: text, ifNoneMatch: text, file: file)
        // A body range never leaves the file.
        if plan.body.lowerBound < 0 || plan.body.upperBound > file.length || plan.body.lowerBound > plan.body.upperBound
        {
            fatalError("range \(quoted(text)) gave \(plan.body) for a file of \(file.length) bytes")
        }
    }
}

extension RepositoryIndex {
    /// The index rules' findings (the decoder's caller runs them next).
    func validatedRules() -> [IndexIssue] { IndexRules.issues(self) }
}

#if LARDER_FUZZ
    let selected: Target = {
        let name = ProcessInfo.processInfo.environment["LARDER_FUZZ_TARGET"] ?? ""
        guard let t = Target(rawValue: name) else {
            fatalError("set LARDER_FUZZ_TARGET to one of: \(Target.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return t
    }()

    /// libFuzzer's driver (compiler-rt), run from the entry point SwiftPM links as `main`.
    @_silgen_name("LLVMFuzzerRunDriver")
    func runDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
    ) -> CInt

    /// The executable's entry point in a fuzzing build (SwiftPM names it `<module>_main`): hands
    /// the command line to libFuzzer.
    @_cdecl("larder_fuzz_main")
    public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        var count = argc
        var vector = argv
        return runDriver(&count, &vector) { bytes, size in fuzzOne(bytes, size) }
    }

    /// libFuzzer's entry point: one input for the selected target.
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzOne(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> CInt {
        run(selected, Data(bytes: bytes, count: size))
        return 0
    }
#else
    @main
    enum Replay {
        static func main() {
            let args = CommandLine.arguments.dropFirst()
            guard let name = args.first, let target = Target(rawValue: name) else {
                print(
                    "usage: larder-fuzz TARGET FILE...  (TARGET: \(Target.allCases.map(\.rawValue).joined(separator: ", ")))"
                )
                exit(64)
            }
            var count = 0
            for path in args.dropFirst() {
                guard let data = try? AtomicFile.read(FilePath(path)) else {
                    print("larder-fuzz: cannot read \(path)")
                    exit(1)
                }
                run(target, data)
                count += 1
            }
            print("larder-fuzz: \(target.rawValue): \(count) input(s) replayed, no crash")
        }
    }
#endif
