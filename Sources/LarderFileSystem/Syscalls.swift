// swift-format-ignore-file: AlwaysUseLowerCamelCase
// (the `system_…` names spell the C calls they wrap, as swift-system's do)

import SystemPackage

// The funnel's one helper file: the only place in Larder that names a C file-system call.
//
// Each `system_…` function below is one C call and nothing else; `checked` is the checked
// helper every one of them is run through (as swift-system's `valueOrErrno`): it consults the
// fault seam, retries `EINTR`, and turns `-1` (or the call's own failure value) with its errno
// into a `FileSystemError` naming the call and the path. `SystemCalls` is the API on top;
// `scripts/tools/check-syscalls.sh` keeps raw calls out of every other file.
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#else
    #error("LarderFileSystem: a C library other than Glibc, Musl or Darwin is not handled")
#endif

// MARK: the checked helper

/// Runs one system call: injects a fault when a scope asks for one, retries `EINTR` (unless
/// `retryOnInterrupt` is false), and throws `FileSystemError(call, path, errno)` when `failed`
/// says the result is the call's failure. `lost` is what a lost write reports instead of doing
/// the call (only writes and flushes pass one). `path` is evaluated only for a fault check or an
/// error, so a call relative to a directory descriptor builds its full path only then.
@inline(__always)
func checked<R>(
    _ call: SystemCall, _ path: @autoclosure () -> FilePath, to destination: FilePath? = nil, operation: String? = nil,
    retryOnInterrupt: Bool = true, lost: (() -> R)? = nil, failed: (R) -> Bool, _ body: () -> R
) throws(FileSystemError) -> R {
    while true {
        let errno: Errno
        if _slowPath(FaultInjector.isArmed),
            let (effect, announced) = FaultInjector.effect(for: call, path(), destination)
        {
            switch effect {
            case .fail(let injected):
                if announced { announceFault(call, path(), destination, injected) }
                errno = injected
            case .crash:
                crashNow(call, path(), destination)
            case .loseWrite:
                if let lost { return lost() }
                let r = body()
                guard failed(r) else { return r }
                errno = Errno(rawValue: currentErrno())
            }
        } else {
            let r = body()
            guard failed(r) else { return r }
            errno = Errno(rawValue: currentErrno())
        }
        if retryOnInterrupt && errno == .interrupted { continue }
        let name = operation ?? call.rawValue
        if let destination { throw FileSystemError(name, path(), to: destination, errno) }
        throw FileSystemError(name, path(), errno)
    }
}

/// `checked` for the calls that return `-1` on failure.
@inline(__always)
func checked<I: FixedWidthInteger>(
    _ call: SystemCall, _ path: @autoclosure () -> FilePath, to destination: FilePath? = nil, operation: String? = nil,
    retryOnInterrupt: Bool = true, lost: (() -> I)? = nil, _ body: () -> I
) throws(FileSystemError) -> I {
    try checked(
        call, path(), to: destination, operation: operation, retryOnInterrupt: retryOnInterrupt, lost: lost,
        failed: { $0 == -1 }, body)
}

@inline(__always) private func currentErrno() -> Int32 { errno }

/// A crash injected before `call` on `path`: one line on stderr (which call, which path), then
/// SIGKILL — nothing after it runs, as when the process is killed or the machine stops.
func crashNow(_ call: SystemCall, _ path: FilePath, _ destination: FilePath?) -> Never {
    var line = "larder: crash injected before \(call.rawValue) \(path)"
    if let destination { line += " -> \(destination)" }
    line += "\n"
    line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
    _ = kill(getpid(), SIGKILL)
    abort()
}

/// One line on stderr for an announced injected failure: which call, which path (with its inode
/// when it exists, so a checker can tell whether what failed to flush was trusted later under
/// another name), which errno.
func announceFault(_ call: SystemCall, _ path: FilePath, _ destination: FilePath?, _ injected: Errno) {
    var line = "larder: fault injected: \(call.rawValue) \(path)"
    if let destination { line += " -> \(destination)" }
    line += " fails with \(injected.rawValue) (\(injected))"
    var st = stat()
    if path.withPlatformString({ lstat($0, &st) }) == 0 { line += " [inode \(st.st_ino)]" }
    line += "\n"
    line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

@inline(__always) func clearErrno() { errno = 0 }

// MARK: the C calls (one each)

@inline(__always)
func system_open(_ path: FilePath, _ flags: Int32, _ mode: mode_t) -> Int32 {
    path.withPlatformString { open($0, flags, mode) }
}

@inline(__always)
func system_openat(_ dir: Int32, _ name: FilePath, _ flags: Int32, _ mode: mode_t) -> Int32 {
    name.withPlatformString { openat(dir, $0, flags, mode) }
}

@inline(__always) func system_close(_ fd: Int32) -> Int32 { close(fd) }

@inline(__always) func system_pipe(_ fds: UnsafeMutablePointer<Int32>) -> Int32 { pipe(fds) }

@inline(__always) func system_setCloseOnExec(_ fd: Int32) { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }

@inline(__always)
func system_read(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Int {
    read(fd, buffer.baseAddress, buffer.count)
}

@inline(__always)
func system_pread(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, _ offset: Int64) -> Int {
    pread(fd, buffer.baseAddress, buffer.count, off_t(offset))
}

@inline(__always)
func system_write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
    write(fd, bytes.baseAddress, bytes.count)
}

@inline(__always)
func system_pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ offset: Int64) -> Int {
    pwrite(fd, bytes.baseAddress, bytes.count, off_t(offset))
}

