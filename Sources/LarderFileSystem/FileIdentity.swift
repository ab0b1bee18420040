import SystemPackage

/// Which file a path names, as far as a reader can tell without reading it: device, inode, size
/// and modification time. Files Larder rewrites (state.json, the accepted index) are replaced by
/// rename, so any new version of them is a new inode: an equal identity means the same file.
package struct FileIdentity: Codable, Sendable, Equatable {
    /// The device the file is on.
    package let device: UInt64
    /// Its inode number.
    package let inode: UInt64
    /// Its size in bytes.
    package let size: Int64
    /// Its modification time: whole seconds since 1970, and nanoseconds into that second.
    package let seconds: Int64
    /// See `seconds`.
    package let nanoseconds: Int64

    /// The identity of the file at `path` (following links); nil when it cannot be stat'ed.
    package init?(_ path: FilePath) {
        guard let st = try? SystemCalls.stat(path) else { return nil }
        device = st.device
        inode = st.inode
        size = st.size
        seconds = Int64(st.modificationTime.seconds)
        nanoseconds = Int64(st.modificationTime.nanoseconds)
    }
}
