import Foundation
import LarderCore
import Mustache

/// The report as one self-contained HTML page (`larder report --html`, the collector's
/// `/report`): per package, the adoption curve of each version hour by hour (inline SVG), a table
/// of rates with their 95 % Wilson intervals, and failures and rollbacks by reason as bars. No
/// script and no outside resource, so it opens from a file, an artefact store or a mail.
package enum ReportPage {
    static let width = 640.0
    static let height = 220.0
    static let margin = (left: 48.0, right: 110.0, top: 12.0, bottom: 28.0)
    static let colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]

    /// The page for `report`.
    package static func render(_ report: ReleaseReport) -> String {
        let packages = Dictionary(grouping: report.versions, by: \.package).sorted { $0.key < $1.key }
        let context: [String: Any] = [
            "since": ManifestCoding.formatRFC3339(report.since), "until": ManifestCoding.formatRFC3339(report.until),
            "batches": report.batches, "dropped": report.dropped, "empty": report.versions.isEmpty,
            "packages": packages.map { name, versions in package(name, versions, report) },
        ]
        return template.render(context)
    }

    static func package(_ name: String, _ versions: [VersionReport], _ report: ReleaseReport) -> [String: Any] {
        let start = TelemetryEvent.hour(of: report.since).timeIntervalSince1970
        let end = max(start + 3600, TelemetryEvent.hour(of: report.until).timeIntervalSince1970)
        let plotW = width - margin.left - margin.right
        let plotH = height - margin.top - margin.bottom
        func x(_ t: Date) -> Double { margin.left + (t.timeIntervalSince1970 - start) / (end - start) * plotW }
        func y(_ share: Double) -> Double { margin.top + (1 - share) * plotH }
        let lines = versions.enumerated().map { i, v -> [String: Any] in
            let points = v.adoption.map { String(format: "%.1f,%.1f", x($0.hour), y($0.share)) }
            return [
                "version": v.version, "color": colors[i % colors.count], "points": points.joined(separator: " "),
                "dots": v.adoption.map {
                    ["x": String(format: "%.1f", x($0.hour)), "y": String(format: "%.1f", y($0.share))]
                },
                "legendY": String(format: "%.0f", margin.top + 14 + Double(i) * 16),
                "legendX": String(format: "%.0f", width - margin.right + 14),
            ]
        }
        var bars: [[String: Any]] = []
        let reasons = versions.flatMap { v in v.byReason.map { (v.version, $0) } }
        let most = Double(reasons.map(\.1.devices).max() ?? 1)
        for (i, (version, r)) in reasons.enumerated() {
            bars.append([
                "label": "\(version) \(r.kind) \(r.reason)", "devices": r.devices,
                "y": String(format: "%.0f", 8 + Double(i) * 22), "textY": String(format: "%.0f", 21 + Double(i) * 22),
                "w": String(format: "%.1f", max(1, Double(r.devices) / most * 300)),
                "countX": String(format: "%.1f", 262 + max(1, Double(r.devices) / most * 300)),
            ])
        }
        let ticks = (0...4).map { k -> [String: Any] in
            let share = Double(k) / 4
            return [
                "y": String(format: "%.1f", y(share)), "label": "\(k * 25) %",
                "x": String(format: "%.0f", margin.left - 6),
            ]
        }
        return [
            "name": name, "lines": lines, "bars": bars, "hasBars": !bars.isEmpty, "ticks": ticks,
            "barsHeight": String(format: "%.0f", 16 + Double(bars.count) * 22),
            "axisLeft": String(format: "%.0f", margin.left), "axisRight": String(format: "%.0f", width - margin.right),
            "axisBottom": String(format: "%.1f", y(0)), "axisTop": String(format: "%.1f", y(1)),
            "startLabel": ManifestCoding.formatRFC3339(Date(timeIntervalSince1970: start)),
            "endLabel": ManifestCoding.formatRFC3339(Date(timeIntervalSince1970: end)),
            "labelY": String(format: "%.0f", height - 8),
            "versions": versions.map(row),
        ]
    }

    static func row(_ v: VersionReport) -> [String: Any] {
        [
            "version": v.version, "devices": v.devices, "attempts": v.attempts, "failures": rate(v.failureRate),
            "rollbacks": rate(v.rollbackRate), "pageErrors": v.pageErrors,
            "current": v.current.map { percent($0) } ?? "–",
        ]
    }

    /// `2.0 % (0.5–7.0 %), 1 of 50`.
    package static func rate(_ p: Proportion) -> String {
        guard let r = p.rate, let lo = p.lower, let hi = p.upper else { return "–" }
        return "\(percent(r)) (\(percent(lo))–\(percent(hi))), \(p.count) of \(p.of)"
    }

    package static func percent(_ x: Double) -> String { String(format: "%.1f %%", x * 100) }

    // swift-format-ignore
    static let template: MustacheTemplate = {
        // A literal template: it always parses.
        // swiftlint:disable:next force_try
        try! MustacheTemplate(string: """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>Larder release report</title>
        <style>
        body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
        h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 14px; }
        table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
        th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
        svg text { font: 11px system-ui, sans-serif; fill: #333; } .axis { stroke: #888; } .grid { stroke: #eee; }
        .bar { fill: #d62728; }
        </style></head>
        <body>
        <h1>Larder release report</h1>
        <p class="window">{{since}} to {{until}} · {{batches}} batches · {{dropped}} events dropped on devices</p>
        {{#empty}}<p class="empty">No events in this window.</p>{{/empty}}
        {{#packages}}
        <section class="package" data-package="{{name}}">
        <h2>{{name}}</h2>
        <h3>Adoption: the share of the package's devices seen so far that run each version, hour by hour</h3>
        <svg class="adoption" width="640" height="220" viewBox="0 0 640 220" role="img" aria-label="adoption of {{name}}">
        {{#ticks}}<line class="grid" x1="{{axisLeft}}" x2="{{axisRight}}" y1="{{y}}" y2="{{y}}"/><text x="{{x}}" y="{{y}}" text-anchor="end" dominant-baseline="middle">{{label}}</text>{{/ticks}}
        <line class="axis" x1="{{axisLeft}}" x2="{{axisRight}}" y1="{{axisBottom}}" y2="{{axisBottom}}"/>
        <line class="axis" x1="{{axisLeft}}" x2="{{axisLeft}}" y1="{{axisTop}}" y2="{{axisBottom}}"/>
        <text x="{{axisLeft}}" y="{{labelY}}">{{startLabel}}</text><text x="{{axisRight}}" y="{{labelY}}" text-anchor="end">{{endLabel}}</text>
        {{#lines}}<polyline class="version" data-version="{{version}}" points="{{points}}" fill="none" stroke="{{color}}" stroke-width="2"/>{{#dots}}<circle cx="{{x}}" cy="{{y}}" r="2.5" fill="{{color}}"/>{{/dots}}
        <rect x="{{legendX}}" y="{{legendY}}" width="10" height="10" fill="{{color}}" transform="translate(0,-9)"/><text x="{{legendX}}" y="{{legendY}}" dx="14">{{version}}</text>
        {{/lines}}
        </svg>
        <table class="versions">
        <tr><th>version</th><th>devices</th><th>attempts</th><th>failure rate (95 % CI)</th><th>rollback rate (95 % CI)</th><th>page errors</th><th>share now</th></tr>
        {{#versions}}<tr data-version="{{version}}"><td>{{version}}</td><td>{{devices}}</td><td>{{attempts}}</td><td>{{failures}}</td><td>{{rollbacks}}</td><td>{{pageErrors}}</td><td>{{current}}</td></tr>
        {{/versions}}
        </table>
        {{#hasBars}}
        <h3>Failures and rollbacks by reason (devices)</h3>
        <svg class="reasons" width="640" height="{{barsHeight}}" role="img" aria-label="failures of {{name}} by reason">
        {{#bars}}<text x="254" y="{{textY}}" text-anchor="end">{{label}}</text><rect class="bar" x="260" y="{{y}}" width="{{w}}" height="16" data-devices="{{devices}}"/><text x="{{countX}}" y="{{textY}}" dx="4">{{devices}}</text>
        {{/bars}}
        </svg>
        {{/hasBars}}
        </section>
        {{/packages}}
        </body></html>
        """)
    }()
}
