import Foundation

/// What the device brings to planning: who it is and what it runs.
package struct ClientContext: Sendable, Equatable {
    /// The app's own version, compared with `minClientVersion`.
    package var appVersion: SemanticVersion
    /// A random id made once per sandbox; it decides rollout buckets.
    package var deviceID: String
    /// The release channel this device follows.
    package var channel: Channel
    /// On-demand packages to install now (first use, `larder fetch`); the others are installed
    /// only once held.
    package var wanted: Set<PackageID>
    /// When set, a preload on this network: the on-demand packages whose hint allows it are wanted too.
    package var preload: NetworkKind?

    /// Creates a context.
    package init(
        appVersion: SemanticVersion, deviceID: String, channel: Channel = .default, wanted: Set<PackageID> = [],
        preload: NetworkKind? = nil
    ) {
        self.appVersion = appVersion
        self.deviceID = deviceID
        self.channel = channel
        self.wanted = wanted
        self.preload = preload
    }
}

extension Rollout {
    /// The device's bucket for this release, 0..<100: the first 8 bytes of
    /// SHA-256(deviceID ‖ 0 ‖ id ‖ 0 ‖ version ‖ 0 ‖ salt), big-endian, modulo 100.
    package static func bucket(deviceID: String, id: PackageID, version: SemanticVersion, salt: String) -> Int {
        var input = Data(deviceID.utf8)
        for part in [id.rawValue, version.description, salt] {
            input.append(0)
            input.append(contentsOf: part.utf8)
        }
        let d = SHA256Digest.of(input).bytes
        var n: UInt64 = 0
        for b in d.prefix(8) { n = n << 8 | UInt64(b) }
        return Int(n % 100)
    }

    /// Whether the device is in this release's rollout.
    package func includes(deviceID: String, id: PackageID, version: SemanticVersion) -> Bool {
        percent >= 100 || Rollout.bucket(deviceID: deviceID, id: id, version: version, salt: salt) < percent
    }
}

/// How a version's files would be fetched.
package enum FetchMethod: String, Codable, Sendable, Equatable, CaseIterable {
    /// Only the contents the sandbox lacks, one object each.
    case objects
    /// The whole bundle.
    case bundle
    /// Nothing to fetch: every content is already in the sandbox.
    case local
    /// A delta from the active version: patches against contents held, objects for the rest.
    case delta
}

/// One way of fetching a version and what it would cost, as the plan shows all of them.
package struct FetchAlternative: Codable, Sendable, Equatable {
    /// How.
    package var method: FetchMethod
    /// Bytes to download.
    package var bytes: Int64
    /// HTTP requests.
    package var requests: Int

    /// Creates one.
    package init(method: FetchMethod, bytes: Int64, requests: Int) {
        self.method = method
        self.bytes = bytes
        self.requests = requests
    }
}

/// The cost of getting a version one way, compared by `Differ.choose`.
package struct FetchCost: Codable, Sendable, Equatable {
    /// How the files would come: the missing objects, a delta, the whole bundle, or nothing to fetch.
    package var method: FetchMethod
    /// Bytes to download: the objects' compressed sizes where the file list gives them (else
    /// the contents' sizes, an upper bound), the patches', or the bundle's.
    package var bytes: Int64
    /// HTTP requests.
    package var requests: Int
    /// Files already in the sandbox (linked or copied instead of fetched).
    package var reused: Int
    /// The full bundle's size, for comparison.
    package var bundleBytes: Int64
    /// Every way that was weighed (objects, delta when there is one, bundle), for the plan to show.
    package var alternatives: [FetchAlternative]?

    /// Creates a cost.
    package init(
        method: FetchMethod, bytes: Int64, requests: Int, reused: Int, bundleBytes: Int64,
        alternatives: [FetchAlternative]? = nil
    ) {
        self.method = method
        self.bytes = bytes
        self.requests = requests
        self.reused = reused
        self.bundleBytes = bundleBytes
        self.alternatives = alternatives
    }
}

/// Why a package is left as it is.
package enum SkipReason: String, Codable, Sendable, Equatable {
    case unchanged
    case notInRollout = "not-in-rollout"
    case clientTooOld = "client-too-old"
    case otherChannel = "other-channel"
    case previouslyFailed = "previously-failed"
    case revoked
    case olderThanActive = "older-than-active"
    case dependencyUnavailable = "dependency-unavailable"
    case fileListNeeded = "file-list-needed"
    /// An on-demand package the device does not hold and nothing asked for.
    case onDemand = "on-demand"
}

/// One step of a plan.
package struct PlanAction: Codable, Sendable, Equatable {
    /// `install`, `update`, `rollback`, `remove` or `skip`.
    package var kind: Kind
    /// The package the action is about.
    package var id: PackageID
    /// The version active now (for update, rollback, remove, skip).
    package var from: SemanticVersion?
    /// The version the action leads to (install, update, rollback), or the index's version (skip).
    package var to: SemanticVersion?
    /// How the files would be fetched (install, update).
    package var cost: FetchCost?
    /// Why the package is left as it is (set for `skip` only).
    package var skip: SkipReason?
    /// Why, in a sentence.
    package var reason: String
    /// Packages that must be activated together with this one (its dependency group).
    package var group: [PackageID]

    /// The kinds of action.
    package enum Kind: String, Codable, Sendable, Equatable, CaseIterable {
        case install, update, rollback, remove, skip
    }
}

/// The ordered result of planning.
package struct Plan: Codable, Sendable, Equatable {
    /// Every action, skips included, in the stable order `Differ.plan` gives them.
    package var actions: [PlanAction]

    /// Creates a plan.
    package init(actions: [PlanAction]) { self.actions = actions }

    /// Actions that change something.
    package var changes: [PlanAction] { actions.filter { $0.kind != .skip } }
}
