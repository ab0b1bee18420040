/// Untrusted text made safe to put in a message: an archive's entry names, an index's fields, a
/// server's headers, a URL someone typed.
///
/// `quoted(_:)` puts the text in double quotes and escapes every character that a terminal or a
/// log viewer could act on or that could make the message lie about its own text: C0 controls
/// (ESC, BEL, CR, LF, NUL…), DEL, C1 controls (U+0080–U+009F, which some terminals take for CSI and
/// other escapes), the Unicode bidirectional controls (which reorder what is shown), the line and
/// paragraph separators, and the quote and backslash themselves. Escapes are written `\u{1B}`
/// (Swift's own spelling), so the message can be read back unambiguously. Bytes that were not
/// UTF-8 arrive here already as U+FFFD.
///
/// A text longer than `Quoting.maxQuotedBytes` (UTF-8) is cut there, at a character's end, and
/// its full size noted after the closing quote (`"abc…" (10485760 bytes in all)`): a hostile
/// 10 MB package id makes a short message, not a 10 MB one.
package func quoted(_ value: some CustomStringConvertible) -> String {
    let text = value.description
    let total = text.utf8.count
    var out = "\""
    out.reserveCapacity(min(total, Quoting.maxQuotedBytes) + 2)
    var taken = 0
    for scalar in text.unicodeScalars {
        taken += UTF8.width(scalar)
        if taken > Quoting.maxQuotedBytes { break }
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        default:
            Quoting.append(scalar, to: &out, escaping: Quoting.needsEscape(scalar))
        }
    }
    guard total > Quoting.maxQuotedBytes else { return out + "\"" }
    return out + "…\" (\(total) bytes in all)"
}

/// The character classes `quoted(_:)` escapes, shared with the CLI's last line of defence.
package enum Quoting {
    /// The most of an untrusted text `quoted(_:)` shows, in UTF-8 bytes.
    package static let maxQuotedBytes = 256

    /// Whether `scalar` must not reach a terminal or a log as itself.
    package static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        // Bidirectional embeddings, overrides and isolates; LRM, RLM, ALM.
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F, 0x061C: true
        // Line and paragraph separators.
        case 0x2028, 0x2029: true
        default: false
        }
    }

    /// A line of text made safe for a terminal without quoting it: every character
    /// `needsEscape` names except the tab is written `\u{…}`. The CLI passes every line it
    /// prints through this, so that no message, whatever it embeds, can move the cursor, retitle
    /// the window or hide text.
    package static func sanitizeLine(_ line: String) -> String {
        // Printable ASCII and tabs (a server's line per request): nothing to look at scalar by scalar.
        if line.utf8.allSatisfy({ ($0 >= 0x20 && $0 < 0x7F) || $0 == 0x09 }) { return line }
        guard line.unicodeScalars.contains(where: { $0 != "\t" && needsEscape($0) }) else { return line }
        var out = ""
        out.reserveCapacity(line.utf8.count + 8)
        for scalar in line.unicodeScalars { append(scalar, to: &out, escaping: scalar != "\t" && needsEscape(scalar)) }
        return out
    }

    /// Appends `scalar` to `out`, as itself or as `\u{…}`.
    static func append(_ scalar: Unicode.Scalar, to out: inout String, escaping: Bool) {
        if escaping {
            out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
        } else {
            out.unicodeScalars.append(scalar)
        }
    }
}

/// Byte counts for people, in one spelling everywhere: `512 B`, `12.3 MiB`.
package enum ByteText {
    /// `n` in the largest binary unit that keeps it at or above 1 (one decimal).
    package static func format(_ n: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = Double(n)
        var u = 0
        while v >= 1024, u < units.count - 1 {
            v /= 1024
            u += 1
        }
        return u == 0 ? "\(n) B" : String(format: "%.1f", v) + " " + units[u]
    }
}
