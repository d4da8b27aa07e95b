import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// What the external audit of the release binary broke, one test per finding.
final class AuditRegressionTests: XCTestCase {

    private func leftovers(in dir: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix("out") }.sorted()
    }

    /// libcurl reads a file:// directory as an empty body: this was exit 0 with an empty `out`.
    func testFetchOfAFileURLThatIsADirectoryFailsAndLeavesNothing() throws {
        let dir = try makeTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/tree", withIntermediateDirectories: false)
        let outcome = try runSluiceBounded(["fetch file://\(dir)/tree/ | file out"], in: dir)
        XCTAssertFalse(outcome.signalled, outcome.stderr)
        XCTAssertEqual(outcome.status, 3, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("directory"), outcome.stderr)
        XCTAssertEqual(try leftovers(in: dir), [])
    }

    /// libcurl blocked in open(2) on a FIFO with no writer: the run ignored --stall-timeout and
    /// the first SIGTERM, and hung until a second signal.
    func testFetchOfAFileURLThatIsAFIFOIsRefusedInsteadOfHanging() throws {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(mkfifo(dir + "/pipe", 0o600), 0)
        let outcome = try runSluiceBounded(["fetch file://\(dir)/pipe | file out"], in: dir)
        XCTAssertFalse(outcome.signalled, outcome.stderr)
        XCTAssertEqual(outcome.status, 3, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("FIFO") && outcome.stderr.contains("read PATH"), outcome.stderr)
        XCTAssertEqual(try leftovers(in: dir), [])
    }

    func testFetchOfAPercentEncodedFileURLStillWorks() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data("bytes in a file with a space".utf8).write(to: URL(fileURLWithPath: dir + "/in put"))
        let outcome = try runSluiceBounded(["fetch file://\(dir)/in%20put | file out"], in: dir)
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/out", encoding: .utf8), "bytes in a file with a space")
    }
}
