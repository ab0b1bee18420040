// The fault-injecting HTTP origin as a process, for scripts/integration/faults.py: LarderTestSupport's
// FaultOrigin over a directory, driven through its control endpoint.
//
// Usage: larder-fault-origin --root DIR [--host 127.0.0.1] [--other-host 127.0.0.2] [--port 0]
//                            [--lifetime 600] [--parent-pid PID] [--quiet]
//
// Prints `PORT <n>` on stdout once it listens (then notes on stderr). Serves the files under DIR
// as FaultOrigin does (ETag, 304, one byte range, If-Range; `/lanes/NAME/REST` served as `/REST`),
// on --host and, when it can take the same port there, on --other-host. The control endpoint
// (on --host only; the /__ paths are never faulted nor logged):
//
//     POST /__fault     a JSON rule, or a list of rules; answers {"ids": [...]}
//     GET  /__faults    the rules, each with "id", "applied" and "left" (-1: until reset)
//     POST /__reset     {"path-prefix": P} removes the rules and log entries under P (and a
//                       request under P still being answered); {} removes all
//     GET  /__log       [{"t","host","method","path","range","if-range","if-none-match","status",
//                       "fault","sent","declared"}...]; ?prefix=P filters
//     POST /__shutdown  stops the process
//
// A rule: {"path-prefix": P, "fault": NAME, "count": 1 (-1: until reset), "exact": false,
// "only-range": (true for range-ignore and bad-content-range), ...parameters}. The faults and
// their parameters: truncate (bytes), length-more and length-less (delta), range-ignore,
// bad-content-range (shift, total), flip (offset), drip (rate, bytes a second), stall (seconds),
// status (status, retry-after), redirect-loop, redirect-host, redirect, extra (extra, no-length),
// serve-from (dir). The process ends after --lifetime seconds, and within a second of
// --parent-pid disappearing.

import Foundation
import LarderTestSupport
import Synchronization

struct Options {
    var root = ""
    var host = "127.0.0.1"
    var otherHost = "127.0.0.2"
    var port = 0
    var lifetime = 600.0
    var parentPID: Int32 = 0
    var quiet = false
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("larder-fault-origin: \(message)\n".utf8))
    exit(64)
}

func parseOptions(_ args: [String]) -> Options {
    var o = Options()
    var rest = args[...]
    while let flag = rest.popFirst() {
        if flag == "--quiet" {
            o.quiet = true
            continue
        }
        guard let value = rest.popFirst() else { fail("\(flag) needs a value") }
        switch flag {
        case "--root": o.root = value
        case "--host": o.host = value
        case "--other-host": o.otherHost = value
        case "--port": o.port = Int(value) ?? -1
        case "--lifetime": o.lifetime = Double(value) ?? -1
        case "--parent-pid": o.parentPID = Int32(value) ?? -1
        default: fail("unknown option \(flag)")
        }
    }
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: o.root, isDirectory: &isDirectory), isDirectory.boolValue else {
        fail("--root \(o.root) is not a directory")
    }
    for h in [o.host, o.otherHost] where !h.isEmpty && !h.hasPrefix("127.") {
        fail("only loopback addresses (127.x.x.x) may be used: \(h)")
    }
    guard o.port >= 0, o.lifetime > 0, o.parentPID >= 0 else { fail("bad --port, --lifetime or --parent-pid") }
    return o
}

/// Whether notes are kept off stderr (--quiet).
let quietNotes = Mutex(false)

func note(_ message: String) {
    guard !quietNotes.withLock({ $0 }) else { return }
    FileHandle.standardError.write(Data("fault-origin: \(message)\n".utf8))
}

