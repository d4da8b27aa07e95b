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

    private func killLoop(spec: String, fixture: (raw: String, zst: String, digest: String), kills wanted: Int = 5) throws {
        let size = try fileSize(fixture.zst)
        let dir = try makeTemporaryDirectory(self)
        let arguments = ["--progress", "json", "--checkpoint-interval", "1MiB", spec]
        var resumes = 0
        let hold = try holdAtSourceEnd(self)
        for kill in 0..<wanted {
            let stored = CheckpointFacts(path: dir + "/out.sluice")?.sourceOffset
            // Kill k lands after the first checkpoint in the k-th of `wanted` slices of the first 60%.
            let target = max(UInt64(Double(size) * 0.6 * Double(kill + 1) / Double(wanted + 1)), (stored ?? 0) + 1)
            let run = try SluiceChild(arguments, in: dir, environment: hold)
            guard
                run.waitForEvent(
                    "checkpoint", timeout: 120,
                    where: {
                        (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) >= target
                    }) != nil
            else {
                run.send(SIGKILL)
                return XCTFail("run \(kill + 1) ended before a checkpoint at or past \(target): \(run.waitForExit(timeout: 30).stderr.suffix(2000))")
            }
            run.send(SIGKILL)
            let outcome = run.waitForExit(timeout: 60)
            XCTAssertTrue(outcome.signalled && outcome.status == SIGKILL, "run \(kill + 1) was not killed: \(outcome.stderr.suffix(2000))")
            guard !FileManager.default.fileExists(atPath: dir + "/out") else {
                return XCTFail("kill \(kill + 1) landed after the run had completed (out exists); the fixture is too small for this machine")
            }
            if let stored {
                let resume = outcome.events(named: "resume").first
                XCTAssertEqual((resume?["source_offset"] as? NSNumber)?.uint64Value, stored, "run \(kill + 1) did not resume at the checkpoint")
                if resume != nil { resumes += 1 }
            }
            XCTAssertTrue(outcome.events(named: "restart").isEmpty, "run \(kill + 1) started over")
            XCTAssertGreaterThanOrEqual(CheckpointFacts(path: dir + "/out.sluice")?.sourceOffset ?? 0, target)
        }
        let final = try runSluiceBounded(arguments, in: dir, timeout: 120)
        XCTAssertEqual(final.status, 0, "the final run failed: \(final.messages)")
        XCTAssertEqual(final.events(named: "resume").count, 1, "the final run did not resume")
        XCTAssertEqual(resumes, wanted - 1)
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"), "output differs from the original data")
    }
}