@inline(__always)
func system_lseek(_ fd: Int32, _ offset: Int64, _ whence: Int32) -> Int64 {
    Int64(lseek(fd, off_t(offset), whence))
}

@inline(__always)
func system_fsync(_ fd: Int32) -> Int32 {
    #if canImport(Darwin)
        // What fsync promises elsewhere: through the drive's cache. Not every file system has it.
        if fcntl(fd, F_FULLFSYNC) == 0 { return 0 }
    #endif
    return fsync(fd)
}

@inline(__always)
func system_fdatasync(_ fd: Int32) -> Int32 {
    #if os(Linux)
        return fdatasync(fd)
    #else
        return system_fsync(fd)
    #endif
}

#if os(Linux)
    /// glibc's `syncfs(2)` (since 2.14): Swift's Glibc module does not export it because the
    /// header declares it only under `_GNU_SOURCE`. The C signature is `int syncfs(int fd)`.
    @_silgen_name("syncfs")
    private func glibc_syncfs(_ fd: Int32) -> Int32

    @inline(__always) func system_syncfs(_ fd: Int32) -> Int32 { glibc_syncfs(fd) }
    /// Whether `system_syncfs` flushes the whole file system (else it syncs one file).
    let platformSyncsFileSystem = true
#else
    /// No `syncfs` here: the call syncs the one file, and callers sync each file instead.
    @inline(__always) func system_syncfs(_ fd: Int32) -> Int32 { system_fsync(fd) }
    let platformSyncsFileSystem = false
#endif

@inline(__always) func system_ftruncate(_ fd: Int32, _ size: Int64) -> Int32 { ftruncate(fd, off_t(size)) }

@inline(__always) func system_flock(_ fd: Int32, _ operation: Int32) -> Int32 { flock(fd, operation) }

@inline(__always)
func system_stat(_ path: FilePath, _ out: inout FileStatus) -> Int32 {
    var st = stat()
    let r = path.withPlatformString { stat($0, &st) }
    if r == 0 { out = FileStatus(st) }
    return r
}

/// The bytes an unprivileged writer may still use on the file system holding `path`
/// (`f_bavail × f_frsize`).
@inline(__always)
func system_statvfs(_ path: FilePath, _ available: inout Int64) -> Int32 {
    var st = statvfs()
    let r = path.withPlatformString { statvfs($0, &st) }
    if r == 0 { available = Int64(st.f_bavail) &* Int64(st.f_frsize) }
    return r
}

@inline(__always)
func system_lstat(_ path: FilePath, _ out: inout FileStatus) -> Int32 {
    var st = stat()
    let r = path.withPlatformString { lstat($0, &st) }
    if r == 0 { out = FileStatus(st) }
    return r
}

