import Foundation
import HTTPTypes

/// A request as a scheme task carries it (WebKit's `URLRequest`, in plain values).
public struct SchemeRequest: Sendable {
    /// The HTTP method.
    public var method: HTTPRequest.Method
    /// The URL as the page asked for it.
    public var url: String
    /// Header fields in order.
    public var headers: [(String, String)]
    /// The request body, if any.
    public var body: Data?
    /// Whether it loads a main frame's document (WebKit: `mainDocumentURL == url`): the web
    /// view's pins are renewed before it is answered.
    public var isNavigation: Bool
    /// The URL of the top-level document the request is made for, as the engine says (WebKit's
    /// `mainDocumentURL`; WebKitGTK: the view's URI), when known: the site the cookie bridge and
    /// SameSite judge the request by.
    public var mainDocumentURL: String?

    /// Creates one.
    public init(
        method: HTTPRequest.Method = .get, url: String, headers: [(String, String)] = [], body: Data? = nil,
        isNavigation: Bool = false, mainDocumentURL: String? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.isNavigation = isNavigation
        self.mainDocumentURL = mainDocumentURL
    }

    /// A request as an engine hands it over (`URLRequest`'s parts: a method name, nil for GET;
    /// the URL; the fields; the body; the main document's URL, equal to `url` for a navigation).
    /// Nil when the method is not an HTTP method token (fetch and XMLHttpRequest send only tokens).
    public init?(methodName: String?, url: URL?, fields: [String: String]?, body: Data?, mainDocumentURL: URL?) {
        guard let method = HTTPRequest.Method(methodName ?? "GET") else { return nil }
        self.init(
            method: method, url: url?.absoluteString ?? "", headers: (fields ?? [:]).map { ($0.key, $0.value) },
            body: body, isNavigation: url != nil && mainDocumentURL == url,
            mainDocumentURL: mainDocumentURL?.absoluteString)
    }

    /// A request as an engine hands it over (`URLRequest`, made `EngineRequest` by the glue).
    /// Nil when its method is not an HTTP method token.
    public init?(_ r: some EngineRequest) {
        self.init(
            methodName: r.httpMethod, url: r.url, fields: r.allHTTPHeaderFields, body: r.httpBody,
            mainDocumentURL: r.mainDocumentURL)
    }

    /// The value of a header field (case-insensitive name).
    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// The parts of an engine's request the driver reads: `URLRequest`'s, which WebKit's glue
/// declares it has (`extension URLRequest: EngineRequest {}`).
public protocol EngineRequest {
    /// The method name; nil for GET.
    var httpMethod: String? { get }
    /// The URL.
    var url: URL? { get }
    /// The header fields.
    var allHTTPHeaderFields: [String: String]? { get }
    /// The body, if any.
    var httpBody: Data? { get }
    /// The main document's URL (equal to `url` for a navigation).
    var mainDocumentURL: URL? { get }
}

/// A response head for a scheme task.
public struct SchemeResponseHead: Sendable, Equatable {
    /// The HTTP status.
    public var status: Int
    /// Header fields in order.
    public var headers: [String: String]
    /// The URL the response answers.
    public var url: String

    /// Creates one.
    public init(status: Int, headers: [String: String], url: String) {
        self.status = status
        self.headers = headers
        self.url = url
    }
}

/// Why a scheme task failed.
public struct SchemeTaskError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure, for mapping to the platform's error codes.
    public enum Kind: Sendable, Equatable {
        /// Not a URL.
        case badURL
        /// Nothing local serves it and it cannot go to the network (offline, no route, a loop).
        case noLocalCopy
        /// The network did not answer, or failed mid-way.
        case network
        /// A local file could not be read to its end.
        case unreadable
    }

    /// The kind.
    public let kind: Kind
    /// What went wrong, for a person.
    public let message: String

    /// Creates one.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The message.
    public var description: String { message }

    /// As a `URLError` for the engine (the message as its description).
    public var urlError: URLError {
        let code: URLError.Code =
            switch kind {
            case .badURL: .badURL
            case .noLocalCopy: .fileDoesNotExist
            case .network: .cannotConnectToHost
            case .unreadable: .cannotDecodeRawData
            }
        return URLError(code, userInfo: [NSLocalizedDescriptionKey: message])
    }
}

/// What the driver calls on a task: `WKURLSchemeTask`'s calls, as a protocol the WebKit glue
/// implements over the real task and tests implement with a fake.
public protocol SchemeTask: AnyObject, Sendable {
    /// What identifies the task between `start` and `stop` (a wrapper returns its WebKit task's).
    var taskIdentity: ObjectIdentifier { get }
    /// The request the task carries.
    var schemeRequest: SchemeRequest { get }
    /// The response head (once, first).
    func didReceive(_ head: SchemeResponseHead)
    /// A chunk of the body.
    func didReceive(_ data: Data)
    /// The end of the body.
    func didFinish()
    /// The task failed (instead of `didFinish`).
    func didFail(_ error: SchemeTaskError)
}

extension SchemeTask {
    /// The object's own identity.
    public var taskIdentity: ObjectIdentifier { ObjectIdentifier(self) }
}

/// Where a driver's calls to tasks run, one at a time, together with `stop`: WebKit's main
/// thread (`.main`), or a serial queue of one's own (tests, other hosts). Running on it already,
/// a call runs inline.
public final class DeliveryQueue: Sendable {
    private let queue: DispatchQueue?
    private let key = DispatchSpecificKey<UInt8>()

    /// The main thread (WebKit calls `start` and `stop` there, and wants its task called there).
    public static let main = DeliveryQueue(queue: nil)

    /// A serial queue named `label`.
    public convenience init(label: String) {
        self.init(queue: DispatchQueue(label: label))
    }

    private init(queue: DispatchQueue?) {
        self.queue = queue
        queue?.setSpecific(key: key, value: 1)
    }

    /// Runs `body` on the queue and waits for it.
    public func sync<T>(_ body: () -> T) -> T {
        guard let queue else { return Thread.isMainThread ? body() : DispatchQueue.main.sync(execute: body) }
        return DispatchQueue.getSpecific(key: key) == 1 ? body() : queue.sync(execute: body)
    }
}
