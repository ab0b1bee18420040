#if canImport(Glibc)
    import Glibc
#endif

/// The local time zone, pinned for the process (Linux, glibc). With `TZ` unset, glibc's `mktime`
/// checks `/etc/localtime` with a `stat` on every call, and libarchive calls it for every zip
/// entry it lists, twice (its central record and its local header) — per handle, so a bundle
/// read by several threads pays it once per thread. `TZ=:/etc/localtime` names the same file,
/// which glibc then reads once. Larder formats every date in UTC; the setting only saves the
/// calls. An app embedding the library keeps its own environment; a `TZ` already set is kept.
enum TimeZoneSetting {
    /// Sets `TZ` when it is unset (before any other thread starts).
    static func pin() {
        #if canImport(Glibc)
            if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        #endif
    }
}