/// JSON text of a value made of dictionaries, arrays, strings, numbers, booleans and NSNull.
func json(_ value: Any) -> Data {
    let data = try? JSONSerialization.data(
        withJSONObject: value, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
    return (data ?? Data("null".utf8)) + Data("\n".utf8)
}

enum RuleError: Error {
    case invalid(String)
}

/// The FaultOrigin fault a JSON rule names, with the parameters it gives (the defaults otherwise).
func fault(_ spec: [String: Any]) throws -> FaultOrigin.Fault {
    func int(_ key: String, _ fallback: Int) -> Int { (spec[key] as? NSNumber)?.intValue ?? fallback }
    func number(_ key: String, _ fallback: Double) -> Double { (spec[key] as? NSNumber)?.doubleValue ?? fallback }
    switch spec["fault"] as? String {
    case "truncate": return .truncate(after: (spec["bytes"] as? NSNumber)?.intValue)
    case "length-more": return .lengthMore(by: int("delta", 100))
    case "length-less": return .lengthLess(by: int("delta", 100))
    case "range-ignore": return .ignoreRange
    case "bad-content-range":
        let total = (spec["total"] as? NSNumber)?.intValue
        return .badContentRange(shift: int("shift", total == nil ? 7 : 0), total: total)
    case "flip": return .flip(at: (spec["offset"] as? NSNumber)?.intValue)
    case "drip": return .drip(bytes: max(1, int("rate", 4)), every: .seconds(1))
    case "stall": return .stall(seconds: number("seconds", 120))
    case "status":
        let code = int("status", 500)
        let retry = spec["retry-after"].map { "\($0)" } ?? ([429, 503].contains(code) ? "1" : nil)
        return .status(code, retryAfter: retry)
    case "redirect-loop": return .redirectLoop
    case "redirect-host": return .redirectToOtherHost
    case "redirect": return .redirect
    case "extra": return .extra(int("extra", 64), declared: (spec["no-length"] as? Bool) != true)
    case "serve-from":
        var isDirectory: ObjCBool = false
        guard let dir = spec["dir"] as? String, FileManager.default.fileExists(atPath: dir, isDirectory: &isDirectory),
            isDirectory.boolValue
        else { throw RuleError.invalid("serve-from needs \"dir\", an existing directory") }
        return .serveFrom(URL(fileURLWithPath: dir))
    default:
        throw RuleError.invalid(
            "\"fault\" must be one of: bad-content-range, drip, extra, flip, length-less, length-more, range-ignore, "
                + "redirect, redirect-host, redirect-loop, serve-from, stall, status, truncate")
    }
}

/// The control endpoint over an origin, the rules' JSON kept as given to list them back.
final class Controller: Sendable {
    let specs = Mutex<[Int: Data]>([:])
    let origin = Mutex<FaultOrigin?>(nil)
    let started = (wall: Date(), clock: ContinuousClock.now)

    func handle(_ request: FaultOrigin.Request) async -> (status: Int, body: Data)? {
        guard let origin = origin.withLock({ $0 }) else { return (503, json(["error": "starting"])) }
        guard request.host == origin.host else { return (404, json(["error": "no control endpoint on this address"])) }
        let parts = request.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts[0])
        let body: Any?
        if request.body.isEmpty {
            body = nil
        } else if let parsed = try? JSONSerialization.jsonObject(with: request.body, options: [.fragmentsAllowed]) {
            body = parsed
        } else {
            return (400, json(["error": "the body is not JSON"]))
        }
        switch (request.method, path) {
        case ("POST", "/__fault"):
            let list = (body as? [Any]) ?? [body as Any]
            do { return (200, json(["ids": try list.map { try add($0, to: origin) }])) } catch RuleError.invalid(let m)
            {
                return (400, json(["error": m]))
            } catch { return (400, json(["error": "\(error)"])) }
        case ("GET", "/__faults"):
            return (200, json(rules(of: origin)))
        case ("POST", "/__reset"):
            let prefix = ((body as? [String: Any])?["path-prefix"] as? String) ?? ""
            origin.reset(under: prefix)
            return (200, json(["reset": prefix]))
        case ("GET", "/__log"):
            let query = parts.count > 1 ? String(parts[1]) : ""
            let prefix =
                URLComponents(string: "?" + query)?.queryItems?.first { $0.name == "prefix" }?.value ?? ""
            return (200, json(origin.requests(under: prefix).map(entry)))
        case ("POST", "/__shutdown"):
            Task {
                try? await Task.sleep(for: .milliseconds(200))
                exit(0)
            }
            return (200, json(["stopping": true]))
        default:
            return (404, json(["error": "unknown control request \(request.method) \(path)"]))
        }
    }

    func add(_ value: Any, to origin: FaultOrigin) throws -> Int {
        guard let spec = value as? [String: Any] else { throw RuleError.invalid("a rule is a JSON object") }
        guard let prefix = spec["path-prefix"] as? String, prefix.hasPrefix("/") else {
            throw RuleError.invalid("\"path-prefix\" must be a path starting with /")
        }
        guard !prefix.hasPrefix("/__") else { throw RuleError.invalid("the control endpoint cannot be faulted") }
        let count = spec["count"] == nil ? 1 : (spec["count"] as? NSNumber)?.intValue ?? 0
        guard count > 0 || count == -1 else {
            throw RuleError.invalid("\"count\" must be a positive integer, or -1 for until reset")
        }
        let id = origin.inject(
            try fault(spec), at: prefix, count: count == -1 ? nil : count, onlyRange: spec["only-range"] as? Bool,
            exact: (spec["exact"] as? Bool) == true)
        var kept = spec
        kept["count"] = count
        specs.withLock { $0[id] = json(kept) }
        note("rule \(id) added: \(String(decoding: json(kept), as: UTF8.self).filter { $0 != "\n" })")
        return id
    }

    /// The rules as given, with their "id", "applied" and "left".
    func rules(of origin: FaultOrigin) -> [[String: Any]] {
        let kept = specs.withLock { $0 }
        return origin.rules.map { rule in
            var r = kept[rule.id].flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] } ?? [:]
            r["id"] = rule.id
            r["applied"] = rule.applied
            r["left"] = rule.left ?? -1
            return r
        }
    }

    /// One log entry as JSON ("t": seconds since the epoch when it arrived).
    func entry(_ r: FaultOrigin.Request) -> [String: Any] {
        let t = started.wall.timeIntervalSince1970 + seconds(r.arrived - started.clock)
        let fault: Any =
            r.fault.map { f -> String in
                if case .status = f { return "status" }
                return f.description
            } ?? NSNull()
        return [
            "t": t, "host": r.host, "method": r.method, "path": r.path, "range": r.range ?? NSNull(),
            "if-range": r.ifRange ?? NSNull(), "if-none-match": r.ifNoneMatch ?? NSNull(), "status": r.status,
            "fault": fault, "sent": r.sent, "declared": r.declared.map { $0 as Any } ?? NSNull(),
        ]
    }
}

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

