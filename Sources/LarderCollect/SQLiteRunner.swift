import Foundation
import Logging
import SQLiteNIO

/// SQLite, the embedded default: one connection (SQLite serialises writers anyway), in WAL mode.
package final class SQLiteRunner: SQLRunner {
    let connection: SQLiteConnection
    /// One statement or transaction at a time on the connection.
    let gate = Gate()

    /// Opens (creating it) the database file at `path`.
    package init(path: String, logger: Logger) async throws {
        connection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        _ = try await connection.query("PRAGMA journal_mode = WAL", [])
        _ = try await connection.query("PRAGMA synchronous = NORMAL", [])
        _ = try await connection.query("PRAGMA busy_timeout = 5000", [])
    }

    package func query(_ sql: String, _ binds: [SQLValue], columns: [SQLColumn]) async throws -> [[SQLValue]] {
        try await gate.run { try await self.run(sql, binds, columns) }
    }

    func run(_ sql: String, _ binds: [SQLValue], _ columns: [SQLColumn]) async throws -> [[SQLValue]] {
        // `$n` placeholders as SQLite's numbered `?n`.
        let text = sql.replacingOccurrences(of: "$", with: "?")
        let rows = try await connection.query(
            text,
            binds.map { v -> SQLiteData in
                switch v {
                case .int(let i): .integer(SQLiteInt64(i))
                case .text(let t): .text(t)
                case .null: .null
                }
            })
        return rows.map { row in
            zip(row.columns, columns).map { c, kind -> SQLValue in
                switch (c.data, kind) {
                case (.integer(let i), _): .int(Int64(i))
                case (.float(let d), .int): .int(Int64(d))
                case (.text(let t), .text): .text(t)
                case (.text(let t), .int): .int(Int64(t) ?? 0)
                default: .null
                }
            }
        }
    }

    package func transaction<T: Sendable>(_ body: @Sendable (any SQLRunner) async throws -> T) async throws -> T {
        try await gate.run {
            _ = try await self.run("BEGIN IMMEDIATE", [], [])
            do {
                let value = try await body(InTransaction(runner: self))
                _ = try await self.run("COMMIT", [], [])
                return value
            } catch {
                _ = try? await self.run("ROLLBACK", [], [])
                throw error
            }
        }
    }

    package func close() async { try? await connection.close() }

    /// The runner inside a transaction: statements go straight to the connection (the gate is held).
    struct InTransaction: SQLRunner {
        let runner: SQLiteRunner
        func query(_ sql: String, _ binds: [SQLValue], columns: [SQLColumn]) async throws -> [[SQLValue]] {
            try await runner.run(sql, binds, columns)
        }
        func transaction<T: Sendable>(_ body: @Sendable (any SQLRunner) async throws -> T) async throws -> T {
            try await body(self)
        }
        func close() async {}
    }
}

/// Runs one operation at a time, in arrival order.
actor Gate {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        } else {
            busy = true
        }
        defer {
            if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
        }
        return try await body()
    }
}
