import Foundation
import LarderCore
import LarderResolve
import LarderStore
import LarderTestSupport
import LarderWebView
import Synchronization
import Testing

/// A network answering by path, recording what each request carried.
final class ScriptedExchange: NetworkExchange, Sendable {
    let sent = Mutex<[ForwardRequest]>([])
    let answers: [String: (Int, [(String, String)], String)]

    init(_ answers: [String: (Int, [(String, String)], String)]) { self.answers = answers }

    func send(_ request: ForwardRequest, maxBytes: Int) async throws -> ForwardResponse {
        sent.withLock { $0.append(request) }
        let path = URL(string: request.url)?.path ?? ""
        let (status, headers, body) = answers[path] ?? (404, [], "no \(path)")
        return ForwardResponse(status: status, headers: headers, body: .bytes(Data(body.utf8)))
    }

    func cookie(at index: Int) -> String? {
        sent.withLock { $0 }[index].headers.first { $0.0 == "Cookie" }?.1
    }
}

@Suite("WebKit path: cookies and redirects through the scheme-task driver")
struct SchemeTaskCookieTests {
    let env: ResolveEnv
    let loader: ResourceLoader
    let store = FakeCookieStore(now: Date())

    init() throws {
        env = try ResolveEnv()
        try env.publish("1.0.0")
        try env.install("1.0.0")
        loader = ResourceLoader(resolver: try Resolver(root: env.root, schemes: ["app"]))
    }

    func driver(_ exchange: ScriptedExchange, cookies: Bool = true, follow: Bool = true) -> SchemeTaskDriver {
        SchemeTaskDriver(
            loader: loader, forwarder: Forwarder(network: .forward(scheme: "https"), exchange: exchange),
            delivery: DeliveryQueue(label: "test.cookies"), cookies: cookies ? CookieBridge(store: store) : nil,
            followsRedirects: follow)
    }

    @Test("an engine that follows redirects itself gets the 3xx with its Location; its cookie is stored all the same")
    func relayed() async throws {
        defer { env.cleanup() }
        let exchange = ScriptedExchange([
            "/api/login": (302, [("Location", "/api/home"), ("Set-Cookie", "sid=1; Path=/; HttpOnly")], "")
        ])
        let task = FakeTask(SchemeRequest(url: "app://sample-app/api/login", mainDocumentURL: "app://sample-app/"))
        driver(exchange, follow: false).start(task)
        #expect(await task.waitForEnd())
        #expect(task.head?.0 == 302 && task.head?.1["Location"] == "/api/home")
        #expect(exchange.sent.withLock { $0.count } == 1 && store.names == ["sid"])
    }

