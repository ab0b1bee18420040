import Foundation

/// A document of the repository format (manifests §2): read strictly, so that a key twice in one
/// object — which Foundation's decoder resolves to the first value and most other readers to the
/// last — is refused instead of read one way here and another elsewhere.
package protocol RepositoryDocument {}

/// Finds a key that appears twice in one object of a JSON text. Foundation's decoders do not
/// report duplicates, so this scan runs before them over the same bytes: strings (with their
/// escapes decoded, so `"a"` and `"\u0061"` are the same key), objects and arrays; numbers and
/// literals are skipped. It does not judge validity — on text that is not JSON it stops where it
/// can, and the decoder that follows reports the error.
package enum DuplicateKeys {
    /// The first duplicate: the key, and where its object is (`/packages/3`, `/` for the top).
    package static func first(in data: Data) -> (key: String, path: String)? {
        data.withUnsafeBytes { raw in
            var scan = Scan(bytes: raw.bindMemory(to: UInt8.self))
            return scan.run()
        }
    }

    private enum Frame {
        case object(keys: Set<String>, expectingKey: Bool, key: String?)
        case array(index: Int)
    }

    private struct Scan {
        let bytes: UnsafeBufferPointer<UInt8>
        var i = 0
        var stack: [Frame] = []

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        mutating func run() -> (key: String, path: String)? {
            while i < bytes.count {
                let b = bytes[i]
                i += 1
                switch b {
                case UInt8(ascii: "{"): stack.append(.object(keys: [], expectingKey: true, key: nil))
                case UInt8(ascii: "["): stack.append(.array(index: 0))
                case UInt8(ascii: "}"), UInt8(ascii: "]"): _ = stack.popLast()
                case UInt8(ascii: ","):
                    switch stack.last {
                    case .object(let keys, _, let key):
                        stack[stack.count - 1] = .object(keys: keys, expectingKey: true, key: key)
                    case .array(let n): stack[stack.count - 1] = .array(index: n + 1)
                    case nil: break
                    }
                case UInt8(ascii: ":"):
                    if case .object(let keys, _, let key) = stack.last {
                        stack[stack.count - 1] = .object(keys: keys, expectingKey: false, key: key)
                    }
                case UInt8(ascii: "\""):
                    guard let text = string() else { return nil }
                    guard case .object(_, true, _)? = stack.last, case .object(var keys, _, _) = stack.removeLast()
                    else { continue }
                    // Taken off the stack, the set has one owner and grows in place.
                    let seen = !keys.insert(text).inserted
                    stack.append(.object(keys: keys, expectingKey: false, key: text))
                    if seen { return (text, path()) }
                default: continue
                }
            }
            return nil
        }

        /// Where the innermost object is, as a JSON pointer.
        func path() -> String {
            var parts: [String] = []
            for frame in stack.dropLast() {
                switch frame {
                case .object(_, _, let key): parts.append(key ?? "")
                case .array(let n): parts.append(String(n))
                }
            }
            return "/" + parts.joined(separator: "/")
        }

        /// The string that starts at `i` (just after its opening quote), decoded; nil when the
        /// text ends inside it.
        mutating func string() -> String? {
            let start = i
            var escaped = false
            while i < bytes.count {
                let b = bytes[i]
                if b == UInt8(ascii: "\"") {
                    let raw = UnsafeBufferPointer(rebasing: bytes[start..<i])
                    i += 1
                    return escaped ? Self.unescape(raw) : String(decoding: raw, as: UTF8.self)
                }
                if b == UInt8(ascii: "\\") {
                    escaped = true
                    i += 1
                }
                i += 1
            }
            return nil
        }

        /// A string's text with its JSON escapes decoded (a lone surrogate becomes U+FFFD).
        static func unescape(_ raw: UnsafeBufferPointer<UInt8>) -> String {
            var out = [UInt8]()
            out.reserveCapacity(raw.count)
            var units: [UInt16] = []
            func flushUnits() {
                guard !units.isEmpty else { return }
                out.append(contentsOf: Array(String(decoding: units, as: UTF16.self).utf8))
                units.removeAll()
            }
            var j = 0
            while j < raw.count {
                let b = raw[j]
                guard b == UInt8(ascii: "\\"), j + 1 < raw.count else {
                    flushUnits()
                    out.append(b)
                    j += 1
                    continue
                }
                let e = raw[j + 1]
                j += 2
                if e == UInt8(ascii: "u"), j + 4 <= raw.count,
                    let unit = UInt16(
                        String(decoding: UnsafeBufferPointer(rebasing: raw[j..<(j + 4)]), as: UTF8.self), radix: 16)
                {
                    units.append(unit)
                    j += 4
                    continue
                }
                flushUnits()
                switch e {
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                default: out.append(e)  // \" \\ \/ (and anything else, as itself)
                }
            }
            flushUnits()
            return String(decoding: out, as: UTF8.self)
        }
    }
}
