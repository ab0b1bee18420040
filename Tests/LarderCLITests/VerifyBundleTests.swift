import Foundation
import LarderCore
import LarderTestSupport
import Testing

/// A small site: nested directories, relative links in HTML and CSS, a binary file.
func makeSmallSite(_ root: URL) throws {
    try writeText(
        """
        <!doctype html>
        <html><head><link rel="stylesheet" href="css/site.css"><script src="js/app.js"></script></head>
        <body><img src="img/dot.png"><a href="pages/">pages</a><a href="https://example.com/">out</a></body></html>

        """, to: root.appendingPathComponent("index.html"))
    try writeText("body { background: url(../img/dot.png); }\n", to: root.appendingPathComponent("css/site.css"))
    try writeText("console.log('hi');\n", to: root.appendingPathComponent("js/app.js"))
    try writeText(
        "<!doctype html><a href=\"../index.html\">home</a>\n", to: root.appendingPathComponent("pages/index.html"))
    let png = root.appendingPathComponent("img/dot.png")
    try FileManager.default.createDirectory(at: png.deletingLastPathComponent(), withIntermediateDirectories: true)
    try Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0]).write(to: png)
}

/// How a third-party tool zips `dir` into `zip`.
struct ZipTool: Sendable, CustomTestStringConvertible {
    var name: String
    var make: @Sendable (_ dir: URL, _ zip: URL) throws -> Void
    var testDescription: String { name }
}

private let pythonZipScript = """
    import os, sys, zipfile
    root, out, method = sys.argv[1], sys.argv[2], getattr(zipfile, sys.argv[3])
    with zipfile.ZipFile(out, 'w', method) as z:
        for d, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for f in sorted(files):
                full = os.path.join(d, f)
                z.write(full, os.path.relpath(full, root))
    """

let zipTools: [ZipTool] = [
    ZipTool(name: "Info-ZIP zip -r") { dir, zip in try tool("zip", ["-q", "-r", zip.path, "."], cwd: dir) },
    ZipTool(name: "Info-ZIP zip -r -D (no directory entries)") { dir, zip in
        try tool("zip", ["-q", "-r", "-D", zip.path, "."], cwd: dir)
    },
    ZipTool(name: "Python zipfile ZIP_DEFLATED") { dir, zip in
        try python(pythonZipScript, [dir.path, zip.path, "ZIP_DEFLATED"])
    },
    ZipTool(name: "Python zipfile ZIP_STORED") { dir, zip in
        try python(pythonZipScript, [dir.path, zip.path, "ZIP_STORED"])
    },
    ZipTool(name: "bsdtar --format zip (./ prefix)") { dir, zip in
        try tool("bsdtar", ["--format", "zip", "-cf", zip.path, "-C", dir.path, "."])
    },
]

/// A hostile single bundle and what verify must say about it.
struct HostileZip: Sendable, CustomTestStringConvertible {
    var name: String
    var entries: [(String, String)]
    var code: String
    var mentions: [String]
    var testDescription: String { name }
}

