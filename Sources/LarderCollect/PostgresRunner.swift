import Foundation
import Logging
import PostgresNIO

/// PostgreSQL, for a fleet that outgrows one file: a pool of connections (postgres-nio's
/// `PostgresClient`), run for as long as the runner lives.
package final class PostgresRunner: SQLRunner {
    let client: PostgresClient
    let logger: Logger
    let running: Task<Void, Never>

    /// Connects to `database` on `host:port` as `user` (plain TCP: the collector and its
    /// database share a host or a private network).
    package init(host: String, port: Int, user: String, password: String?, database: String, logger: Logger)
        async throws
    {
        var config = PostgresClient.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: .disable)
        config.options.maximumConnections = 8
        let client = PostgresClient(configuration: config, backgroundLogger: logger)
        self.client = client
        self.logger = logger
        running = Task { await client.run() }
        // Fails here, with the server's reason, when the database cannot be reached.
        _ = try await query("SELECT 1", [], columns: [.int])
    }

    package func query(_ sql: String, _ binds: [SQLValue], columns: [SQLColumn]) async throws -> [[SQLValue]] {
        try await Self.collect(try await client.query(Self.statement(sql, binds), logger: logger), columns)
    }

    package func transaction<T: Sendable>(_ body: @Sendable (any SQLRunner) async throws -> T) async throws -> T {
        try await client.withTransaction(logger: logger) { connection in
            try await body(OnConnection(connection: connection, logger: logger))
        }
    }

    package func close() async {
        running.cancel()
        _ = await running.value
    }

    static func statement(_ sql: String, _ binds: [SQLValue]) -> PostgresQuery {
        var b = PostgresBindings(capacity: binds.count)
        for v in binds {
            switch v {
            case .int(let i): b.append(i)
            case .text(let t): b.append(t)
            case .null: b.appendNull()
            }
        }
        return PostgresQuery(unsafeSQL: sql, binds: b)
    }

    static func collect(_ rows: PostgresRowSequence, _ columns: [SQLColumn]) async throws -> [[SQLValue]] {
        var out: [[SQLValue]] = []
        for try await row in rows {
            let r = row.makeRandomAccess()
            out.append(
                try columns.enumerated().map { i, kind -> SQLValue in
                    switch kind {
                    case .int: try r[i].decode(Int64?.self).map(SQLValue.int) ?? .null
                    case .text: try r[i].decode(String?.self).map(SQLValue.text) ?? .null
                    }
                })
        }
        return out
    }

    /// Statements on the transaction's connection.
    struct OnConnection: SQLRunner {
        let connection: PostgresConnection
        let logger: Logger
        func query(_ sql: String, _ binds: [SQLValue], columns: [SQLColumn]) async throws -> [[SQLValue]] {
            try await PostgresRunner.collect(
                try await connection.query(PostgresRunner.statement(sql, binds), logger: logger), columns)
        }
        func transaction<T: Sendable>(_ body: @Sendable (any SQLRunner) async throws -> T) async throws -> T {
            try await body(self)
        }
        func close() async {}
    }
}

extension TelemetryStore {
    /// Opens the store `url` names and brings its schema up to date.
    package static func open(_ url: StoreURL, logger: Logger) async throws -> TelemetryStore {
        let runner: any SQLRunner
        switch url {
        case .sqlite(let path): runner = try await SQLiteRunner(path: path, logger: logger)
        case .postgres(let host, let port, let user, let password, let database):
            runner = try await PostgresRunner(
                host: host, port: port, user: user, password: password, database: database, logger: logger)
        }
        let store = TelemetryStore(runner: runner)
        do { try await store.migrate() } catch {
            await runner.close()
            throw error
        }
        return store
    }
}