/// Whether `pid` still runs (a zombie does not; nor a parent we were taken away from).
func alive(_ pid: Int32, originalParent: Int32) -> Bool {
    if pid == originalParent && getppid() != pid { return false }
    if kill(pid, 0) != 0 && errno == ESRCH { return false }
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return true }
    return stat[stat.index(after: close)...].split(separator: " ").first != "Z"
}

let options = parseOptions(Array(CommandLine.arguments.dropFirst()))
quietNotes.withLock { $0 = options.quiet }
let originalParent = getppid()
let controller = Controller()
let origin: FaultOrigin
do {
    origin = try await FaultOrigin.start(
        serving: URL(fileURLWithPath: options.root).standardizedFileURL, host: options.host, port: options.port,
        otherHost: options.otherHost.isEmpty ? nil : options.otherHost, control: controller.handle)
} catch {
    fail("cannot listen on \(options.host):\(options.port): \(error)")
}
controller.origin.withLock { $0 = origin }
FileHandle.standardOutput.write(Data("PORT \(origin.port)\n".utf8))
note(
    "serving \(options.root) on http://\(origin.host):\(origin.port)/"
        + (origin.otherHost.map { " and http://\($0):\(origin.port)/" } ?? ""))
let end = ContinuousClock.now + .milliseconds(Int(options.lifetime * 1000))
while ContinuousClock.now < end {
    try? await Task.sleep(for: .milliseconds(500))
    if options.parentPID != 0 && !alive(options.parentPID, originalParent: originalParent) {
        note("parent \(options.parentPID) is gone; stopping")
        exit(0)
    }
}
note("lifetime over; stopping")
exit(0)
