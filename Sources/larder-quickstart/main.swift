// The README's Linux quick start, as it is there (a test compares them): larder-quickstart ROOT REPOSITORY KEY.pub [SECONDS]
import Foundation
import Larder
import LarderGateway

let args = CommandLine.arguments
var config = OfflinePackages.Configuration(
    root: FilePath(args[1]), repository: args[2], trustedKeys: [try PublisherKeys.loadPublicKey(FilePath(args[3]))])
config.syncInterval = args.count > 4 ? Double(args[4]) : 15 * 60  // background sync
config.allowSync = { !FileManager.default.fileExists(atPath: args[1] + "/.no-sync") }  // the app's veto (e.g. cellular)
let packages = try OfflinePackages(config)
Task { [events = packages.events()] in for await event in events { print(event) } }  // UI and logging
packages.start()  // counts the launch, syncs now and then every interval, runs the page-health clock
var gateway = Gateway(loader: packages.loader, port: 0, forwarder: packages.forwarder, log: { print($0) })
gateway.health = packages.pageHealth  // a page's larder.ready() confirms its version; a failed page rolls back
try await gateway.run { host, port in print("listening on http://\(host):\(port)") }
