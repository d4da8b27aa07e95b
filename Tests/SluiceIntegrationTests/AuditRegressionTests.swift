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

/// Standard descriptors closed by the caller (`<&-`, `>&-`).
final class ClosedStandardDescriptorTests: XCTestCase {
    /// Runs sluice through sh, which closes the descriptors `redirections` say.
    private func runClosing(_ redirections: String, _ spec: String, in dir: String) throws -> (status: Int32, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "exec \"$0\" \"$1\" \(redirections) 2>err", SluiceBinary.path, spec]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        try process.run()
        process.waitUntilExit()
        let stderr = (try? String(contentsOfFile: dir + "/err", encoding: .utf8)) ?? ""
        return (process.terminationStatus, stderr)
    }

    /// The lock file took descriptor 0 and was read as stdin: exit 0 with an empty `out`.
    func testAClosedStdinIsRefusedNotReadAsAnEmptyStream() throws {
        let dir = try makeTemporaryDirectory(self)
        let outcome = try runClosing("<&-", "stdin | file out", in: dir)
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("standard input is closed"), outcome.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir).sorted(), ["err"])
    }

    func testAClosedStdoutIsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data("x".utf8).write(to: URL(fileURLWithPath: dir + "/in"))
        let outcome = try runClosing(">&-", "read in | stdout", in: dir)
        XCTAssertEqual(outcome.status, 2, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("standard output is closed"), outcome.stderr)
    }

    /// With stdin and stderr closed, the lock file and the partial output took descriptors 0 and 2,
    /// and the JSON progress lines were written into the output: exit 0 with 394 bytes too many.
    func testClosedDescriptorsNeverBecomeTheRunsFiles() throws {
        let dir = try makeTemporaryDirectory(self)
        let bytes = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: dir + "/in"))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [
            "-c", "exec \"$0\" --progress json --checkpoint-interval 64KiB \"$1\" <&- 2>&-", SluiceBinary.path,
            "fetch file://\(dir)/in | file out",
        ]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/out"), bytes, "progress lines went into the output")
    }
}
