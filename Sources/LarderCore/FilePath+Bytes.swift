import SystemPackage

// swift-system re-parses and re-checks a whole path at each of its operations (`components`,
// `lastComponent`, `removingLastComponent`, `appending`), and in a debug build (the one every
// test runs) those checks cost about 0.1 ms a call on a sandbox's paths: `larder doctor`
// spent half its time naming directory entries, `larder pack` 90 % finding a file's parent.
// The operations here scan the bytes once and build one FilePath, with the same results for
// the paths Larder makes (separators already normal, as every FilePath's are).
extension FilePath {
    /// The path's bytes, exactly as stored (no NUL).
    package var bytes: [UInt8] {
        withPlatformString { p in Array(UnsafeRawBufferPointer(start: p, count: length)) }
    }

    /// The path of exactly `bytes` (which hold no NUL).
    package init(bytes: [UInt8]) {
        let terminated = bytes + [0]
        self = terminated.withUnsafeBytes { raw in
            raw.withMemoryRebound(to: CInterop.PlatformChar.self) { chars in
                guard let start = chars.baseAddress else { return FilePath() }
                return FilePath(platformString: start)
            }
        }
    }

    /// `self` and the relative path `rest` (bytes) with one `/` between them.
    package func joined(_ rest: some Collection<UInt8>) -> FilePath {
        guard !rest.isEmpty else { return self }
        var out = bytes
        if let last = out.last, last != FilePath.slash, rest.first != FilePath.slash { out.append(FilePath.slash) }
        out.append(contentsOf: rest)
        return FilePath(bytes: out)
    }

    /// `self` and the relative path `rest` with one `/` between them.
    package func joined(_ rest: String) -> FilePath { joined(rest.utf8) }

    /// `self` and one more component.
    package func joined(_ component: FilePath.Component) -> FilePath {
        joined(
            component.withPlatformString { p in
                var n = 0
                while p[n] != 0 { n += 1 }
                return Array(UnsafeRawBufferPointer(start: p, count: n))
            })
    }

    /// What `removingLastComponent()` gives, from one scan: everything before the last `/`
    /// (`/` for a name under the root, the empty path for a bare name, `/` for `/`).
    package var parentPath: FilePath {
        let all = bytes
        guard let cut = all.lastIndex(of: FilePath.slash) else { return FilePath() }
        return cut == 0 ? FilePath(bytes: [FilePath.slash]) : FilePath(bytes: Array(all[..<cut]))
    }

    /// The bytes after the last `/` (the whole path when it has none; empty for `/`).
    package var lastNameBytes: [UInt8] {
        let all = bytes
        guard let cut = all.lastIndex(of: FilePath.slash) else { return all }
        return Array(all[(cut + 1)...])
    }

    private static let slash = UInt8(ascii: "/")
}
