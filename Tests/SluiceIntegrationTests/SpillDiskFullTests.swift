import Foundation
import XCTest
@testable import SluiceTestSupport

/// A cut's zstd window waits for the store in an unnamed file in the checkpoint's
/// directory (`CheckpointSpill`). When that directory's disk is full the run stops with
/// exit 6, the last stored checkpoint stays, nothing is left under a name, and the rerun
/// after space is freed resumes exactly.
final class SpillDiskFullTests: XCTestCase {
    func testAFullCheckpointDiskIsExitSixAndTheRerunResumes() throws {
        // Only the checkpoint lives on the small disk: the early checkpoints (windows under
        // 1 MiB, kept in memory) fit, a window of more does not (the disk has no room to
        // spill it and store it, so it stays in memory and the store fails).
        guard let (dir, disk) = try inputAndSmallDisk(size: "2m") else { return }
        let args = [
            "--progress", "json", "--checkpoint-interval", "64KiB", "--checkpoint", "disk/ck",
            "read in.zst | unzstd | file out",
        ]

        let failed = try runSluiceBounded(args, in: dir, timeout: 120)
        XCTAssertEqual(failed.status, 6, failed.stderr)
        XCTAssertEqual(failed.messages.count, 1, failed.stderr)
        XCTAssertTrue(failed.messages.last?.contains("No space left") ?? false, failed.stderr)
        XCTAssertTrue(failed.messages.last?.contains("/ck") ?? false, "the message names the checkpoint: \(failed.stderr)")
        let facts = try XCTUnwrap(CheckpointFacts(path: disk + "/ck"), "the last good checkpoint stays")
        // Which cut was last stored depends on timing (cuts that arrive while one is stored
        // replace each other; on a busy machine the one before the first byte may be the
        // only one that fits): any offset is right as long as the rerun resumes there.
        let offset = try XCTUnwrap(facts.sourceOffset)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: disk), ["ck"], "nothing else is left")

        XCTAssertEqual(try shell("mount -o remount,size=64m '\(disk)'").status, 0)
        let rerun = try runSluiceBounded(args, in: dir, timeout: 120)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertEqual((rerun.events(named: "resume").first?["source_offset"] as? NSNumber)?.uint64Value, offset, "resumed at the checkpoint")
        XCTAssertEqual(try shell("cmp -s '\(dir)/plain' '\(dir)/out'").status, 0, "output differs after the resume")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: disk), [])
    }

    /// A disk with room for two checkpoints (the old one and the one being stored) is
    /// enough, as it was when cuts held their windows in memory: the store frees the spill
    /// as it copies it. With 8 MiB windows on a 20 MiB disk the spill made it three
    /// windows, and most runs stopped with exit 6.
    func testADiskForTwoCheckpointsIsEnough() throws {
        guard let (dir, disk) = try inputAndSmallDisk(size: "20m") else { return }
        // Several runs: how far the cuts and the store overlap varies.
        for attempt in 0..<3 {
            try? FileManager.default.removeItem(atPath: dir + "/out")
            let run = try runSluiceBounded(["--progress", "json", "--checkpoint", "disk/ck", "read in.zst | unzstd | file out"], in: dir, timeout: 120)
            XCTAssertEqual(run.status, 0, "run \(attempt): \(run.stderr)")
            XCTAssertFalse(run.events(named: "checkpoint").isEmpty, "run \(attempt) stored checkpoints")
            XCTAssertEqual(try shell("cmp -s '\(dir)/plain' '\(dir)/out'").status, 0, "run \(attempt): output differs")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: disk), [])
        }
    }

    /// A directory with `plain` (24 MiB, barely compressible, so the window grows with the
    /// source and soon needs a spill), `in.zst` (8 MiB window) and `disk`, a tmpfs of `size`
    /// for the checkpoint; nil (a failure recorded) without root.
    private func inputAndSmallDisk(size: String) throws -> (dir: String, disk: String)? {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(try shell("head -c 24M /dev/urandom > '\(dir)/plain' && zstd -q -3 --long=23 '\(dir)/plain' -o '\(dir)/in.zst'").status, 0)
        let disk = dir + "/disk"
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        let mount = try shell("mount -t tmpfs -o size=\(size) tmpfs '\(disk)' 2>&1", capture: true)
        XCTAssertEqual(mount.status, 0, "this test needs root to mount a tmpfs: \(mount.output)")
        guard mount.status == 0 else { return nil }
        addTeardownBlock { _ = try? shell("umount '\(disk)' 2>/dev/null || umount -l '\(disk)'") }
        return (dir, disk)
    }
}