    @Test("a 302 that sets a cookie is followed: its cookie is stored before the answer and sent on the next hop")
    func redirect() async throws {
        defer { env.cleanup() }
        let exchange = ScriptedExchange([
            "/api/login": (302, [("Location", "/api/home"), ("Set-Cookie", "sid=1; Path=/; HttpOnly")], "moved"),
            "/api/home": (
                200, [("Content-Type", "text/plain"), ("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/")],
                "home"
            ),
        ])
        let d = driver(exchange)
        let task = FakeTask(SchemeRequest(url: "app://sample-app/api/login", mainDocumentURL: "app://sample-app/"))
        let storedAtHead = Mutex<[String]>([])
        task.onHead = { [store] _ in storedAtHead.withLock { $0 = store.names } }
        d.start(task)
        #expect(await task.waitForEnd())
        #expect(task.head?.0 == 200 && String(decoding: task.body, as: UTF8.self) == "home")
        #expect(task.head?.1["Set-Cookie"] == nil && task.head?.1["set-cookie"] == nil)
        #expect(storedAtHead.withLock { $0 } == ["sid", "a", "b"])
        #expect(
            exchange.sent.withLock { $0.map(\.url) } == [
                "https://app.example.com/api/login", "https://app.example.com/api/home",
            ])
        #expect(exchange.cookie(at: 0) == nil && exchange.cookie(at: 1) == "sid=1")
    }

    @Test("303, and 302 after a POST, continue as GET without the body; 307 keeps both")
    func methods() async throws {
        defer { env.cleanup() }
        let exchange = ScriptedExchange([
            "/api/a": (303, [("Location", "https://app.example.com/api/done")], ""),
            "/api/b": (307, [("Location", "/api/done")], ""),
            "/api/done": (200, [], "done"),
        ])
        let d = driver(exchange)
        for path in ["a", "b"] {
            let task = FakeTask(
                SchemeRequest(
                    method: .post, url: "app://sample-app/api/\(path)", headers: [("Content-Type", "text/plain")],
                    body: Data("payload".utf8)))
            d.start(task)
            #expect(await task.waitForEnd())
            #expect(task.head?.0 == 200)
        }
        let sent = exchange.sent.withLock { $0 }
        #expect(sent.map(\.method) == [.post, .get, .post, .post])
        #expect(sent[1].body == nil && !sent[1].headers.contains { $0.0 == "Content-Type" })
        #expect(sent[3].body == Data("payload".utf8))
    }

    @Test("a redirect loop fails the task after 10 redirects, naming it")
    func loop() async throws {
        defer { env.cleanup() }
        let exchange = ScriptedExchange(["/api/loop": (302, [("Location", "/api/loop")], "")])
        let task = FakeTask(SchemeRequest(url: "app://sample-app/api/loop"))
        driver(exchange).start(task)
        #expect(await task.waitForEnd())
        guard case .fail(let error) = task.last else {
            Issue.record("not failed: \(String(describing: task.last))")
            return
        }
        #expect(error.kind == .network && error.message.contains("more than 10 redirects"))
        #expect(exchange.sent.withLock { $0.count } == 11)
    }

    @Test("the page's document.cookie bridge: GET reads the script-visible cookies of the page's origin, POST sets one")
    func cookieEndpoint() async throws {
        defer { env.cleanup() }
        _ = await CookieBridge(store: store).incoming(
            [("Set-Cookie", "sid=1; Path=/; HttpOnly"), ("Set-Cookie", "theme=dark; Path=/")],
            from: "https://app.example.com/")
        let d = driver(ScriptedExchange([:]))
        let page = "app%3A%2F%2Fsample-app%2Findex.html"
        let set = FakeTask(
            SchemeRequest(
                method: .post, url: "app://sample-app/.larder/cookies?page=\(page)",
                headers: [("X-Larder-Cookies", "1"), ("Origin", "app://sample-app")], body: Data("x=1; Path=/".utf8)))
        d.start(set)
        #expect(await set.waitForEnd())
        #expect(set.head?.0 == 200)
        let get = FakeTask(
            SchemeRequest(url: "app://sample-app/.larder/cookies?page=\(page)", headers: [("X-Larder-Cookies", "1")]))
        d.start(get)
        #expect(await get.waitForEnd())
        #expect(get.head?.0 == 200 && String(decoding: get.body, as: UTF8.self) == "theme=dark; x=1")
        #expect(store.jar.withLock { $0 }.first { $0.name == "x" }?.domain == "app.example.com")
    }

    @Test("without a bridge, answers' Set-Cookie fields are dropped, never joined into one")
    func noBridge() async throws {
        defer { env.cleanup() }
        let exchange = ScriptedExchange([
            "/api/x": (200, [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Two", "1"), ("X-Two", "2")], "ok")
        ])
        let task = FakeTask(SchemeRequest(url: "app://sample-app/api/x"))
        driver(exchange, cookies: false).start(task)
        #expect(await task.waitForEnd())
        #expect(task.head?.1.keys.contains { $0.lowercased() == "set-cookie" } == false)
        #expect(task.head?.1["X-Two"] == "1, 2")
        #expect(store.names.isEmpty)
    }
}
