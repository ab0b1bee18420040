// The one place that chooses the HTTP engine, by platform: what the façade (`OfflinePackages`)
// and the CLI inject into their syncs (`SyncSetup.engine`) and forward passthrough requests with.
// The sync itself depends on LarderFetch alone. This is the only file of the façade that asks
// which platform it is built for. Linux: AsyncHTTPClient (NIO), chosen by measurement over
// FoundationNetworking's URLSession, whose libcurl alone adds about 6 ms to every process start
// (BENCHMARKS.md). Apple platforms: URLSession, so that no NIO is linked into an app. Building
// with LARDER_URLSESSION=1 in the environment (Package.swift) selects URLSession on Linux too,
// for a side-by-side measurement.
#if canImport(Darwin) || LARDER_URLSESSION
    import LarderFetch
    import LarderFetchURLSession

    extension HTTPStack {
        /// The platform's HTTP engine: URLSession.
        public static var platform: HTTPStack { .urlSession }
    }
#elseif os(Linux)
    import LarderFetch
    import LarderFetchNIO

    extension HTTPStack {
        /// The platform's HTTP engine: AsyncHTTPClient over NIO.
        public static var platform: HTTPStack { .nio }
    }
#else
    #error("Larder: no HTTP engine is chosen for this platform (see Sources/Larder/Platform.swift)")
#endif
