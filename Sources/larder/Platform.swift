// The command-line tool's platform settings: the only file of this target that asks which
// platform it is built for.
#if canImport(Glibc)
    import Glibc

    /// The command-line tool's allocator settings (Linux, glibc). A command works through one
    /// large thing at a time — a file list of 20,000 entries, an archive's directory — on more
    /// than one thread (a bundle is extracted on a thread of its own while it downloads), and
    /// glibc's defaults hold on to what such phases free: each thread gets its own arena, whose
    /// freed memory the next phase on another thread cannot reuse, and the top of the heap is
    /// kept after it is freed. One arena and a 128 KiB trim threshold return that memory;
    /// measured on a sync of a 21,488-file bundle, peak RSS falls by about 10 MiB
    /// (`scripts/bench --scale`). (A fixed mmap threshold saved little more and cost time: every
    /// large buffer became an mmap and munmap.) An app embedding the library keeps its own
    /// settings.
    enum Allocator {
        /// `mallopt`, looked up at run time: Swift's Glibc module leaves out <malloc.h>.
        private static let mallopt = dlsym(nil, "mallopt").map {
            unsafeBitCast($0, to: (@convention(c) (Int32, Int32) -> Int32).self)
        }
        // <malloc.h>
        private static let trimThreshold: Int32 = -1
        private static let arenaMax: Int32 = -8

        /// Applies the settings (best effort; a libc without `mallopt` keeps its defaults).
        static func tune() {
            guard let mallopt else { return }
            _ = mallopt(arenaMax, 1)
            _ = mallopt(trimThreshold, 128 << 10)
        }
    }

    /// The local time zone, pinned for the process (Linux, glibc). With `TZ` unset, glibc's `mktime`
    /// checks `/etc/localtime` with a `stat` on every call, and libarchive calls it for every zip
    /// entry it lists, twice (its central record and its local header) — per handle, so a bundle
    /// read by several threads pays it once per thread. `TZ=:/etc/localtime` names the same file,
    /// which glibc then reads once. Larder formats every date in UTC; the setting only saves the
    /// calls. An app embedding the library keeps its own environment; a `TZ` already set is kept.
    enum TimeZoneSetting {
        /// Sets `TZ` when it is unset (before any other thread starts).
        static func pin() {
            if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        }
    }
#elseif canImport(Darwin)
    /// Elsewhere the system allocator's defaults stay.
    enum Allocator {
        /// Nothing to do.
        static func tune() {}
    }

    /// Elsewhere the time zone is left as it is.
    enum TimeZoneSetting {
        /// Nothing to do.
        static func pin() {}
    }
#else
    #error("larder: a platform with neither Glibc nor Darwin is not handled")
#endif
