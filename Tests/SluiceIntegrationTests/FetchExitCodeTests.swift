import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Exit codes 3 and 7 and the remote-changed restart, through the real binary against
/// the fault-injection server.
final class FetchExitCodeTests: XCTestCase {
    func testNotFoundExitsThreeAtOnceNamingHostAndStatus() throws {
        try withFaultServer(body: [1, 2, 3], fault: { $0.status = 404 }) { server in
            let dir = try makeTemporaryDirectory(self)
            let result = try SluiceBinary.run(["fetch \(server.url()) | file \(dir)/out"])
            XCTAssertEqual(result.status, 3, result.stderr)
            XCTAssertTrue(result.stderr.hasPrefix("sluice: "), result.stderr)
            XCTAssertTrue(result.stderr.contains("404"), result.stderr)
            XCTAssertTrue(result.stderr.contains("127.0.0.1"), result.stderr)
            XCTAssertEqual(server.requests.count, 1, "a 404 is not retried")
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
        }
    }

    func testRetriesExhaustedExitThreeAndTheRerunResumes() throws {
        let body = makeTestData(count: 2_000_000, seed: 4)
        try withFaultServer(body: body, fault: { $0.dropAfterBodyBytes = 600_000 }) { server in
            let dir = try makeTemporaryDirectory(self)
            let spec = "fetch \(server.url()) | file \(dir)/out"
            // No retries: the first drop ends the run, with what arrived kept and checkpointed.
            let first = try SluiceBinary.run(["--retries", "0", "--checkpoint-interval", "64KiB", spec])
            XCTAssertEqual(first.status, 3, first.stderr)
            XCTAssertTrue(first.stderr.contains("rerun the same command to resume"), first.stderr)
            XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out.sluice"))
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
            // Reruns continue where the last one stopped until the whole body is there.
            var status: Int32 = 3
            var runs = 0
            while status == 3 && runs < 10 {
                status = try SluiceBinary.run(["--retries", "0", "--checkpoint-interval", "64KiB", spec]).status
                runs += 1
            }
            XCTAssertEqual(status, 0)
            XCTAssertEqual(try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/out"))), body)
            XCTAssertLessThan(server.totalBodyBytesSent, body.count * 12 / 10, "reruns resumed, not restarted")
        }
    }

    func testRemoteChangedRestartsAFileSinkAndSaysSo() throws {
        let old = makeTestData(count: 3_000_000, seed: 5), new = makeTestData(count: 2_500_000, seed: 6)
        try withFaultServer(body: old, fault: { $0.dropAfterBodyBytes = 1_000_000 }) { server in
            let dir = try makeTemporaryDirectory(self)
            let spec = "fetch \(server.url()) | file \(dir)/out"
            XCTAssertEqual(try SluiceBinary.run(["--retries", "0", "--checkpoint-interval", "64KiB", spec]).status, 3)
            server.replaceBody(new, etag: "\"v2\"", lastModified: "Thu, 02 Jan 2025 00:00:00 GMT")
            server.setFault(FaultServer.Fault())
            let second = try SluiceBinary.run(["--checkpoint-interval", "64KiB", spec])
            XCTAssertEqual(second.status, 0, second.stderr)
            XCTAssertTrue(second.stderr.contains("changed"), second.stderr)
            XCTAssertTrue(second.stderr.contains("starting over"), second.stderr)
            XCTAssertEqual(try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/out"))), new)
        }
    }

    func testRemoteChangedWithAStdoutSinkExitsSeven() throws {
        let old = makeTestData(count: 3_000_000, seed: 7), new = makeTestData(count: 3_000_000, seed: 8)
        try withFaultServer(body: old, fault: { $0.dropAfterBodyBytes = 1_000_000 }) { server in
            let dir = try makeTemporaryDirectory(self)
            let arguments = ["--retries", "0", "--checkpoint-interval", "64KiB", "--checkpoint", dir + "/ck", "fetch \(server.url()) | stdout"]
            XCTAssertEqual(try SluiceBinary.run(arguments).status, 3)
            server.replaceBody(new, etag: "\"v2\"", lastModified: "Thu, 02 Jan 2025 00:00:00 GMT")
            let second = try SluiceBinary.run(arguments)
            XCTAssertEqual(second.status, 7, second.stderr)
            XCTAssertTrue(second.stderr.hasPrefix("sluice: "), second.stderr)
            XCTAssertTrue(second.stderr.contains("changed"), second.stderr)
            XCTAssertTrue(second.stdout.isEmpty, "no bytes of the new version reach stdout")
            XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/ck"), "the checkpoint is kept")
        }
    }

    func testUnsupportedSchemeIsASpecError() throws {
        let result = try SluiceBinary.run(["fetch gopher://example.org/x | stdout"])
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("unsupported URL scheme 'gopher'"), result.stderr)
    }
}
