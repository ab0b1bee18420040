import Foundation
import LarderFileSystem
import SystemPackage

/// The Public Suffix List (publicsuffix.org): which domains are suffixes under which anyone may
/// register names (`com`, `co.uk`, `github.io`), so that a cookie's `Domain` attribute cannot
/// name one, and which part of a host is its registrable domain (the site SameSite compares).
///
/// Read from the list's own text format (rules, `*.` wildcards, `!` exceptions, `//` comments).
/// On Linux, Debian's `publicsuffix` package keeps it at `debianPath` (updated with the system);
/// an app on Apple platforms bundles `public_suffix_list.dat` and passes its path, refreshing it
/// with each release of the app. With no list (`strict`), no `Domain` attribute other than the
/// host itself is accepted and every host is its own site.
public struct PublicSuffixList: Sendable {
    private let rules: Set<String>
    private let wildcards: Set<String>
    private let exceptions: Set<String>
    /// Whether a list was read (false: `strict`).
    public let isLoaded: Bool

    /// Where Debian's `publicsuffix` package installs the list.
    package static let debianPath = "/usr/share/publicsuffix/public_suffix_list.dat"

    /// No list: every domain but a host itself counts as a public suffix.
    public static let strict = PublicSuffixList(rules: [], wildcards: [], exceptions: [], isLoaded: false)

    /// The list at `debianPath`, else `strict`; read once.
    public static let system: PublicSuffixList = (try? PublicSuffixList(contentsOf: debianPath)) ?? .strict

    private init(rules: Set<String>, wildcards: Set<String>, exceptions: Set<String>, isLoaded: Bool) {
        self.rules = rules
        self.wildcards = wildcards
        self.exceptions = exceptions
        self.isLoaded = isLoaded
    }

    /// The list in the file at `path`.
    public init(contentsOf path: String) throws {
        try self.init(text: String(decoding: AtomicFile.read(FilePath(path), limit: 16 << 20), as: UTF8.self))
    }

    /// The list in `text` (the list's file format); throws when it holds no rule.
    public init(text: String) throws {
        var rules = Set<String>()
        var wildcards = Set<String>()
        var exceptions = Set<String>()
        for line in text.split(whereSeparator: \.isNewline) {
            guard let token = line.split(whereSeparator: \.isWhitespace).first, !token.hasPrefix("//") else {
                continue
            }
            let rule = token.lowercased()
            if rule.hasPrefix("!") {
                exceptions.insert(String(rule.dropFirst()))
            } else if rule.hasPrefix("*.") {
                wildcards.insert(String(rule.dropFirst(2)))
            } else {
                rules.insert(rule)
            }
        }
        guard !rules.isEmpty else { throw CocoaError(.fileReadCorruptFile) }
        self.init(rules: rules, wildcards: wildcards, exceptions: exceptions, isLoaded: true)
    }

    /// Whether `domain` (lower case, no leading dot) is a public suffix: a rule, a name a
    /// wildcard covers (not an exception), or a single label (the list's implicit `*` rule).
    package func isPublicSuffix(_ domain: String) -> Bool {
        let d = domain.hasSuffix(".") ? String(domain.dropLast()) : domain
        guard isLoaded else { return true }
        if exceptions.contains(d) { return false }
        if rules.contains(d) { return true }
        guard let dot = d.firstIndex(of: ".") else { return true }
        return wildcards.contains(String(d[d.index(after: dot)...]))
    }

    /// The registrable domain of `host`: its public suffix and one label more; the host itself
    /// for an IP address, a single label, a public suffix, or with no list.
    package func registrableDomain(_ host: String) -> String {
        let h = host.lowercased()
        guard isLoaded, !Self.isAddress(h) else { return h }
        let labels = h.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count > 1 else { return h }
        // The longest suffix that is a public suffix; the registrable domain is one label more.
        for i in 1..<labels.count where isPublicSuffix(labels[i...].joined(separator: ".")) {
            return labels[(i - 1)...].joined(separator: ".")
        }
        return h
    }

    /// Whether `host` is an IPv4 or IPv6 address.
    static func isAddress(_ host: String) -> Bool {
        host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
    }
}
