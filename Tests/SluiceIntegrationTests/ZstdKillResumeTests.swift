import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The kill loop through the real binary for unzstd and decompress: SIGKILL only after a
/// checkpoint event past a chosen source offset (so each kill lands inside a frame,
/// deterministically), rerun the same command, and at the end the output is identical
/// to the original and every rerun resumed from the checkpoint instead of from zero.
final class ZstdKillResumeTests: XCTestCase {
    /// ~270 MB of mixed data as one zstd frame (-T2 still writes a single frame) with a 1 MiB
    /// window: small enough that checkpoints keep up with the decoder, so a kill lands soon
    /// after the checkpoint event it waited for (an 8 MiB window's checkpoint takes ~0.15 s).
    nonisolated(unsafe) private static var fixture: (raw: String, zst: String, digest: String)?

    private static func makeFixture() throws -> (raw: String, zst: String, digest: String) {
        if let fixture { return fixture }
        let dir = NSTemporaryDirectory() + "sluice-zstd-fixture-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let raw = dir + "/data", zst = raw + ".zst"
        let script = """
            set -e -o pipefail
            for i in $(seq 1 120); do head -c 600000 /dev/urandom; seq $((i * 1000000)) $((i * 1000000 + 250000)); done > '\(raw)'
            zstd -q -3 --zstd=wlog=20 -T2 '\(raw)' -o '\(zst)'
            """
        XCTAssertEqual(try shell(script).status, 0)
        let made = (raw, zst, try sha256Hex(ofFile: zst))
        fixture = made
        return made
    }

    /// The fixture is shared by the tests of this class; it goes when they are done.
    override class func tearDown() {
        if let raw = fixture?.raw { try? FileManager.default.removeItem(atPath: (raw as NSString).deletingLastPathComponent) }
        fixture = nil
        super.tearDown()
    }

    func testKillLoopUnzstd() throws {
        try requireSlowTests()
        let f = try Self.makeFixture()
        try killLoop(spec: "read \(f.zst) | verify sha256:\(f.digest) | unzstd | file out", fixture: f)
    }

    func testKillLoopDecompress() throws {
        try requireSlowTests()
        let f = try Self.makeFixture()
        try killLoop(spec: "read \(f.zst) | decompress | file out", fixture: f)
    }

    private func killLoop(spec: String, fixture: (raw: String, zst: String, digest: String), kills: Int = 5) throws {
        let size = try fileSize(fixture.zst)
        let dir = try makeTemporaryDirectory(self)
        let loop = KillLoop(
            label: spec, arguments: ["--progress", "json", "--checkpoint-interval", "1MiB", spec],
            directory: dir, checkpoint: "out.sluice", output: "out", finalTimeout: 120)
        // Kill k lands after the first checkpoint in the k-th of `kills` slices of the first 60%.
        guard try loop.run(self, kills: kills, target: { UInt64(Double(size) * 0.6 * Double($0 + 1) / Double(kills + 1)) }) != nil else { return }
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"), "output differs from the original data")
    }
}
