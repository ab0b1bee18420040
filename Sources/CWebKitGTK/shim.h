// WebKitGTK 6.0 (GTK 4) for LarderWebKitGTK, the only module that imports it. Besides the
// library's own headers, a few inline helpers for what Swift cannot call directly: GObject's
// variadic constructors and its cast macros. (SwiftPM does not see a change to this header:
// after editing it, touch a Swift file of LarderWebKitGTK so that the module is rebuilt.)
#ifndef LARDER_CWEBKITGTK_SHIM_H
#define LARDER_CWEBKITGTK_SHIM_H

#include <webkit/webkit.h>
#include <gtk/gtk.h>
#include <libsoup/soup.h>

// <gio/gunixinputstream.h> is in gio-unix-2.0's include directory, which webkitgtk-6.0's
// pkg-config flags do not name; its one function used here, declared as GLib declares it.
GInputStream *g_unix_input_stream_new(gint fd, gboolean close_fd);

/// A web context whose web processes are killed when they use more than `limit_mb` (0: WebKit's
/// default, no limit), checked every `poll_seconds` (0: WebKit's default).
static inline WebKitWebContext *larder_web_context_new(guint limit_mb, gdouble poll_seconds) {
    if (limit_mb == 0) return webkit_web_context_new();
    WebKitMemoryPressureSettings *settings = webkit_memory_pressure_settings_new();
    webkit_memory_pressure_settings_set_memory_limit(settings, limit_mb);
    // WebKit's default kill threshold (0) never kills: kill at the limit itself.
    webkit_memory_pressure_settings_set_kill_threshold(settings, 1.0);
    if (poll_seconds > 0) webkit_memory_pressure_settings_set_poll_interval(settings, poll_seconds);
    WebKitWebContext *context = WEBKIT_WEB_CONTEXT(
        g_object_new(WEBKIT_TYPE_WEB_CONTEXT, "memory-pressure-settings", settings, NULL));
    webkit_memory_pressure_settings_free(settings);
    return context;
}

/// A web view in `context` with `manager`'s scripts and handlers, in `session`.
static inline WebKitWebView *larder_web_view_new(
    WebKitWebContext *context, WebKitUserContentManager *manager, WebKitNetworkSession *session) {
    return WEBKIT_WEB_VIEW(g_object_new(
        WEBKIT_TYPE_WEB_VIEW, "web-context", context, "user-content-manager", manager, "network-session", session,
        NULL));
}

static inline GtkWidget *larder_as_widget(WebKitWebView *view) { return GTK_WIDGET(view); }
static inline GtkWindow *larder_as_window(GtkWidget *widget) { return GTK_WINDOW(widget); }

/// The error a failed scheme request finishes with.
static inline GError *larder_scheme_error(gint code, const char *message) {
    return g_error_new_literal(g_quark_from_static_string("larder-scheme-error"), code, message);
}

#endif
