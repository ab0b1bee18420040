import CWebKitGTK
import Foundation
import Larder

/// WebKitGTK's cookie store (a network session's `WebKitCookieManager`) as the cookie bridge's
/// `CookieStore`: one `add_cookie` or `delete_cookie` per cookie, `get_cookies` per URL, each on
/// GLib's main loop. With a data directory, persistent cookies are kept in an SQLite file there
/// (`cookies.sqlite`, libsoup's own crash-safe store); session cookies end with the process.
public final class GTKCookieStore: CookieStore, @unchecked Sendable {
    // @unchecked: the manager is only touched on the main loop.
    let manager: OpaquePointer

    /// The store of `session` (a `WebKitNetworkSession`); its persistent cookies kept in
    /// `persistentFile` (SQLite) when given, read back from it at start.
    public init(session: OpaquePointer, persistentFile: String? = nil) {
        manager = webkit_network_session_get_cookie_manager(session)
        if let persistentFile {
            webkit_cookie_manager_set_persistent_storage(
                manager, persistentFile, WEBKIT_COOKIE_PERSISTENT_STORAGE_SQLITE)
        }
    }

    /// Every cookie named `name` the store holds.
    public func cookies(named name: String) async -> [WebCookie] {
        let manager = MainLoopBound(manager)
        return await withCheckedContinuation { (done: CheckedContinuation<[WebCookie], Never>) in
            GLibMain.async {
                GAsync.call({ webkit_cookie_manager_get_all_cookies(manager.value, nil, $0, $1) }) { _, result in
                    let list = webkit_cookie_manager_get_all_cookies_finish(manager.value, result, nil)
                    done.resume(returning: Self.take(list).filter { $0.name == name })
                }
            }
        }
    }

    /// The cookies of a `GList` of `SoupCookie`s, freeing the list.
    static func take(_ list: UnsafeMutablePointer<GList>?) -> [WebCookie] {
        var out: [WebCookie] = []
        var node = list
        while let n = node {
            if let c = n.pointee.data { out.append(Self.cookie(OpaquePointer(c))) }
            node = n.pointee.next
        }
        g_list_free_full(list) { if let c = $0 { soup_cookie_free(OpaquePointer(c)) } }
        return out
    }

    /// The cookies a request to `url` carries, as WebKit matches them.
    public func cookies(for url: URL) async -> [WebCookie] {
        let manager = MainLoopBound(manager)
        let uri = url.absoluteString
        return await withCheckedContinuation { (done: CheckedContinuation<[WebCookie], Never>) in
            GLibMain.async {
                GAsync.call({ webkit_cookie_manager_get_cookies(manager.value, uri, nil, $0, $1) }) { _, result in
                    done.resume(
                        returning: Self.take(webkit_cookie_manager_get_cookies_finish(manager.value, result, nil)))
                }
            }
        }
    }

    /// Adds `cookie` (replacing its namesake), or deletes its namesake when it has expired:
    /// libsoup deletes only a cookie equal in value too, so the stored one is looked up first.
    public func save(_ cookie: WebCookie) async {
        if cookie.isExpired(at: Date()) {
            for old in await cookies(named: cookie.name)
            where old.domain == cookie.domain && old.hostOnly == cookie.hostOnly && old.path == cookie.path {
                await change(old, delete: true)
            }
            return
        }
        await change(cookie, delete: false)
    }

    /// One `add_cookie` or `delete_cookie`.
    private func change(_ cookie: WebCookie, delete expired: Bool) async {
        let manager = MainLoopBound(manager)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            GLibMain.async {
                guard let soup = Self.soup(cookie) else { return done.resume() }
                if expired {
                    GAsync.call({ webkit_cookie_manager_delete_cookie(manager.value, soup, nil, $0, $1) }) { _, r in
                        _ = webkit_cookie_manager_delete_cookie_finish(manager.value, r, nil)
                        soup_cookie_free(soup)
                        done.resume()
                    }
                } else {
                    GAsync.call({ webkit_cookie_manager_add_cookie(manager.value, soup, nil, $0, $1) }) { _, r in
                        _ = webkit_cookie_manager_add_cookie_finish(manager.value, r, nil)
                        soup_cookie_free(soup)
                        done.resume()
                    }
                }
            }
        }
    }

    /// `c` as libsoup keeps it: a host-only cookie's domain as is, a domain cookie's with a dot.
    static func soup(_ c: WebCookie) -> OpaquePointer? {
        // Max-Age -1: a session cookie; a persistent one gets its expiry below.
        let maxAge: Int32 = c.expires == nil ? -1 : 0
        guard let cookie = soup_cookie_new(c.name, c.value, c.cookieDomain, c.path, maxAge)
        else { return nil }
        if let expires = c.expires {
            let date = g_date_time_new_from_unix_utc(Int(expires.timeIntervalSince1970.rounded(.down)))
            soup_cookie_set_expires(cookie, date)
            g_date_time_unref(date)
        }
        soup_cookie_set_secure(cookie, c.secure ? 1 : 0)
        soup_cookie_set_http_only(cookie, c.httpOnly ? 1 : 0)
        let policy: SoupSameSitePolicy =
            switch c.sameSite {
            case .some(.strict): SOUP_SAME_SITE_POLICY_STRICT
            case .some(.none): SOUP_SAME_SITE_POLICY_NONE
            case .some(.lax), nil: SOUP_SAME_SITE_POLICY_LAX
            }
        soup_cookie_set_same_site_policy(cookie, policy)
        return cookie
    }

    /// A libsoup cookie in plain values.
    static func cookie(_ c: OpaquePointer) -> WebCookie {
        let sameSite =
            switch soup_cookie_get_same_site_policy(c) {
            case SOUP_SAME_SITE_POLICY_STRICT: "Strict"
            case SOUP_SAME_SITE_POLICY_NONE: "None"
            default: "Lax"
            }
        return WebCookie(
            name: String(cString: soup_cookie_get_name(c)), value: String(cString: soup_cookie_get_value(c)),
            cookieDomain: String(cString: soup_cookie_get_domain(c)), path: String(cString: soup_cookie_get_path(c)),
            expires: soup_cookie_get_expires(c).map {
                Date(timeIntervalSince1970: TimeInterval(g_date_time_to_unix($0)))
            },
            secure: soup_cookie_get_secure(c) != 0, httpOnly: soup_cookie_get_http_only(c) != 0, sameSite: sameSite)
    }
}

/// GIO's asynchronous calls (`…(…, GAsyncReadyCallback, gpointer)` then `…_finish`) with a closure.
enum GAsync {
    typealias Done = (UnsafeMutablePointer<GObject>?, OpaquePointer?) -> Void

    /// Calls `start` with a callback and its data; `done` runs once, with the source and result.
    static func call(_ start: (GAsyncReadyCallback, gpointer) -> Void, _ done: @escaping Done) {
        let box = Unmanaged.passRetained(SignalBox<Done>(done)).toOpaque()
        start(
            { source, result, data in
                guard let data else { return }
                Unmanaged<SignalBox<Done>>.fromOpaque(data).takeRetainedValue().handler(source, result)
            }, box)
    }
}
