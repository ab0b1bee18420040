import Foundation
import LarderCore

/// A file list decoding on a thread of its own from the bytes it was read as, so that an
/// install can extract its bundle meanwhile (`Sandbox.install(bundle:id:version:pending:force:)`).
package final class PendingFileList: Sendable {
    /// The bytes the list is decoded from.
    package let bytes: Data
    /// The decoding's outcome, once the decoding thread has one.
    private let outcome = Waitable<Result<FileList, any Error>?>(nil)

    /// Starts decoding `bytes` with `decode` on a thread of its own.
    package init(bytes: Data, decode: @escaping @Sendable (Data) throws -> FileList) {
        self.bytes = bytes
        BlockingWork.start("larder.decode-list") { [self] in
            let decoded = Result { try decode(bytes) }
            outcome.update { $0 = decoded }
        }
    }

    /// The list, or why it did not decode; waits for the decoding thread.
    package var result: Result<FileList, any Error> { outcome.wait { $0 } }
}
