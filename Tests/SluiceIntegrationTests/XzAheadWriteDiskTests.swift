import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// unxz's workers write their blocks into the partial file ahead of the in-order stream
/// (`AheadWriter`): a kill leaves bytes past the checkpoint's prefix there, and a full disk
/// may strike a worker's write rather than the file thread's.
final class XzAheadWriteDiskTests: XCTestCase {
    /// SIGKILL right after checkpoints, on odd-sized blocks with CRC64 checks in two
    /// concatenated streams: every rerun resumes and the output is the original.
    func testKillLoopWhileBlocksAreWrittenAhead() throws {
        try requireSlowTests()
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 40_000_000, seed: 33)
        let raw = dir + "/plain"
        try Data(plain).write(to: URL(fileURLWithPath: raw))
        let half = dir + "/half"
        try Data(plain.prefix(15_000_000)).write(to: URL(fileURLWithPath: half))
        XCTAssertEqual(
            try shell(
                "{ xz -c -1 -T2 --block-size=2500001 --check=crc64 '\(raw)'; xz -c -0 -T2 --block-size=1999999 '\(half)'; } > '\(dir)/in.xz'"
                    + " && cat '\(raw)' '\(half)' > '\(dir)/expected'"
            ).status, 0)
        let size = try fileSize(dir + "/in.xz")
        let loop = KillLoop(
            label: "ahead", arguments: ["--progress", "json", "--checkpoint-interval", "256KiB", "read in.xz | unxz | file out"],
            directory: dir, checkpoint: "out.sluice", output: "out")
        var random = SeededRandom(seed: 19)
        let kills = 6
        let slice = Double(size) * 0.8 / Double(kills)
        guard try loop.run(self, kills: kills, target: { UInt64(slice * (Double($0) + Double(random.next() % 1000) / 1000)) }) != nil else { return }
        XCTAssertTrue(try filesEqual(dir + "/expected", dir + "/out"), "output differs from the original data")
    }

    /// The output's disk fills up while blocks are written ahead: exit 6 naming the partial
    /// file (the file sink's own write failure), the last checkpoint stays, and the rerun
    /// after space is freed resumes from it with the original output.
    func testAFullOutputDiskIsExitSixAndTheRerunResumes() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 24_000_000, seed: 34)
        try Data(plain).write(to: URL(fileURLWithPath: dir + "/plain"))
        XCTAssertEqual(try shell("xz -c -0 -T2 --block-size=3000000 '\(dir)/plain' > '\(dir)/in.xz'").status, 0)
        let disk = dir + "/disk"
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        let mount = try shell("mount -t tmpfs -o size=14m tmpfs '\(disk)' 2>&1", capture: true)
        XCTAssertEqual(mount.status, 0, "this test needs root to mount a tmpfs: \(mount.output)")
        guard mount.status == 0 else { return }
        addTeardownBlock { _ = try? shell("umount '\(disk)' 2>/dev/null || umount -l '\(disk)'") }
        let args = ["--progress", "json", "--checkpoint-interval", "1MiB", "--checkpoint", "ck", "read in.xz | unxz | file disk/out"]

        let failed = try runSluiceBounded(args, in: dir, timeout: 120)
        XCTAssertEqual(failed.status, 6, failed.stderr)
        XCTAssertTrue(failed.messages.last?.contains("No space left") ?? false, failed.stderr)
        XCTAssertTrue(failed.messages.last?.contains("disk/out.sluice-part") ?? false, "the message names the partial file: \(failed.stderr)")
        let facts = try XCTUnwrap(CheckpointFacts(path: dir + "/ck"), "the last good checkpoint stays")
        let offset = try XCTUnwrap(facts.sourceOffset)
        XCTAssertFalse(FileManager.default.fileExists(atPath: disk + "/out"))

        XCTAssertEqual(try shell("mount -o remount,size=64m '\(disk)'").status, 0)
        let rerun = try runSluiceBounded(args, in: dir, timeout: 120)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        XCTAssertEqual((rerun.events(named: "resume").first?["source_offset"] as? NSNumber)?.uint64Value, offset, "resumed at the checkpoint")
        XCTAssertEqual(try shell("cmp -s '\(dir)/plain' '\(disk)/out'").status, 0, "output differs after the resume")
    }
}
