import Foundation
import LarderCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

extension FaultOrigin {
    // MARK: serving

    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, Never>

    func serve(_ connection: Connection) async {
        let channel = connection.channel
        let local = channel.localAddress?.ipAddress ?? "?"
        open.withLock { $0[ObjectIdentifier(channel)] = channel }
        defer { _ = open.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) } }
        try? await connection.executeThenClose { inbound in
            var head: HTTPRequestHead?
            var body = Data()
            for try await part in inbound {
                switch part {
                case .head(let h):
                    head = h
                    body = Data()
                case .body(let b):
                    body.append(contentsOf: b.readableBytesView)
                case .end:
                    guard let h = head else { continue }
                    head = nil
                    let keepOpen = try await respond(to: h, body: body, local: local, writer: Writer(channel: channel))
                    if !keepOpen || !h.isKeepAlive { return }
                }
            }
        }
    }

    /// Writes raw bytes straight to the connection (no HTTP encoder), each write awaited until
    /// the kernel has it: what a fault says was sent before a close was sent.
    struct Writer {
        let channel: any NIOCore.Channel

        func head(_ status: Int, _ fields: [(String, String)]) async throws {
            var text = "HTTP/1.1 \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)\r\n"
            for (k, v) in fields + [("X-Origin", "fault-origin")] { text += "\(k): \(v)\r\n" }
            text += "\r\n"
            try await channel.writeAndFlush(ByteBuffer(string: text))
        }

        func body<C: Collection<UInt8>>(_ bytes: C) async throws {
            guard !bytes.isEmpty else { return }
            try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
        }

        /// Ends the connection now: a TCP reset when `reset`, else an orderly close.
        func end(reset: Bool) async {
            if reset, let options = channel as? SocketOptionProvider {
                try? await options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
            }
            try? await channel.close()
        }

        /// Waits up to `seconds`, or until the client closes the connection.
        func wait(_ seconds: Double) async {
            let until = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
            while ContinuousClock.now < until, channel.isActive {
                do { try await Task.sleep(for: .milliseconds(20)) } catch { return }
            }
        }
    }

    func pick(_ path: String, hasRange: Bool) -> Fault? {
        state.withLock { s in
            for i in s.rules.indices {
                let r = s.rules[i]
                guard r.matches(path), r.left.map({ $0 > 0 }) ?? true, !r.onlyRange || hasRange else {
                    continue
                }
                if let left = r.left { s.rules[i].left = left - 1 }
                s.rules[i].applied += 1
                return r.fault
            }
            return nil
        }
    }

    func log(_ r: Request) -> Int {
        state.withLock {
            $0.lastID += 1
            $0.log.append((id: $0.lastID, request: r))
            return $0.lastID
        }
    }

    func update(_ id: Int, sent: Int) {
        state.withLock { s in
            if let i = s.log.lastIndex(where: { $0.id == id }) { s.log[i].request.sent = sent }
        }
    }

    /// One request as the origin reads it, and how to log its answer.
    struct Asked {
        let entry: Request
        let fields: [String: String]
        let path: String
        let local: String
        var target: String { entry.path }
        var isHead: Bool { entry.method == "HEAD" }
    }

    /// Logs the answer to `asked`; returns its index in the log.
    func answer(_ asked: Asked, _ status: Int, fault: Fault?, declared: Int?) -> Int {
        var entry = asked.entry
        entry.status = status
        entry.fault = fault
        entry.declared = declared
        return log(entry)
    }

    /// Answers one request; false when the connection must end.
    func respond(to head: HTTPRequestHead, body: Data, local: String, writer: Writer) async throws -> Bool {
        var fields: [String: String] = [:]
        for (name, value) in head.headers {
            let key = name.lowercased()
            fields[key] = fields[key].map { $0 + ", " + value } ?? value
        }
        let method = head.method.rawValue
        let target = head.uri
        let asked = Asked(
            entry: Request(
                host: local, method: method, path: target, headers: fields, body: body, status: 0, fault: nil,
                sent: 0, declared: nil, arrived: .now),
            fields: fields, path: String(target.prefix { $0 != "?" }), local: local)
        if let control, asked.path.hasPrefix("/__"), let (status, json) = await control(asked.entry) {
            try await writer.head(
                status,
                [
                    ("Content-Type", "application/json"), ("Content-Length", "\(json.count)"),
                    ("Cache-Control", "no-store"),
                ])
            try await writer.body(json)
            return true
        }
        if method != "GET" && method != "HEAD" {
            let echo = Data("\(method) \(target) body=".utf8) + body
            let id = answer(asked, 201, fault: nil, declared: echo.count)
            try await writer.head(201, [("Content-Type", "text/plain"), ("Content-Length", "\(echo.count)")])
            try await sendPiece(echo, log: id, sentBefore: 0, writer: writer)
            return true
        }
        let fault = pick(asked.path, hasRange: fields["range"] != nil)
        if try await answerInjected(asked, fault: fault, writer: writer) { return true }
        return try await answerFile(asked, fault: fault, writer: writer)
    }

    /// Answers an injected status or redirect; false when the fault is of another kind.
    func answerInjected(_ asked: Asked, fault: Fault?, writer: Writer) async throws -> Bool {
        let (local, target, path) = (asked.local, asked.target, asked.path)
        switch fault {
        case .status(let code, let retryAfter):
            let text = Data("fault-origin: injected \(code)\n".utf8)
            let id = answer(asked, code, fault: fault, declared: text.count)
            var h = [("Content-Type", "text/plain"), ("Content-Length", "\(text.count)")]
            if let retryAfter { h.append(("Retry-After", retryAfter)) }
            try await writer.head(code, h)
            if !asked.isHead {
                try await sendPiece(text, log: id, sentBefore: 0, writer: writer)
            }
            return true
        case .redirect, .redirectLoop, .redirectToOtherHost, .redirectToHTTP, .redirectSettingCookies:
            let location: String
            switch fault {
            case .redirectLoop: location = "\(scheme)://\(local):\(port)\(target)"
            case .redirectToOtherHost: location = "\(scheme)://\(otherHost ?? "127.0.0.2"):\(port)\(target)"
            case .redirectToHTTP: location = "http://\(local):\(port)\(target)"
            default:
                let n = state.withLock { s in s.rules.first { $0.fault == fault && $0.matches(path) } }
                location = "\(scheme)://\(local):\(port)\(path)?redirected=\(n?.applied ?? 1)"
            }
            let text = Data("moved\n".utf8)
            _ = answer(asked, 302, fault: fault, declared: text.count)
            var fields = [("Location", location), ("Content-Type", "text/plain"), ("Content-Length", "\(text.count)")]
            if case .redirectSettingCookies(let cookies) = fault { fields += cookies.map { ("Set-Cookie", $0) } }
            try await writer.head(302, fields)
            if !asked.isHead { try await writer.body(text) }
            return true
        default:
            return false
        }
    }

    /// Answers with the file the path names (404 without one), honouring If-None-Match, Range
    /// and If-Range, shaped by `fault`.
    func answerFile(_ asked: Asked, fault: Fault?, writer: Writer) async throws -> Bool {
        let fields = asked.fields
        var base: URL?
        if case .serveFrom(let directory) = fault { base = directory }
        guard let file = resolve(asked.path, under: base), let data = try? Data(contentsOf: file) else {
            let text = Data("not found\n".utf8)
            let id = answer(asked, 404, fault: fault, declared: text.count)
            try await writer.head(404, [("Content-Type", "text/plain"), ("Content-Length", "\(text.count)")])
            if !asked.isHead {
                try await sendPiece(text, log: id, sentBefore: 0, writer: writer)
            }
            return true
        }
        let tag = state.withLock { s in
            if let t = s.etags[file.path] { return t }
            let t = Self.etag(of: data)
            s.etags[file.path] = t
            return t
        }
        let size = data.count

        if fault == nil, let inm = fields["if-none-match"],
            inm.trimmingCharacters(in: .whitespaces) == "*"
                || inm.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }).contains(tag)
        {
            _ = answer(asked, 304, fault: nil, declared: nil)
            try await writer.head(304, [("ETag", tag), ("Cache-Control", "no-cache")])
            return true
        }

        var range = Self.parseRange(fields["range"], size: size)
        if range != nil, let ifRange = fields["if-range"], ifRange.trimmingCharacters(in: .whitespaces) != tag {
            range = nil  // the validator changed: the whole file
        }
        if fault == .ignoreRange { range = nil }
        if case .unsatisfiable = range {
            _ = answer(asked, 416, fault: fault, declared: 0)
            try await writer.head(416, [("Content-Range", "bytes */\(size)"), ("Content-Length", "0")])
            return true
        }
        let shaped = Self.shape(data, range: range, fault: fault)
        var h: [(String, String)] = [("Content-Type", Self.mime(asked.path))]
        if let declared = shaped.declared { h.append(("Content-Length", "\(declared)")) }
        h += [("ETag", tag), ("Accept-Ranges", "bytes"), ("Cache-Control", "no-cache")]
        if shaped.status == 206 {
            var total = size
            if case .badContentRange(_, let t?) = fault { total = t }
            h.append(
                ("Content-Range", "bytes \(shaped.start)-\(shaped.start + max(shaped.bytes.count, 1) - 1)/\(total)"))
        }
        let closes = Self.closes(fault)
        if closes { h.append(("Connection", "close")) }
        let id = answer(asked, shaped.status, fault: fault, declared: shaped.declared)
        try await writer.head(shaped.status, h)
        if asked.isHead { return !closes }
        return try await send(shaped.bytes, fault: fault, closes: closes, log: id, writer: writer)
    }

    /// Whether an answer shaped by `fault` ends its connection.
    static func closes(_ fault: Fault?) -> Bool {
        switch fault {
        case .truncate, .lengthMore, .lengthLess, .stall, .drip: true
        case .extra(_, let isDeclared): !isDeclared
        default: false
        }
    }

    /// The status, first byte, body and declared length of a file's answer: its range, and the
    /// body and length faults.
    static func shape(_ data: Data, range: ByteRange?, fault: Fault?) -> (
        status: Int, start: Int, bytes: Data, declared: Int?
    ) {
        let size = data.count
        var status = 200
        var start = 0
        var end = size - 1
        if case .bytes(let a, let b) = range {
            status = 206
            (start, end) = (a, b)
            if case .badContentRange(let shift, _) = fault {
                start = start + shift < size ? start + shift : 0
                end = max(end, start)
            }
        }
        var bytes = size == 0 ? Data() : data.subdata(in: start..<(end + 1))
        if case .extra(let n, _) = fault { bytes += Self.junk(n) }
        if case .flip(let at) = fault, !bytes.isEmpty {
            var off = at ?? bytes.count / 2
            if off < 0 { off += bytes.count }
            off = min(max(off, 0), bytes.count - 1)
            bytes[bytes.startIndex + off] ^= 0xFF
        }
        var declared: Int? = bytes.count
        switch fault {
        case .lengthMore(let by): declared = bytes.count + by
        case .lengthLess(let by): declared = max(0, bytes.count - by)
        case .extra(_, let isDeclared) where !isDeclared: declared = nil
        default: break
        }
        return (status, start, bytes, declared)
    }

    /// Sends a body as `fault` says (cut, stalled, dripped or whole); false when the connection
    /// must end.
    func send(_ bytes: Data, fault: Fault?, closes: Bool, log id: Int, writer: Writer) async throws -> Bool {
        switch fault {
        case .truncate(let after, let reset):
            let n = min(after ?? bytes.count / 2, bytes.count)
            try await sendPiece(bytes.prefix(n), log: id, sentBefore: 0, writer: writer)
            await writer.end(reset: reset)
            return false
        case .stall(let after, let seconds):
            let n = min(after, bytes.count)
            try await sendPiece(bytes.prefix(n), log: id, sentBefore: 0, writer: writer)
            await writer.wait(seconds)
            await writer.end(reset: false)
            return false
        case .drip(let piece, let every):
            var sent = 0
            while sent < bytes.count, !Task.isCancelled {
                let n = min(max(1, piece), bytes.count - sent)
                do {
                    let piece = bytes[(bytes.startIndex + sent)..<(bytes.startIndex + sent + n)]
                    try await sendPiece(piece, log: id, sentBefore: sent, writer: writer)
                } catch { break }
                sent += n
                if sent < bytes.count { try? await Task.sleep(for: every) }
            }
            await writer.end(reset: false)
            return false
        default:
            try await sendPiece(bytes, log: id, sentBefore: 0, writer: writer)
            if closes { await writer.end(reset: false) }
            return !closes
        }
    }

    /// Writes one piece of a body, its entry's `sent` counting it before the write: a client can
    /// hold the bytes (and a test read the log) before the write returns here. A failed write puts
    /// the count back.
    private func sendPiece(_ piece: Data, log id: Int, sentBefore: Int, writer: Writer) async throws {
        update(id, sent: sentBefore + piece.count)
        do { try await writer.body(piece) } catch {
            update(id, sent: sentBefore)
            throw error
        }
    }

    /// The file under the root (or `base`) for a URL path, or nil (no traversal, no directories);
    /// `/lanes/NAME/REST` is `/REST`.
    func resolve(_ path: String, under base: URL? = nil) -> URL? {
        guard let decoded = path.removingPercentEncoding, !decoded.contains("\0") else { return nil }
        var parts = decoded.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        if parts.count > 2, parts.first == "lanes", parts.dropFirst().first?.isEmpty == false {
            parts = parts.dropFirst(2)
        }
        guard !parts.isEmpty, !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else { return nil }
        let file = parts.reduce(base ?? root) { $0.appendingPathComponent(String($1)) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: file.path, isDirectory: &isDirectory), !isDirectory.boolValue
        else { return nil }
        return file
    }

    enum ByteRange: Equatable {
        case bytes(Int, Int)
        case unsatisfiable
    }

    /// One byte range (start, end inclusive); nil when absent or malformed.
    static func parseRange(_ header: String?, size: Int) -> ByteRange? {
        guard let header else { return nil }
        let text = header.replacingOccurrences(of: " ", with: "")
        guard text.hasPrefix("bytes=") else { return nil }
        let spec = text.dropFirst(6)
        let sides = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard sides.count == 2, !(sides[0].isEmpty && sides[1].isEmpty) else { return nil }
        if size == 0 { return .unsatisfiable }
        if sides[0].isEmpty {
            guard let n = Int(sides[1]) else { return nil }
            return n == 0 ? .unsatisfiable : .bytes(max(0, size - n), size - 1)
        }
        guard let start = Int(sides[0]) else { return nil }
        let end = sides[1].isEmpty ? size - 1 : Int(sides[1])
        guard let end else { return nil }
        if start >= size || end < start { return .unsatisfiable }
        return .bytes(start, min(end, size - 1))
    }

    static func junk(_ n: Int) -> Data { Data((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }) }

    static func mime(_ path: String) -> String {
        switch (path as NSString).pathExtension.lowercased() {
        case "json", "sig": "application/json"
        case "html": "text/html"
        case "txt": "text/plain"
        case "zip": "application/zip"
        default: "application/octet-stream"
        }
    }
}

extension FaultOrigin.Rule {
    /// Whether the rule's path covers `path` (the path itself when `exact`, else every path it prefixes).
    func matches(_ path: String) -> Bool { exact ? path == pathPrefix : path.hasPrefix(pathPrefix) }
}
