// zipfoundation-unzip ZIP DIR: extracts ZIP into DIR (which must exist) with ZIPFoundation, as
// an app that embeds it would; exits 1 with the error on stderr when it fails.
import Foundation
import ZIPFoundation

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    FileHandle.standardError.write(Data("usage: zipfoundation-unzip ZIP DIR\n".utf8))
    exit(64)
}
do {
    try FileManager.default.unzipItem(
        at: URL(fileURLWithPath: arguments[1]), to: URL(fileURLWithPath: arguments[2]))
} catch {
    FileHandle.standardError.write(Data("zipfoundation-unzip: \(error)\n".utf8))
    exit(1)
}
