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

    private func killLoop(options: String, label: String, kills: Int = 6) throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 60_000_000, seed: 31)
        let raw = dir + "/plain"
        try Data(plain).write(to: URL(fileURLWithPath: raw))
        XCTAssertEqual(try shell("xz -k -c \(options) '\(raw)' > '\(dir)/in.xz'").status, 0)
        let size = try fileSize(dir + "/in.xz")
        let loop = KillLoop(
            label: label, arguments: ["--progress", "json", "--checkpoint-interval", "256KiB", "read in.xz | unxz | file out"],
            directory: dir, checkpoint: "out.sluice", output: "out")
        // Kill k lands after the first checkpoint in the k-th slice of the first 75% of the input.
        var random = SeededRandom(seed: 17)
        let slice = Double(size) * 0.75 / Double(kills)
        guard try loop.run(self, kills: kills, target: { UInt64(slice * (Double($0) + Double(random.next() % 1000) / 1000)) }) != nil else { return }
        XCTAssertTrue(try filesEqual(raw, dir + "/out"), "[\(label)] output differs from the original data")
    }
}
