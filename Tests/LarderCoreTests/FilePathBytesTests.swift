import LarderCore
import SystemPackage
import Testing

/// The byte-scanning path operations give what swift-system's own give, for every shape of
/// path Larder makes (absolute, relative, under the root, bare, deep, non-UTF-8).
@Suite("FilePath by bytes")
struct FilePathBytesTests {
    static let paths: [FilePath] = [
        "/", "/a", "/a/b", "/tmp/sandbox/packages/big/2.0.0/js/app.9c1e07.js", "a", "a/b", "a/b/c.json",
        "", ".", "..", "/a/./b", "a/../b", "/café/naïve.txt", "/a/.b.tmp-1-2",
    ]

    @Test(arguments: paths)
    func parentAndName(_ path: FilePath) {
        #expect(path.parentPath == path.removingLastComponent())
        #expect(FilePath(bytes: path.bytes) == path)
        if let last = path.lastComponent {
            #expect(path.lastNameBytes == Array(last.string.utf8))
        } else {
            #expect(path.lastNameBytes.isEmpty || path.isEmpty)
        }
    }

    @Test(arguments: paths)
    func joinedMatchesAppending(_ path: FilePath) {
        for rest in ["x", "x/y.js", "/x", "x//y", "", ".hidden", "deep/er/and/deeper/file.css"] {
            #expect(path.joined(rest) == path.appending(rest), "\(path) + \(rest)")
        }
        for component: FilePath.Component in ["x", "index.html", ".state.json.tmp-1"] {
            #expect(path.joined(component) == path.appending(component), "\(path) + \(component)")
        }
    }

    @Test func bytesThatAreNotUTF8AreKept() {
        let name: [UInt8] = [0x66, 0xFF, 0xFE, 0x2E, 0x6A, 0x73]  // "f", two bytes no UTF-8 has, ".js"
        let dir: FilePath = "/tmp/d"
        let full = dir.joined(name)
        #expect(full.bytes == Array("/tmp/d/".utf8) + name)
        #expect(full.lastNameBytes == name)
        #expect(full.parentPath == dir)
    }
}
