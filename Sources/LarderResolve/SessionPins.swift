import Foundation
import LarderCore
import LarderStore
import Synchronization

/// The pinned versions of one web view, renewed at each main-frame navigation: while a page is
/// shown, its subresources come from the versions it was loaded with (an update or a rollback
/// does not mix versions inside a page); a reload or a new navigation takes the versions active
/// then — after a rollback, the restored one.
public final class SessionPins: Sendable {
    /// The live resolver.
    public let resolver: Resolver
    /// The packages pinned; nil pins every package with an active version.
    public let ids: [String]?
    private let session = Mutex<ResolverSession?>(nil)

    /// Pins `ids` (nil: every active package) now.
    public init(resolver: Resolver, ids: [String]? = nil) throws(StoreError) {
        self.resolver = resolver
        self.ids = ids
        try renew()
    }

    /// The session resolving with the current pins.
    public var current: ResolverSession? { session.withLock { $0 } }

    /// Pins the versions active now, then gives the previous pins back.
    public func renew() throws(StoreError) {
        let wanted = ids ?? resolver.snapshot().versions.activeIDs
        let fresh = try resolver.session(pinning: wanted)
        let old = session.withLock { s in
            defer { s = fresh }
            return s
        }
        old?.release()
    }

    /// Gives the pins back to gc (idempotent).
    public func release() {
        let old = session.withLock { s in
            defer { s = nil }
            return s
        }
        old?.release()
    }
}
