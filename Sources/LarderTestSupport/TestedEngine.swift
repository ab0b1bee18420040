import Foundation
import LarderFetch
import LarderFetchNIO
import LarderFetchURLSession

extension HTTPStack {
    /// The HTTP engine the suites sync and fetch over: AsyncHTTPClient (Linux's), or, with
    /// `LARDER_TEST_ENGINE=urlsession`, URLSession (Apple platforms', here through
    /// FoundationNetworking). `scripts/test` runs the fetch suite once with each: one suite that
    /// both engines pass. What an app gets is the façade's choice (`HTTPStack.platform`).
    package static let tested: HTTPStack = {
        switch ProcessInfo.processInfo.environment["LARDER_TEST_ENGINE"] {
        case "urlsession": .urlSession
        default: .nio
        }
    }()
}
