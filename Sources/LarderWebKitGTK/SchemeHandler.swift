import CWebKitGTK
import Foundation
import Larder
import LarderFileSystem

/// WebKitGTK's custom URI schemes over a `SchemeTaskDriver`: each request of a registered scheme
/// (`larder:` and the app's own) becomes a `SchemeTask` the driver answers. Schemes are
/// registered secure and CORS-enabled, as an app registers them on Apple (`WKURLSchemeHandler`).
///
/// A response's body reaches WebKit through a pipe WebKit reads as a `GInputStream`: the head
/// goes on the main loop, body chunks are written on a queue of the task's own, and a closed
/// read end (WebKit cancelled the load) stops the task.
public final class GTKSchemeHandler: @unchecked Sendable {
    // @unchecked: its state is set up on the main loop before any request arrives.
    /// Answers every request.
    public let driver: SchemeTaskDriver

    /// A handler over `driver`; `register` binds it to a web context's schemes.
    public init(driver: SchemeTaskDriver) {
        self.driver = driver
        // A write to a pipe whose reader went away must fail (EPIPE), not end the process.
        signal(SIGPIPE, SIG_IGN)
    }

    /// Registers `schemes` with `context` (a `WebKitWebContext`), served by this handler.
    public func register(schemes: [String], in context: OpaquePointer) {
        let security = webkit_web_context_get_security_manager(context)
        for scheme in schemes {
            let box = Unmanaged.passRetained(self).toOpaque()
            webkit_web_context_register_uri_scheme(
                context, scheme,
                { request, data in
                    guard let request, let data else { return }
                    Unmanaged<GTKSchemeHandler>.fromOpaque(data).takeUnretainedValue().start(request)
                }, box, { data in if let data { Unmanaged<GTKSchemeHandler>.fromOpaque(data).release() } })
            webkit_security_manager_register_uri_scheme_as_secure(security, scheme)
            webkit_security_manager_register_uri_scheme_as_cors_enabled(security, scheme)
        }
    }

    /// A request arrived (main loop): in plain values to the driver; one whose method is not an
    /// HTTP method token fails at once.
    func start(_ request: OpaquePointer) {
        let url = String(cString: webkit_uri_scheme_request_get_uri(request))
        let methodName = webkit_uri_scheme_request_get_http_method(request).map { String(cString: $0) } ?? "GET"
        guard let method = HTTPRequest.Method(methodName) else {
            let error = larder_scheme_error(1, "\(methodName.debugDescription) is not an HTTP method")
            webkit_uri_scheme_request_finish_error(request, error)
            g_error_free(error)
            return
        }
        var headers: [(String, String)] = []
        if let fields = webkit_uri_scheme_request_get_http_headers(request) {
            var iter = SoupMessageHeadersIter()
            soup_message_headers_iter_init(&iter, fields)
            var name: UnsafePointer<CChar>?
            var value: UnsafePointer<CChar>?
            while soup_message_headers_iter_next(&iter, &name, &value) != 0 {
                if let name, let value { headers.append((String(cString: name), String(cString: value))) }
            }
        }
        let shown = webkit_uri_scheme_request_get_web_view(request).flatMap { webkit_web_view_get_uri($0) }
        let main = shown.map { String(cString: $0) }
        let scheme = SchemeRequest(
            method: method, url: url, headers: headers, body: Self.body(of: request), isNavigation: main == url,
            mainDocumentURL: main)
        driver.start(GTKSchemeTask(request, scheme, driver: driver))
    }

    /// The request's body (POST, PUT), read whole: WebKit hands it over in memory.
    static func body(of request: OpaquePointer) -> Data? {
        guard let stream = webkit_uri_scheme_request_get_http_body(request) else { return nil }
        defer { g_object_unref(stream) }
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes {
                g_input_stream_read(stream, $0.baseAddress, gsize($0.count), nil, nil)
            }
            guard n > 0 else { break }
            out.append(contentsOf: buffer[0..<n])
        }
        return out
    }
}

/// One WebKitGTK scheme request as the driver sees it.
final class GTKSchemeTask: SchemeTask, @unchecked Sendable {
    // @unchecked: `headSent` is touched on the driver's delivery queue only, `fd` on `writer`
    // only, and the request (referenced until it is finished) on the main loop only.
    let request: OpaquePointer
    let schemeRequest: SchemeRequest
    weak var driver: SchemeTaskDriver?
    private let writer = DispatchQueue(label: "larder.webkitgtk.body")
    private var fd: FileDescriptor?
    /// Body bytes WebKit took (on `writer`).
    private var written = 0
    private var headSent = false

