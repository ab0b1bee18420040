import Foundation
import LarderCore

/// A value bound to, or read from, a SQL statement.
package enum SQLValue: Sendable, Equatable {
    case int(Int64)
    case text(String)
    case null

    /// The integer, or 0.
    var int: Int64 {
        if case .int(let v) = self { return v }
        return 0
    }

    /// The text, or "".
    var text: String {
        if case .text(let v) = self { return v }
        return ""
    }
}

/// What a column of a result holds.
package enum SQLColumn: Sendable {
    case int, text
}

/// Runs SQL on one database: the collector's stores share their statements (format §19, "The
/// collector's store") and differ only in how they run them. Placeholders are `$1`, `$2`, … in
/// order of first use.
package protocol SQLRunner: Sendable {
    /// Runs `sql`, reading `columns` from each row.
    func query(_ sql: String, _ binds: [SQLValue], columns: [SQLColumn]) async throws -> [[SQLValue]]
    /// Runs `body` in one transaction (committed when it returns, rolled back when it throws).
    func transaction<T: Sendable>(_ body: @Sendable (any SQLRunner) async throws -> T) async throws -> T
    /// Closes the connections.
    func close() async
}

extension SQLRunner {
    /// Runs `sql` for its effect.
    func execute(_ sql: String, _ binds: [SQLValue] = []) async throws { _ = try await query(sql, binds, columns: []) }
}

/// Where the collector keeps its data: `sqlite:PATH` or `postgres://user[:password]@host[:port]/database`.
package enum StoreURL: Sendable, Equatable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(host: String, port: Int, user: String, password: String?, database: String)

    /// Parses `--database`, or says what is wrong with it.
    package static func parse(_ text: String) throws(UsageProblem) -> StoreURL {
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else {
                throw UsageProblem("--database sqlite: needs a file path, e.g. sqlite:events.db")
            }
            return .sqlite(path: path)
        }
        guard let u = URLComponents(string: text), ["postgres", "postgresql"].contains(u.scheme ?? ""),
            let host = u.host, !host.isEmpty, let user = u.user, !user.isEmpty
        else {
            throw UsageProblem(
                "--database \(quoted(text)): expected sqlite:PATH or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        let db = u.path.hasPrefix("/") ? String(u.path.dropFirst()) : u.path
        return .postgres(
            host: host, port: u.port ?? 5432, user: user, password: u.password, database: db.isEmpty ? user : db)
    }

    /// The URL without its password.
    package var description: String {
        switch self {
        case .sqlite(let p): "sqlite:\(p)"
        case .postgres(let h, let port, let u, _, let d): "postgres://\(u)@\(h):\(port)/\(d)"
        }
    }
}

/// The collector's tables, in both dialects, and what it does with them.
package struct TelemetryStore: Sendable {
    /// The database.
    package let runner: any SQLRunner

    /// A store over `runner`.
    package init(runner: any SQLRunner) { self.runner = runner }

    /// Numbered migrations; each runs once, in order, in its own transaction.
    static let migrations: [(Int, [String])] = [
        (
            1,
            [
                """
                CREATE TABLE larder_batches (id TEXT PRIMARY KEY, install TEXT NOT NULL, received BIGINT NOT NULL,
                  app TEXT NOT NULL, platform TEXT NOT NULL, larder TEXT NOT NULL, dropped INTEGER NOT NULL,
                  events INTEGER NOT NULL)
                """,
                """
                CREATE TABLE larder_events (batch TEXT NOT NULL, install TEXT NOT NULL, kind TEXT NOT NULL,
                  package TEXT NOT NULL, version TEXT NOT NULL, from_version TEXT, channel TEXT NOT NULL,
                  reason TEXT NOT NULL, n INTEGER NOT NULL, bytes BIGINT, hour BIGINT NOT NULL)
                """,
                "CREATE INDEX larder_events_package_hour ON larder_events (package, hour)",
                "CREATE INDEX larder_events_hour ON larder_events (hour)",
                "CREATE INDEX larder_batches_received ON larder_batches (received)",
            ]
        )
    ]

    /// The newest migration this build knows.
    package static var schemaVersion: Int { migrations.last?.0 ?? 0 }

    /// Applies the migrations the database has not had; refuses a database migrated by a newer build.
    package func migrate() async throws {
        try await runner.execute(
            "CREATE TABLE IF NOT EXISTS larder_migrations (version INTEGER PRIMARY KEY, applied BIGINT NOT NULL)")
        let have = try await runner.query("SELECT MAX(version) FROM larder_migrations", [], columns: [.int])
        let current = Int(have.first?.first?.int ?? 0)
        guard current <= Self.schemaVersion else {
            throw UsageProblem(
                "the database is at schema \(current), newer than this build's \(Self.schemaVersion): upgrade larder")
        }
        for (version, statements) in Self.migrations where version > current {
            try await runner.transaction { db in
                for s in statements { try await db.execute(s) }
                try await db.execute(
                    "INSERT INTO larder_migrations (version, applied) VALUES ($1, $2)",
                    [.int(Int64(version)), .int(Int64(Date().timeIntervalSince1970))])
            }
        }
    }

    /// Rows of events per INSERT statement.
    static let eventsPerStatement = 100

    /// Stores a checked batch, received at `received` (kept to the hour). False when the batch id
    /// was stored before (a replay): nothing is stored then.
    package func insert(_ batch: TelemetryBatch, received: Date) async throws -> Bool {
        try await runner.transaction { db in
            let taken = try await db.query(
                """
                INSERT INTO larder_batches (id, install, received, app, platform, larder, dropped, events)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING RETURNING id
                """,
                [
                    .text(batch.batch), .text(batch.install),
                    .int(Int64(TelemetryEvent.hour(of: received).timeIntervalSince1970)),
                    .text(batch.app), .text(batch.platform), .text(batch.larder), .int(Int64(batch.dropped)),
                    .int(Int64(batch.events.count)),
                ], columns: [.text])
            guard !taken.isEmpty else { return false }
            var start = 0
            while start < batch.events.count {
                let chunk = batch.events[start..<min(start + Self.eventsPerStatement, batch.events.count)]
                var binds: [SQLValue] = []
                var rows: [String] = []
                for e in chunk {
                    let n = binds.count
                    rows.append("(" + (1...11).map { "$\(n + $0)" }.joined(separator: ", ") + ")")
                    binds += [
                        .text(batch.batch), .text(batch.install), .text(e.kind), .text(e.package), .text(e.version),
                        e.from.map(SQLValue.text) ?? .null, .text(e.channel), .text(e.reason), .int(Int64(e.count)),
                        e.bytes.map(SQLValue.int) ?? .null, .int(Int64(e.hour.timeIntervalSince1970)),
                    ]
                }
                try await db.execute(
                    "INSERT INTO larder_events (batch, install, kind, package, version, from_version, channel, reason, n, bytes, hour) VALUES "
                        + rows.joined(separator: ", "), binds)
                start += Self.eventsPerStatement
            }
            return true
        }
    }

    /// Events and batches stored (for tests and the bench).
    package func counts() async throws -> (batches: Int, events: Int) {
        let b = try await runner.query("SELECT COUNT(*) FROM larder_batches", [], columns: [.int])
        let e = try await runner.query("SELECT COUNT(*) FROM larder_events", [], columns: [.int])
        return (Int(b.first?.first?.int ?? 0), Int(e.first?.first?.int ?? 0))
    }
}
