import Foundation
import XCTest
@testable import SluiceTestSupport

/// Found by the second external audit: an argument that is not UTF-8 reached the spec with
/// its bad bytes replaced by U+FFFD, so `file caf\xE9` wrote `caf\u{FFFD}` (exit 0), and
/// `read` would read that other name. It is refused now (exit 2), nothing created.
final class ArgumentEncodingTests: XCTestCase {
    func testAnArgumentThatIsNotUTF8IsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data("input".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        // Process takes Swift strings (UTF-8 only): bash passes the raw byte.
        let result = try shell(
            "cd \(dir) && SLUICE_STATE_DIR=\(dir)/state \(SluiceBinary.path) -q \"read in | file $(printf 'caf\\xe9')\" 2>err; echo $? > status",
            capture: true)
        XCTAssertEqual(result.status, 0)
        let status = try String(contentsOfFile: dir + "/status", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let message = try String(contentsOfFile: dir + "/err", encoding: .utf8)
        XCTAssertEqual(status, "2", message)
        XCTAssertTrue(message.contains("argument 2 is not UTF-8 text"), message)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir).sorted(), ["err", "in", "status"])
    }
}
