import Foundation

/// Content types by extension, covering what web pages load; text types carry `charset=utf-8`.
package enum MediaTypes {
    static let table: [String: String] = [
        "html": "text/html; charset=utf-8", "htm": "text/html; charset=utf-8", "css": "text/css; charset=utf-8",
        "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8",
        "json": "application/json; charset=utf-8", "map": "application/json; charset=utf-8",
        "webmanifest": "application/manifest+json; charset=utf-8", "txt": "text/plain; charset=utf-8",
        "xml": "application/xml; charset=utf-8", "svg": "image/svg+xml; charset=utf-8", "wasm": "application/wasm",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
        "avif": "image/avif", "ico": "image/x-icon", "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf",
        "otf": "font/otf", "mp4": "video/mp4", "webm": "video/webm", "mp3": "audio/mpeg", "m4a": "audio/mp4",
        "ogg": "audio/ogg", "wav": "audio/wav", "pdf": "application/pdf",
    ]

    /// The type for a path (by its extension), `application/octet-stream` when unknown.
    package static func type(for path: RelativePath) -> String {
        table[path.pathExtension] ?? "application/octet-stream"
    }
}
