import Foundation
import LarderCore
import LarderFileSystem
import SystemPackage

/// Why the sandbox's config cannot be used. The codes and messages are those `larder` has
/// always printed for these cases (`not-initialised`, `config`).
public enum ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The sandbox has no config.json.
    case notInitialised(root: String)
    /// The config is unreadable, invalid or cannot be written; the text says which and why.
    case invalid(String)

    /// A stable machine-readable code.
    public var code: ReasonCode {
        switch self {
        case .notInitialised: "not-initialised"
        case .invalid: "config"
        }
    }

    /// What was wrong, for a person.
    public var description: String {
        switch self {
        case .notInitialised(let r):
            "\(r) has no config.json; run `larder init --root \(r) --repo URL --public-key F` first"
        case .invalid(let d): "configuration: \(d)"
        }
    }
}

/// `<root>/config.json`, written by `larder init`: where the repository is, which keys are
/// trusted, which channel and app version this device has, and its random device id (made once,
/// kept across re-inits; it decides rollout buckets).
package struct SyncConfig: Codable, Sendable, Equatable {
    /// The document's format version; `ManifestCoding.decode` refuses any but `currentSchemaVersion`.
    package var schemaVersion: Int
    /// The repository's base URL (`https://`, `http://` or `file://`); `initialise` ends it with `/`.
    package var repository: String
    /// The public keys an index's signature is checked against; a verified index may rotate them.
    package var trustedKeys: [KeyFile]
    /// The release channel this device follows (`SyncRequest.channel` overrides it).
    package var channel: Channel
    /// The app's version, compared with each release's `minClientVersion`.
    package var appVersion: SemanticVersion
    /// A random id (32 hex digits from `initialise`), kept across re-inits; it decides rollout buckets.
    package var deviceId: String
    /// Plain http to hosts other than loopback.
    package var allowInsecureHTTP: Bool
    /// Downloads at once.
    package var concurrency: Int
    /// The most bytes the sandbox's packages may hold; after each sync, fetch and gc, on-demand
    /// packages are evicted, least recently used first, to stay within it. Nil: no budget.
    package var diskBudget: Int64?
    /// The app turned telemetry on (format §19): events are recorded and sent only then, and only
    /// to a collector the signed index names. Nil or false: off.
    package var telemetry: Bool?

    /// Creates a config.
    package init(
        repository: String, trustedKeys: [KeyFile], channel: Channel = .default, appVersion: SemanticVersion,
        deviceId: String, allowInsecureHTTP: Bool = false, concurrency: Int = 4
    ) {
        schemaVersion = currentSchemaVersion
        self.repository = repository
        self.trustedKeys = trustedKeys
        self.channel = channel
        self.appVersion = appVersion
        self.deviceId = deviceId
        self.allowInsecureHTTP = allowInsecureHTTP
        self.concurrency = concurrency
    }

    /// The file's path in a sandbox.
    package static func path(root: FilePath) -> FilePath { SandboxLayout(root: root).config }

    /// Reads the config of the sandbox at `root`.
    package static func load(root: FilePath) throws(ConfigError) -> SyncConfig {
        let p = path(root: root)
        guard AtomicFile.exists(p) else { throw .notInitialised(root: root.string) }
        do {
            return try ManifestCoding.decode(SyncConfig.self, from: AtomicFile.read(p), document: "config.json")
        } catch {
            throw .invalid("\(error)")
        }
    }

    /// The trusted public keys.
    package func publicKeys() throws(ConfigError) -> [PublicKey] {
        var out: [PublicKey] = []
        for k in trustedKeys {
            do {
                out.append(try KeyFile.publicKey(from: ManifestCoding.encode(k), path: "config.json"))
            } catch {
                throw .invalid("a trusted key in config.json is not usable: \(error)")
            }
        }
        return out
    }

    /// Turns telemetry on or off (format §19); off also deletes the spool and the install id.
    package func withTelemetry(_ on: Bool, root: FilePath) throws(ConfigError) -> SyncConfig {
        var c = self
        c.telemetry = on
        do {
            try AtomicFile.write(try ManifestCoding.encode(c), to: Self.path(root: root))
            if !on { try TelemetrySpool(root: root).turnOff() }
        } catch {
            throw .invalid("cannot write \(Self.path(root: root)): \(error)")
        }
        return c
    }

    /// Replaces the trusted keys (key rotation announced by a verified index).
    package func withKeys(_ keys: [KeyFile], root: FilePath) throws(ConfigError) -> SyncConfig {
        var c = self
        c.trustedKeys = keys
        do { try AtomicFile.write(try ManifestCoding.encode(c), to: Self.path(root: root)) } catch {
            throw .invalid("cannot write \(Self.path(root: root)): \(error)")
        }
        return c
    }

    /// Writes (or rewrites) the config of the sandbox at `root`, keeping an existing device id.
    package static func initialise(
        root: FilePath, repository: String, keys: [PublicKey], channel: Channel, appVersion: SemanticVersion,
        allowInsecureHTTP: Bool, diskBudget: Int64? = nil, telemetry: Bool? = nil
    ) throws(ConfigError) -> SyncConfig {
        if let b = diskBudget, b <= 0 { throw .invalid("a disk budget must be positive, not \(b)") }
        guard let url = URL(string: repository), let scheme = url.scheme?.lowercased(),
            ["https", "http", "file"].contains(scheme)
        else {
            throw .invalid("\(quoted(repository)) is not a repository URL (https://…, http://… or file://…)")
        }
        guard channel.isValid else { throw .invalid("\(quoted(channel.rawValue)) is not a channel name") }
        guard !keys.isEmpty else { throw .invalid("at least one trusted public key is needed") }
        let existing = try? load(root: root)
        let device =
            existing?.deviceId ?? (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        var config = SyncConfig(
            repository: repository.hasSuffix("/") ? repository : repository + "/",
            trustedKeys: keys.map { KeyFile(public: $0) },
            channel: channel, appVersion: appVersion, deviceId: device, allowInsecureHTTP: allowInsecureHTTP)
        config.diskBudget = diskBudget
        // Kept across re-inits unless the call says.
        config.telemetry = telemetry ?? existing?.telemetry
        do {
            try AtomicFile.makeDirectories(root)
            try AtomicFile.write(try ManifestCoding.encode(config), to: path(root: root))
        } catch {
            throw .invalid("cannot write \(path(root: root)): \(error)")
        }
        return config
    }
}