    init(_ request: OpaquePointer, _ schemeRequest: SchemeRequest, driver: SchemeTaskDriver) {
        g_object_ref(UnsafeMutableRawPointer(request))
        self.request = request
        self.schemeRequest = schemeRequest
        self.driver = driver
    }

    /// A body of at most this many bytes (its length known from the head) is gathered and handed
    /// to WebKit whole, from memory, with the head: one hop to the main loop, no pipe, no writer.
    static let wholeBodyLimit = 256 << 10
    /// The head and body of a small response while it is gathered (on the delivery queue).
    private var gathering: (head: SchemeResponseHead, length: Int, body: Data)?

    func didReceive(_ head: SchemeResponseHead) {
        let bodyless = schemeRequest.method == .head || head.status == 204 || head.status == 304
        let length =
            bodyless
            ? 0 : head.headers.first { $0.key.lowercased() == "content-length" }.flatMap { Int($0.value) } ?? -1
        if (0...Self.wholeBodyLimit).contains(length) {
            headSent = true
            gathering = (head, length, Data(capacity: length))
            return
        }
        let ends: (read: FileDescriptor, write: FileDescriptor)
        do { ends = try SystemCalls.pipe() } catch {
            return didFail(SchemeTaskError(.unreadable, "no pipe for the body: \(error)"))
        }
        headSent = true
        writer.async { self.fd = ends.write }
        let read = ends.read.rawValue
        respond(head, length: length) { g_unix_input_stream_new(read, 1) }
    }

    /// Hands WebKit the response: `head`, and the body `stream` makes (on the main loop).
    private func respond(
        _ head: SchemeResponseHead, length: Int, stream: @escaping @Sendable () -> UnsafeMutablePointer<GInputStream>?
    ) {
        let request = MainLoopBound(self.request)
        GLibMain.async {
            let stream = stream()
            let response = webkit_uri_scheme_response_new(stream, length)
            webkit_uri_scheme_response_set_status(response, UInt32(head.status), nil)
            let fields = soup_message_headers_new(SOUP_MESSAGE_HEADERS_RESPONSE)
            for (name, value) in head.headers {
                if name.lowercased() == "content-type" { webkit_uri_scheme_response_set_content_type(response, value) }
                soup_message_headers_append(fields, name, value)
            }
            webkit_uri_scheme_response_set_http_headers(response, fields)
            webkit_uri_scheme_request_finish_with_response(request.value, response)
            g_object_unref(UnsafeMutableRawPointer(response))
            g_object_unref(UnsafeMutableRawPointer(stream))
            g_object_unref(UnsafeMutableRawPointer(request.value))
        }
    }

    func didReceive(_ data: Data) {
        if gathering != nil {
            gathering?.body.append(data)
            return
        }
        writer.async { [self] in
            guard let fd else { return }
            do {
                try SystemCalls.writeAll(fd, contentsOf: data, path: Self.pipePath)
                written += data.count
            } catch {
                // WebKit closed its end (EPIPE): the load was cancelled.
                closeBody()
                driver?.stop(self)
                let r = schemeRequest
                driver?.log?("\(r.method) \(r.url) cancelled by WebKit after \(written)B of the body")
            }
        }
    }

    func didFinish() {
        if let (head, length, body) = gathering {
            gathering = nil
            let bytes = MainLoopBound(body.withUnsafeBytes { g_bytes_new($0.baseAddress, gsize($0.count)) })
            respond(head, length: length) {
                defer { g_bytes_unref(bytes.value) }
                return g_memory_input_stream_new_from_bytes(bytes.value)
            }
            return
        }
        writer.async { [self] in closeBody() }
    }

    /// Closes the body's end of the pipe (on `writer`): WebKit reads the end of the body.
    private func closeBody() {
        if let fd { try? SystemCalls.close(fd, path: Self.pipePath) }
        fd = nil
    }

    static let pipePath: FilePath = "(pipe to WebKit)"

    func didFail(_ error: SchemeTaskError) {
        if gathering != nil {
            // Nothing of a gathered response went to WebKit: it gets the error instead.
            gathering = nil
            headSent = false
        }
        guard !headSent else {
            // The head went out: the body ends short (WebKit sees fewer bytes than announced).
            return didFinish()
        }
        let request = MainLoopBound(self.request)
        let code: Int32 =
            switch error.kind {
            case .badURL: 1
            case .noLocalCopy: 2
            case .network: 3
            case .unreadable: 4
            }
        let message = error.message
        GLibMain.async {
            let e = larder_scheme_error(code, message)
            webkit_uri_scheme_request_finish_error(request.value, e)
            g_error_free(e)
            g_object_unref(UnsafeMutableRawPointer(request.value))
        }
    }
}