@inline(__always)
func system_fstat(_ fd: Int32, _ out: inout FileStatus) -> Int32 {
    var st = stat()
    let r = fstat(fd, &st)
    if r == 0 { out = FileStatus(st) }
    return r
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: an `lstat` relative to a directory descriptor.
@inline(__always)
func system_lstatat(_ dir: Int32, _ name: FilePath, _ out: inout FileStatus) -> Int32 {
    var st = stat()
    let r = name.withPlatformString { fstatat(dir, $0, &st, AT_SYMLINK_NOFOLLOW) }
    if r == 0 { out = FileStatus(st) }
    return r
}

@inline(__always)
func system_rename(_ from: FilePath, _ to: FilePath) -> Int32 {
    from.withPlatformString { f in to.withPlatformString { t in rename(f, t) } }
}

@inline(__always)
func system_link(_ existing: FilePath, _ new: FilePath) -> Int32 {
    existing.withPlatformString { e in new.withPlatformString { n in link(e, n) } }
}

@inline(__always) func system_unlink(_ path: FilePath) -> Int32 { path.withPlatformString { unlink($0) } }

/// `unlinkat(dir, name, directory ? AT_REMOVEDIR : 0)`.
@inline(__always)
func system_unlinkat(_ dir: Int32, _ name: FilePath, directory: Bool) -> Int32 {
    name.withPlatformString { unlinkat(dir, $0, directory ? AT_REMOVEDIR : 0) }
}

@inline(__always)
func system_mkdir(_ path: FilePath, _ mode: mode_t) -> Int32 { path.withPlatformString { mkdir($0, mode) } }

@inline(__always)
func system_mkdirat(_ dir: Int32, _ name: FilePath, _ mode: mode_t) -> Int32 {
    name.withPlatformString { mkdirat(dir, $0, mode) }
}

@inline(__always) func system_rmdir(_ path: FilePath) -> Int32 { path.withPlatformString { rmdir($0) } }

@inline(__always)
func system_utimensat(_ path: FilePath, _ accessed: FileTime, _ modified: FileTime) -> Int32 {
    var times = [
        timespec(tv_sec: time_t(accessed.seconds), tv_nsec: Int(accessed.nanoseconds)),
        timespec(tv_sec: time_t(modified.seconds), tv_nsec: Int(modified.nanoseconds)),
    ]
    return path.withPlatformString { utimensat(AT_FDCWD, $0, &times, 0) }
}

/// Maps `length` bytes of `fd` read-only and shared; `nil` on failure (errno set).
@inline(__always)
func system_mmapReadOnly(_ fd: Int32, _ length: Int) -> UnsafeRawPointer? {
    guard let p = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0), p != MAP_FAILED else { return nil }
    return UnsafeRawPointer(p)
}

@inline(__always)
func system_munmap(_ address: UnsafeRawPointer, _ length: Int) -> Int32 {
    munmap(UnsafeMutableRawPointer(mutating: address), length)
}

#if canImport(Darwin)
    /// A C `DIR *`.
    typealias DirectoryStream = UnsafeMutablePointer<DIR>
#else
    /// A C `DIR *` (an incomplete type in glibc and musl).
    typealias DirectoryStream = OpaquePointer
#endif

@inline(__always)
func system_opendir(_ path: FilePath) -> DirectoryStream? { path.withPlatformString { opendir($0) } }

/// `fdopendir`: the stream takes the descriptor over (it is closed with the stream).
@inline(__always) func system_fdopendir(_ fd: Int32) -> DirectoryStream? { fdopendir(fd) }

/// `readdir` with errno cleared first: it answers nil both at the end and on an error.
@inline(__always)
func system_readdir(_ stream: DirectoryStream) -> UnsafeMutablePointer<dirent>? {
    clearErrno()
    return readdir(stream)
}

@inline(__always) func system_closedir(_ stream: DirectoryStream) -> Int32 { closedir(stream) }

/// Whether a nil from `readdir` was an error (errno set) rather than the end.
@inline(__always)
func readdirFailed(_ entry: UnsafeMutablePointer<dirent>?) -> Bool { entry == nil && currentErrno() != 0 }

/// A `dirent`'s name, its bytes kept exactly (`nil` for `.` and `..`).
func entryName(of entry: UnsafeMutablePointer<dirent>) -> [UInt8]? {
    let name: [UInt8] = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        Array(raw.prefix { $0 != 0 })
    }
    if name.isEmpty || name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { return nil }
    return name
}

// MARK: status

extension FileStatus {
    /// The fields Larder uses of a C `stat`.
    init(_ st: stat) {
        #if canImport(Darwin)
            let mtime = st.st_mtimespec
        #else
            let mtime = st.st_mtim
        #endif
        let type = st.st_mode & S_IFMT
        let kind: FileKind =
            switch type {
            case S_IFREG: .regular
            case S_IFDIR: .directory
            case S_IFLNK: .symbolicLink
            case S_IFIFO: .fifo
            case S_IFSOCK: .socket
            case S_IFCHR: .characterDevice
            case S_IFBLK: .blockDevice
            default: .unknown
            }
        self.init(
            kind: kind, permissions: FilePermissions(rawValue: CInterop.Mode(st.st_mode & ~S_IFMT)),
            size: Int64(st.st_size), device: UInt64(st.st_dev), inode: UInt64(st.st_ino),
            linkCount: UInt64(st.st_nlink),
            modificationTime: FileTime(seconds: Int64(mtime.tv_sec), nanoseconds: Int32(mtime.tv_nsec)))
    }
}

// MARK: flags

/// The C constants the API needs, so that no other file imports the C library for them.
enum CFlags {
    static let closeOnExec = O_CLOEXEC
    static let lockShared = LOCK_SH
    static let lockExclusive = LOCK_EX
    static let lockUnlock = LOCK_UN
    static let lockNonBlocking = LOCK_NB
    static let seekSet = SEEK_SET
    static let seekCurrent = SEEK_CUR
    static let seekEnd = SEEK_END
    static let directoryReadOnly = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
}