let hostileZips: [HostileZip] = [
    HostileZip(
        name: "../x", entries: [("index.html", "<p>hi</p>"), ("../x", "x")], code: "path-dot-component",
        mentions: ["\"../x\""]),
    HostileZip(
        name: "a/../../x", entries: [("index.html", "<p>hi</p>"), ("a/../../x", "x")], code: "path-dot-component",
        mentions: ["a/../../x"]),
    HostileZip(
        name: "/etc/x", entries: [("index.html", "<p>hi</p>"), ("/etc/x", "x")], code: "path-absolute",
        mentions: ["/etc/x"]),
    HostileZip(
        name: "C:/x", entries: [("index.html", "<p>hi</p>"), ("C:/x", "x")], code: "path-drive-letter",
        mentions: ["C:/x"]),
    // libarchive turns "\\" into "/" before the reader sees a name; what it yields is checked.
    HostileZip(
        name: "a\\..\\x", entries: [("index.html", "<p>hi</p>"), ("a\\..\\x", "x")], code: "path-dot-component",
        mentions: ["a/../x"]),
    HostileZip(
        name: "a duplicate entry", entries: [("index.html", "<p>1</p>"), ("index.html", "<p>2</p>")],
        code: "entry-duplicate", mentions: ["index.html"]),
    HostileZip(
        name: "A.txt and a.txt", entries: [("index.html", "<p>hi</p>"), ("A.txt", "1"), ("a.txt", "2")],
        code: "entry-collision", mentions: ["A.txt", "a.txt"]),
    HostileZip(
        name: "a file used as a directory", entries: [("index.html", "<p>hi</p>"), ("a", "1"), ("a/b", "2")],
        code: "entry-file-directory-conflict", mentions: ["a/b"]),
    HostileZip(name: "only a directory", entries: [("dir/", "")], code: "archive-empty", mentions: ["no files"]),
]

