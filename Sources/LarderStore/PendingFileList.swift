import Foundation
import LarderCore

/// A file list decoding on a thread of its own from the bytes it was read as, so that an
/// install can extract its bundle meanwhile (`Sandbox.install(bundle:id:version:pending:force:)`).
package final class PendingFileList: @unchecked Sendable {
    // @unchecked: `outcome` is written once, by the decoding thread, with `condition` locked.
    /// The bytes the list is decoded from.
    package let bytes: Data
    private let condition = NSCondition()
    private var outcome: Result<FileList, any Error>?

    /// Starts decoding `bytes` with `decode` on a thread of its own.
    package init(bytes: Data, decode: @escaping @Sendable (Data) throws -> FileList) {
        self.bytes = bytes
        BlockingWork.start("larder.decode-list") { [self] in
            let decoded = Result { try decode(bytes) }
            condition.lock()
            outcome = decoded
            condition.broadcast()
            condition.unlock()
        }
    }

    /// The list, or why it did not decode; waits for the decoding thread.
    package var result: Result<FileList, any Error> {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let outcome { return outcome }
            condition.wait()
        }
    }
}
