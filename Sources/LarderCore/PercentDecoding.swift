/// Strict percent-decoding, once: every `%` must start two hex digits, and the result must be
/// UTF-8. `refuse` sees each byte an escape produced and may name a reason to refuse it (the
/// resolver refuses encoded `/`, `\` and NUL; literal ones are the caller's business).
package enum PercentDecoding {
    /// The decoded text, or why it was refused.
    package static func decode(_ text: String, refuse: (UInt8) -> String? = { _ in nil }) -> Result<String, Refusal> {
        let u = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(u.count)
        var i = 0
        while i < u.count {
            guard u[i] == UInt8(ascii: "%") else {
                out.append(u[i])
                i += 1
                continue
            }
            guard i + 2 < u.count, let h = hex(u[i + 1]), let l = hex(u[i + 2]) else {
                return .failure(Refusal(message: "a bad percent escape"))
            }
            let d = h << 4 | l
            if let why = refuse(d) { return .failure(Refusal(message: why)) }
            out.append(d)
            i += 3
        }
        guard let s = String(validating: out, as: UTF8.self) else {
            return .failure(Refusal(message: "not UTF-8 once decoded"))
        }
        return .success(s)
    }

    /// Why a text was refused.
    package struct Refusal: Error, Equatable, Sendable {
        /// What was wrong, as a noun phrase for a sentence (`a bad percent escape`, `an encoded slash`).
        package let message: String
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }
}