@Suite("larder verify: a single bundle")
struct VerifyBundleTests {
    @Test("zips from other tools verify clean", arguments: zipTools)
    func otherTools(_ t: ZipTool) throws {
        try withSandbox { dir in
            let site = dir.appendingPathComponent("site")
            try makeSmallSite(site)
            let zip = dir.appendingPathComponent("x.zip")
            try t.make(site, zip)
            let r = try larder(["verify", zip.path])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("bundle \(zip.path): 0 problem(s); 1 package(s), 5 file(s)"), "\(r)")

            let j = try larder(["verify", zip.path, "--json"])
            #expect(j.status == 0, "\(j)")
            let report = try decode(VerifyJSON.self, j)
            #expect(report.ok)
            #expect(report.kind == "bundle")
            #expect(report.filesChecked == 5)
        }
    }

    @Test("a zip from another tool equals the file list larder packed from the same tree", arguments: zipTools)
    func otherToolsAgainstFileList(_ t: ZipTool) throws {
        try withWorkspace { ws in
            let site = ws.dir.appendingPathComponent("site")
            try makeSmallSite(site)
            try ws.packOK(site, id: "site", version: "1.0.0")
            let files = ws.repo.appendingPathComponent("packages/site/1.0.0/files.json")
            let zip = ws.dir.appendingPathComponent("x.zip")
            try t.make(site, zip)
            let r = try larder(["verify", zip.path, "--files", files.path])
            #expect(r.status == 0, "\(r)")

            // And a tree that differs by one file is caught.
            try writeText("console.log('changed');\n", to: site.appendingPathComponent("js/app.js"))
            let changed = ws.dir.appendingPathComponent("changed.zip")
            try t.make(site, changed)
            let d = try larder(["verify", changed.path, "--files", files.path])
            #expect(d.status == 1, "\(d)")
            let line = try #require(problemLine(d, "bundle-file-differs"), "\(d)")
            #expect(line.hasPrefix("js/app.js: "), "\(line)")
        }
    }

    @Test("larder's own bundle verifies alone and against its files.json")
    func ownBundle() throws {
        try withWorkspace { ws in
            try packSample(ws)
            let bundle = ws.repo.appendingPathComponent(bundleRel)
            let files = ws.repo.appendingPathComponent(filesRel)
            let r = try larder(["verify", bundle.path, "--files", files.path])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("0 problem(s)"), "\(r)")
        }
    }

    @Test("hostile zips are refused, naming the entry", arguments: hostileZips)
    func hostile(_ h: HostileZip) throws {
        try withSandbox { dir in
            let zip = dir.appendingPathComponent("bad.zip")
            try makeZip(zip, h.entries)
            let r = try larder(["verify", zip.path])
            let j = try larder(["verify", zip.path, "--json"])
            let report = try decode(VerifyJSON.self, j)
            #expect(r.status == 1, "\(r)")
            let line = try #require(problemLine(r, h.code), "no [\(h.code)] line: \(r)")
            for m in h.mentions { #expect(containsBytes(line, m), "the line should name \(m): \(line)") }
            #expect(j.status == 1)
            #expect(!report.ok)
            #expect(report.problems.first?.code == h.code)
        }
    }

    /// libarchive (3.6) rewrites names before Larder sees them: a backslash becomes "/", and a
    /// UTF-8-flagged NFD name becomes NFC. Verify judges (and a device would install) the rewritten
    /// name — shown here by checking the bundle against a file list that names it so.
    @Test("names libarchive rewrites are judged as rewritten")
    func rewrittenNames() throws {
        try withSandbox { dir in
            let zip = dir.appendingPathComponent("rewritten.zip")
            try makeZip(zip, [("index.html", "<p>hi</p>"), ("a\\b.txt", "x"), ("cafe\u{301}.txt", "y")])
            func entry(_ path: String, _ text: String) -> String {
                "{\"path\": \"\(path)\", \"size\": \(text.utf8.count), \"sha256\": \"\(SHA256Digest.of(Data(text.utf8)).hex)\"}"
            }
            let list = dir.appendingPathComponent("files.json")
            let json =
                "{\"schemaVersion\": 1, \"id\": \"x\", \"version\": \"1.0.0\", \"files\": ["
                + [entry("a/b.txt", "x"), entry("caf\u{e9}.txt", "y"), entry("index.html", "<p>hi</p>")].joined(
                    separator: ", ") + "]}"
            try Data(json.utf8).write(to: list)
            let r = try larder(["verify", zip.path, "--files", list.path])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("0 problem(s)"), "\(r)")
        }
    }

    @Test("a symbolic-link entry is refused")
    func symlinkEntry() throws {
        try withSandbox { dir in
            let site = dir.appendingPathComponent("site")
            try writeText("<p>hi</p>\n", to: site.appendingPathComponent("index.html"))
            try FileManager.default.createSymbolicLink(
                atPath: site.appendingPathComponent("link").path, withDestinationPath: "/etc/passwd")
            let zip = dir.appendingPathComponent("link.zip")
            try tool("zip", ["-q", "-r", "-y", zip.path, "."], cwd: site)
            let r = try larder(["verify", zip.path])
            #expect(r.status == 1, "\(r)")
            let line = try #require(problemLine(r, "entry-type"), "\(r)")
            #expect(line.contains("\"link\""), "\(line)")
        }
    }

    @Test("a file that is not a zip, and a missing file, fail with exit 1")
    func notAZip() throws {
        try withSandbox { dir in
            let junk = dir.appendingPathComponent("junk.zip")
            try writeText("this is not a zip\n", to: junk)
            let r = try larder(["verify", junk.path])
            #expect(r.status == 1, "\(r)")
            #expect(r.stdout.contains("[archive-truncated]") && r.stdout.contains("zip structure"), "\(r)")

            let missing = try larder(["verify", dir.appendingPathComponent("nope.zip").path])
            #expect(missing.status == 1, "\(missing)")
            #expect(missing.stdout.contains("nope.zip"), "\(missing)")
        }
    }

    @Test("a broken link in a single bundle is reported")
    func brokenLinkInBundle() throws {
        try withSandbox { dir in
            let zip = dir.appendingPathComponent("links.zip")
            try makeZip(
                zip, [("index.html", "<img src=\"img/missing.png\"><a href=\"sub/\">x</a>"), ("sub/page.html", "<p/>")])
            let r = try larder(["verify", zip.path])
            #expect(r.status == 1, "\(r)")
            let lines = r.stdout.split(separator: "\n").filter { $0.contains("[link-broken]") }
            #expect(lines.count == 2, "\(r)")
            #expect(lines.contains { $0.hasPrefix("index.html: ") && $0.contains("img/missing.png") }, "\(r)")
            #expect(lines.contains { $0.contains("\"sub/\"") && $0.contains("without index.html") }, "\(r)")
        }
    }
}
