import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// A kill between the output's final rename and the checkpoint's removal: the rerun used
/// to find no partial file and start over from zero. It now resumes on a copy of what the
/// published file holds of the checkpoint's record (checked by length and CRC-64), so only
/// the stretch after the last checkpoint runs again and every check is made again.
final class PublishedOutputTests: XCTestCase {
    /// Runs `spec` in `dir` and kills it with SIGKILL at the PUBLISHED gate: `out` renamed into
    /// place, its checkpoint still on disk.
    private func killAfterPublishing(_ arguments: [String], in dir: String) throws {
        let gate = try RaceGate("PUBLISHED", in: dir)
        let child = try SluiceChild(arguments, in: dir, environment: gate.environment)
        XCTAssertTrue(gate.waitUntilReached(timeout: 30), "the run never published its output (no test gate in this build?)")
        child.send(SIGKILL)
        let killed = child.waitForExit(timeout: 20)
        XCTAssertTrue(killed.signalled, killed.stderr)
        gate.release()
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out.sluice"), "no checkpoint left to test with")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"))
    }

    func testARerunAfterAKillBetweenRenameAndCheckpointRemovalResumesInsteadOfStartingOver() throws {
        let dir = try makeTemporaryDirectory(self)
        let data = Data(makeTestData(count: 20_000_000, seed: 21))
        try data.write(to: URL(fileURLWithPath: dir + "/in.bin"))
        let arguments = ["--checkpoint-interval", "1MiB", "read in.bin | file out"]
        try killAfterPublishing(arguments, in: dir)
        let inspected = try runSluiceBounded(["inspect", "--json", "out.sluice"], in: dir)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: inspected.stdout) as? [String: Any], inspected.stderr)
        let offset = try XCTUnwrap((json["source"] as? [String: Any])?["offset"] as? Int)
        XCTAssertGreaterThan(offset, 0, "the checkpoint left records no byte: nothing to resume on")
        let rerunSays = try XCTUnwrap(json["rerun"] as? [String: Any])
        XCTAssertEqual(rerunSays["action"] as? String, "resume", "\(rerunSays)")

        let rerun = try runSluiceBounded(arguments, in: dir)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/out"), data)
        XCTAssertFalse(rerun.stderr.contains("starting over"), rerun.stderr)
        XCTAssertTrue(rerun.stderr.contains("resuming from a checkpoint at source byte \(offset)"), rerun.stderr)
        XCTAssertTrue(
            rerun.stderr.contains("the last run most likely finished and was stopped before it removed its checkpoint"), rerun.stderr)
        XCTAssertEqual(try DirectorySnapshot(dir).names.filter { !$0.hasPrefix("gate-") }, ["in.bin", "out"])
    }

    /// A published file that does not begin with the recorded bytes is never taken as the
    /// output: the rerun starts over (as before) and replaces it with the right bytes.
    func testAPublishedFileThatDiffersFromTheRecordIsNotTrusted() throws {
        let dir = try makeTemporaryDirectory(self)
        let data = Data(makeTestData(count: 20_000_000, seed: 22))
        try data.write(to: URL(fileURLWithPath: dir + "/in.bin"))
        let arguments = ["--checkpoint-interval", "1MiB", "--progress", "json", "read in.bin | file out"]
        try killAfterPublishing(arguments, in: dir)
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: dir + "/out"))
        try handle.seek(toOffset: 10)
        handle.write(Data([data[10] ^ 0xff]))
        try handle.close()

        let rerun = try runSluiceBounded(arguments, in: dir)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/out"), data)
        XCTAssertFalse(rerun.events(named: "restart").isEmpty, "a changed file was resumed on: \(rerun.stderr)")
        XCTAssertFalse(rerun.stderr.contains("most likely finished"), rerun.stderr)
    }
}
