import Foundation
import XCTest
@testable import SluiceTestSupport

/// The binary's side of a memory limit: exit 5, as for damaged data, with a line that says
/// what the stream needs, the limit, and the option that raises it — not "corrupt".
final class DecoderLimitCLITests: XCTestCase {
    func testAnXzDictionaryOverMemlimitExitsFiveAndSaysWhatItNeeds() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(makeTestData(count: 10_000, seed: 7), options: "--lzma2=dict=64MiB", dir: dir)
        try Data(xz).write(to: URL(fileURLWithPath: dir + "/in.xz"))
        let result = try SluiceBinary.run(["-q", "read \(dir)/in.xz | unxz memlimit=32MiB | file \(dir)/out"])
        XCTAssertEqual(result.status, 5, result.stderr)
        XCTAssertEqual(
            result.stderr,
            "sluice: \(dir)/in.xz: xz data at byte 13 of the xz stream needs a dictionary of 64 MiB, over the limit of 32 MiB"
                + " (memlimit=SIZE raises it); nothing was written\n")
        XCTAssertFalse(result.stderr.contains("corrupt"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"))
    }
}
