import Foundation
@testable import SluiceTestSupport
import XCTest

/// A spec file saved as "UTF-8 with BOM" runs like the same file without the mark, and a
/// spec error in it is placed where an editor shows it (the mark takes no column).
final class SpecFileBOMTests: XCTestCase {
    private static func environment(_ dir: String) -> [String: String] {
        ProcessInfo.processInfo.environment.merging(["SLUICE_STATE_DIR": dir + "/state"]) { $1 }
    }

    func testAByteOrderMarkBeforeTheSpecIsSkipped() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data("payload\n".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        try Data([0xEF, 0xBB, 0xBF] + Array("read in | file out\n".utf8)).write(to: URL(fileURLWithPath: dir + "/job.spec"))
        let outcome = try SluiceBinary.run(["-q", "-f", "job.spec"], in: dir, environment: Self.environment(dir))
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/out", encoding: .utf8), "payload\n")
    }

    func testASpecErrorAfterAByteOrderMarkIsPlacedWithoutIt() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data([0xEF, 0xBB, 0xBF] + Array("read in | gunzp | file out\n".utf8)).write(to: URL(fileURLWithPath: dir + "/job.spec"))
        let outcome = try SluiceBinary.run(["-q", "-f", "job.spec"], in: dir, environment: Self.environment(dir))
        XCTAssertEqual(outcome.status, 2)
        XCTAssertTrue(outcome.stderr.contains("line 1, column 11: unknown stage 'gunzp'"), outcome.stderr)
        XCTAssertFalse(outcome.stderr.contains("FEFF"), outcome.stderr)
    }
}
