import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// Something put at the output's names during a run stops it with exit 6 and is left as it
/// is. A run that writes no checkpoint (stdin, `--checkpoint-interval 0`) used to take exit 6
/// for output nothing can resume and remove the partial output by its name: that removed
/// the file or tree put there, someone else's.
final class ObstructedOutputTests: XCTestCase {
    /// Runs `arguments` in `dir`, holds it at the SOURCE_END gate (every byte read, nothing
    /// published), lets `plant` act, then lets it finish.
    private func run(
        _ arguments: [String], in dir: String, stdin: Data? = nil, plant: () throws -> Void
    ) throws -> SluiceOutcome {
        let gate = try RaceGate("SOURCE_END", in: dir)
        let child = try SluiceChild(arguments, in: dir, stdin: stdin, environment: gate.environment)
        XCTAssertTrue(gate.waitUntilReached(timeout: 30), "the run never reached its end (no test gate in this build?)")
        try plant()
        gate.release()
        let outcome = child.waitForExit(timeout: 30)
        XCTAssertFalse(outcome.timedOut, outcome.stderr)
        return outcome
    }

    func testAFilePutAtThePartialNameOfAStdinRunIsKept() throws {
        let dir = try makeTemporaryDirectory(self)
        let outcome = try run(["stdin | file out"], in: dir, stdin: Data("this run's bytes".utf8)) {
            try Data("someone else's".utf8).write(to: URL(fileURLWithPath: dir + "/other"))
            XCTAssertEqual(rename(dir + "/other", dir + "/out.sluice-part"), 0)
        }
        XCTAssertEqual(outcome.status, 6, outcome.stderr)
        XCTAssertTrue(outcome.stderr.contains("replaced or removed during the run"), outcome.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/out.sluice-part"), Data("someone else's".utf8), "the file put there was removed")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
    }

    func testADirectoryPutAtThePartialTreeOfAStdinUntarIsKept() throws {
        let dir = try makeTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: false)
        try Data("member".utf8).write(to: URL(fileURLWithPath: dir + "/src/a"))
        XCTAssertEqual(try shell("tar -cf '\(dir)/in.tar' -C '\(dir)/src' a").status, 0)
        let tar = try XCTUnwrap(FileManager.default.contents(atPath: dir + "/in.tar"))
        let outcome = try run(["stdin | untar d"], in: dir, stdin: tar) {
            XCTAssertEqual(rename(dir + "/d.sluice-part", dir + "/moved"), 0)
            try FileManager.default.createDirectory(atPath: dir + "/d.sluice-part", withIntermediateDirectories: false)
            try Data("someone else's".utf8).write(to: URL(fileURLWithPath: dir + "/d.sluice-part/theirs"))
        }
        XCTAssertEqual(outcome.status, 6, outcome.stderr)
        XCTAssertEqual(
            FileManager.default.contents(atPath: dir + "/d.sluice-part/theirs"), Data("someone else's".utf8), "the tree put there was removed")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/d"))
    }

    /// A FIFO put at PATH during the run: exit 6 keeps the partial output (and, with one, the
    /// checkpoint); once the FIFO is moved away the same command completes with the right bytes.
    func testAFIFOPutAtThePathDuringTheRunThenMovedAwayLetsTheRerunComplete() throws {
        let data = Data(makeTestData(count: 3 << 20, seed: 61))
        for interval in ["1MiB", "0"] {
            let dir = try makeTemporaryDirectory(self)
            try data.write(to: URL(fileURLWithPath: dir + "/in.bin"))
            let digest = try sha256Hex(ofFile: dir + "/in.bin")
            let arguments = ["--checkpoint-interval", interval, "read in.bin | verify sha256:\(digest) | file out"]
            let outcome = try run(arguments, in: dir) { try HostileFile.fifo(at: dir + "/out") }
            XCTAssertEqual(outcome.status, 6, "\(interval): \(outcome.stderr)")
            XCTAssertTrue(outcome.stderr.contains("a FIFO was put there during the run"), outcome.stderr)
            XCTAssertNotNil(FileManager.default.contents(atPath: dir + "/out.sluice-part"), "\(interval): the output was not kept")
            XCTAssertEqual(unlink(dir + "/out"), 0)
            let rerun = try runSluiceBounded(arguments, in: dir, timeout: 30)
            XCTAssertEqual(rerun.status, 0, "\(interval): \(rerun.stderr)")
            XCTAssertTrue(FileManager.default.contents(atPath: dir + "/out") == data, interval)
            XCTAssertEqual(try DirectorySnapshot(dir).names.filter { !$0.hasPrefix("gate-") }, ["in.bin", "out"], interval)
        }
    }
}
