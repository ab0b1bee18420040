import CWebKitGTK
import Foundation

/// GLib's main loop (the thread GTK and WebKit run on): closures queued to it from any thread.
public enum GLibMain {
    /// A closure handed to GLib as a source's data (an opaque pointer: no Sendable check applies).
    final class Box {
        let body: () -> Bool
        init(_ body: @escaping () -> Bool) { self.body = body }
    }

    private static let run: GSourceFunc = { data in
        guard let data else { return 0 }
        return Unmanaged<Box>.fromOpaque(data).takeUnretainedValue().body() ? 1 : 0
    }
    private static let release: GDestroyNotify = { data in
        guard let data else { return }
        Unmanaged<Box>.fromOpaque(data).release()
    }

    /// Runs `body` on the main loop, soon.
    public static func async(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(
            Box {
                body()
                return false
            }
        ).toOpaque()
        g_idle_add_full(0, run, box, release)
    }

    /// Runs `body` on the main loop after `seconds`.
    public static func after(_ seconds: TimeInterval, _ body: @escaping @Sendable () -> Void) {
        every(seconds) {
            body()
            return false
        }
    }

    /// Runs `body` on the main loop every `seconds` while it returns true.
    public static func every(_ seconds: TimeInterval, _ body: @escaping @Sendable () -> Bool) {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        g_timeout_add_full(0, UInt32(max(0, seconds) * 1000), run, box, release)
    }

    /// Initialises GTK (on the thread that will run the loop); false when there is no display.
    public static func initializeGTK() -> Bool { gtk_init_check() != 0 }

    /// Runs the main loop until `quit` (GTK initialised first).
    public static func runLoop() {
        let loop = g_main_loop_new(nil, 0)
        current = loop
        g_main_loop_run(loop)
        g_main_loop_unref(loop)
    }

    /// Ends `runLoop`.
    public static func quit() {
        async { if let loop = current { g_main_loop_quit(loop) } }
    }

    nonisolated(unsafe) private static var current: OpaquePointer?
}

/// A signal handler: a closure kept alive as long as the connection (GObject holds it as an opaque
/// pointer and emits on the main loop's thread only).
final class SignalBox<T> {
    let handler: T
    init(_ handler: T) { self.handler = handler }

    /// Connects `callback` (a C function taking the box as its last argument) to `signal` of
    /// `instance`, with `handler` as the box.
    static func connect(_ instance: UnsafeMutableRawPointer, _ signal: String, _ callback: GCallback, _ handler: T) {
        let box = Unmanaged.passRetained(SignalBox(handler)).toOpaque()
        g_signal_connect_data(instance, signal, callback, box, releaseBox, GConnectFlags(rawValue: 0))
    }

    static func from(_ data: gpointer?) -> T? {
        guard let data else { return nil }
        return Unmanaged<SignalBox>.fromOpaque(data).takeUnretainedValue().handler
    }
}

/// Releases a `SignalBox` (its type does not matter to `release`).
private let releaseBox: GClosureNotify = { data, _ in
    if let data { Unmanaged<AnyObject>.fromOpaque(data).release() }
}

/// A value GLib's main loop alone uses — a GObject pointer, GLib bytes — carried across a queue or
/// task on its way there (its maker hands it over and does not touch it after).
package struct MainLoopBound<Value>: @unchecked Sendable {
    // @unchecked: only the main loop's thread uses `value` (GTK and WebKit objects are not thread-safe).
    /// The value.
    package let value: Value
    /// Carries `value`.
    package init(_ value: Value) { self.value = value }
}

/// A C string GLib allocated, as a Swift string (freed).
func takeString(_ p: UnsafeMutablePointer<CChar>?) -> String? {
    guard let p else { return nil }
    defer { g_free(p) }
    return String(cString: p)
}
