import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The kill loop through the real binary for unxz: `read F.xz | unxz | file out` is
/// SIGKILLed right after checkpoints (mid-block, in the middle of LZMA2 data), rerun each
/// time, and must end byte-identical to the original, every rerun having resumed.
final class XzKillResumeTests: XCTestCase {
    func testKillLoopSingleBlock() throws {
        try requireSlowTests()
        try killLoop(options: "-1 -T1", label: "single block")
    }

    func testKillLoopMultiBlock() throws {
        try requireSlowTests()
        try killLoop(options: "-1 -T2 --block-size=3MiB --check=sha256", label: "multi-block")
    }

    private func killLoop(options: String, label: String, kills wanted: Int = 6) throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 60_000_000, seed: 31)
        let raw = dir + "/plain"
        try Data(plain).write(to: URL(fileURLWithPath: raw))
        XCTAssertEqual(try shell("xz -k -c \(options) '\(raw)' > '\(dir)/in.xz'").status, 0)
        let size = try fileSize(dir + "/in.xz")
        let arguments = ["--progress", "json", "--checkpoint-interval", "256KiB", "read in.xz | unxz | file out"]
        var random = SeededRandom(seed: 17)
        var resumed = 0
        let hold = try holdAtSourceEnd(self)
        for kill in 0..<wanted {
            let before = CheckpointFacts(path: dir + "/out.sluice")?.sourceOffset
            let run = try SluiceChild(arguments, in: dir, environment: hold)
            // Kill k lands after the first checkpoint in the k-th slice of the first 75% of the input.
            let slice = Double(size) * 0.75 / Double(wanted)
            let target = UInt64(slice * (Double(kill) + Double(random.next() % 1000) / 1000))
            guard
                run.waitForEvent(
                    "checkpoint", timeout: 120,
                    where: {
                        (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) >= max(target, (before ?? 0) + 1)
                    }) != nil
            else {
                run.send(SIGKILL)
                return XCTFail("[\(label)] run \(kill + 1) ended before a checkpoint past \(target): \(run.waitForExit(timeout: 10).stderr)")
            }
            run.send(SIGKILL)
            let outcome = run.waitForExit(timeout: 60)
            XCTAssertTrue(outcome.signalled, "[\(label)] run \(kill + 1) finished before the kill")
            if before != nil {
                XCTAssertFalse(outcome.events(named: "resume").isEmpty, "[\(label)] run \(kill + 1) did not resume: \(outcome.messages)")
                resumed += 1
            }
        }
        let final = try runSluiceBounded(arguments, in: dir, timeout: 300)
        XCTAssertEqual(final.status, 0, "[\(label)] the final run failed: \(final.messages)")
        XCTAssertFalse(final.events(named: "resume").isEmpty, "[\(label)] the final run did not resume")
        XCTAssertEqual(resumed, wanted - 1)
        XCTAssertTrue(try filesEqual(raw, dir + "/out"), "[\(label)] output differs from the original data")
    }
}
