import CArchive
import Foundation

/// The thread-local UTF-8 locale under which every libarchive call runs, so entry names convert
/// as UTF-8 whatever the host process's global locale is (the C locale makes libarchive refuse
/// every non-ASCII name). Created once; never freed (one per process).
nonisolated(unsafe) private let utf8Locale: locale_t? = larder_new_utf8_locale()

/// Runs `body` with this thread's LC_CTYPE switched to UTF-8, restoring the previous one after.
func withUTF8Locale<T>(_ body: () throws -> T) rethrows -> T {
    guard let loc = utf8Locale else { return try body() }
    let previous = uselocale(loc)
    defer { uselocale(previous) }
    return try body()
}

/// libarchive's result codes as Swift constants.
enum LA {
    static let ok = ARCHIVE_OK
    static let eof = ARCHIVE_EOF
    static let warn = ARCHIVE_WARN
    static let retry = ARCHIVE_RETRY

    /// File-type bits of `archive_entry_filetype` (the AE_IF* macros do not import).
    static let regular: UInt32 = 0o100000
    static let directory: UInt32 = 0o040000
    static let symlink: UInt32 = 0o120000
    static let socket: UInt32 = 0o140000
    static let character: UInt32 = 0o020000
    static let block: UInt32 = 0o060000
    static let fifo: UInt32 = 0o010000

    static func typeName(_ t: UInt32) -> String {
        switch t {
        case symlink: "symbolic link"
        case socket: "socket"
        case character: "character device"
        case block: "block device"
        case fifo: "FIFO"
        default: "entry of type 0o" + String(t, radix: 8)
        }
    }

    /// The archive's last error message.
    static func message(_ a: OpaquePointer) -> String {
        guard let c = archive_error_string(a) else { return "unknown libarchive error" }
        return String(cString: c)
    }
}
