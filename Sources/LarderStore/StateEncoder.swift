import Foundation
import LarderCore

/// Encodes `state.json` for one open sandbox, encoding again only the packages whose state
/// changed since its last write: the state grows with the package count, and a sync that
/// changes one package of 10,000 spent most of each write encoding the 9,999 others.
///
/// The document is compact JSON with sorted keys: the top-level members as `JSONEncoder` writes
/// them, and in `packages` one member per package, in the order of their ids, each the
/// encoding of that package's state alone. A package's bytes are kept with the value they were
/// encoded from and reused while the package's state is equal to it, so the bytes written
/// depend only on the state — never on what was written before (`StateEncoderTests`). "Equal"
/// is `PackageState`'s `==`, under which two versions differing only in build metadata are
/// equal; no change of the store alters a version alone (an activation also appends history).
final class StateEncoder {
    /// One package's member of `packages`: `"id":{…}`, and the state it encodes.
    private struct Member {
        let state: PackageState
        let bytes: Data
    }

    private var members: [String: Member] = [:]

    /// How many packages the last `encode` encoded (the others' bytes were reused).
    private(set) var lastEncodedCount = 0

    /// The bytes of `state.json` for `state`.
    func encode(_ state: SandboxState) throws -> Data {
        var shell = state
        shell.packages = [:]
        let outer = try ManifestCoding.encode(shell, compact: true)
        // `"packages":{}` occurs once: the same characters inside a string value would have
        // their quotes escaped.
        let marker = Data(#""packages":{}"#.utf8)
        guard let at = outer.range(of: marker), outer[at.upperBound...].range(of: marker) == nil else {
            throw EncodingError.invalidValue(
                state, .init(codingPath: [], debugDescription: "state.json's packages member is not where expected"))
        }
        let gone = members.keys.filter { state.packages[$0] == nil }
        for key in gone { members[key] = nil }
        var encoded = 0
        var out = Data()
        out.reserveCapacity(outer.count + members.values.reduce(0) { $0 + $1.bytes.count + 1 } + 1024)
        out.append(outer[..<at.lowerBound])
        out.append(contentsOf: Array(#""packages":{"#.utf8))
        for (n, key) in state.packages.keys.sorted().enumerated() {
            guard let package = state.packages[key] else { continue }
            let member: Member
            if let kept = members[key], kept.state == package {
                member = kept
            } else {
                var bytes = try Self.fragment(key)
                bytes.append(UInt8(ascii: ":"))
                bytes.append(try Self.fragment(package))
                member = Member(state: package, bytes: bytes)
                members[key] = member
                encoded += 1
            }
            if n > 0 { out.append(UInt8(ascii: ",")) }
            out.append(member.bytes)
        }
        out.append(UInt8(ascii: "}"))
        out.append(outer[at.upperBound...])
        lastEncodedCount = encoded
        return out
    }

    /// `value` as compact JSON, without the document's final newline.
    private static func fragment<T: Encodable>(_ value: T) throws -> Data {
        var data = try ManifestCoding.encode(value, compact: true)
        if data.last == 0x0A { data.removeLast() }
        return data
    }
}
