import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The real binary unpacks a gzip'd tree of 20,000+ files, is SIGKILLed right after
/// checkpoint events spread over the archive (deterministic positions), and is rerun each
/// time; the final tree must equal GNU tar's extraction of the same archive, every rerun
/// must resume (none starts over), and only DIR is left at the end.
final class UntarKillResumeTests: XCTestCase {
    func testKillLoopZlib() throws {
        try requireSlowTests()
        try killLoop(engine: "zlib")
    }

    func testKillLoopIsal() throws {
        try requireSlowTests()
        try killLoop(engine: "isal")
    }

    private func killLoop(engine: String, kills: Int = 8) throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        try makeSourceTree(at: dir + "/src", files: 20_000, seed: 2026, sizeDivisor: 6)
        XCTAssertEqual(try shell("cd \(dir) && tar -cf - -C src . | gzip -6 > tree.tar.gz && mkdir ref && tar -xzf tree.tar.gz -C ref").status, 0)
        let digest = try sha256Hex(ofFile: dir + "/tree.tar.gz")
        let gzSize = (try FileManager.default.attributesOfItem(atPath: dir + "/tree.tar.gz")[.size] as? NSNumber)?.uint64Value ?? 0
        let work = dir + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let loop = KillLoop(
            label: engine,
            arguments: [
                "--progress", "json", "--checkpoint-interval", "256KiB", "--engine", engine,
                "read \(dir)/tree.tar.gz | verify sha256:\(digest) | gunzip | untar out",
            ],
            directory: work, checkpoint: "out.sluice", output: "out")
        guard try loop.run(self, kills: kills, target: { gzSize * UInt64($0 + 1) / UInt64(kills + 2) }) != nil else { return }
        let expected = treeSnapshot(dir + "/ref", includeRoot: true)
        XCTAssertGreaterThan(expected.count, 20_000)
        let differences = treeDifferences(expected, treeSnapshot(work + "/out", includeRoot: true))
        XCTAssertEqual(differences, [], "[\(engine)] the resumed tree differs from GNU tar's")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work), ["out"], "[\(engine)] more than DIR is left")
    }

    /// Exit 4 (the digest does not match) and exit 5 (corrupt gzip) leave no DIR, no
    /// partial tree and no checkpoint; an interrupted run (SIGTERM, exit 130) keeps both
    /// and the rerun completes from the checkpoint.
    func testFailuresLeaveNothingAndInterruptionsResume() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        try makeSourceTree(at: dir + "/src", files: 1500, seed: 5)
        XCTAssertEqual(try shell("cd \(dir) && tar -cf - -C src . | gzip -6 > t.tar.gz && mkdir ref && tar -xzf t.tar.gz -C ref").status, 0)
        let digest = try sha256Hex(ofFile: dir + "/t.tar.gz")
        let wrong = String(repeating: "0", count: 64)
        var result = try SluiceBinary.run(["-q", "read t.tar.gz | verify sha256:\(wrong) | gunzip | untar out"], in: dir)
        XCTAssertEqual(result.status, 4, result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir).sorted(), ["ref", "src", "t.tar.gz"])
        try shell("cd \(dir) && head -c 200000 t.tar.gz > cut.gz && printf 'garbage-garbage-garbage' >> cut.gz && cat cut.gz cut.gz > bad.gz && rm cut.gz")
        result = try SluiceBinary.run(["-q", "read bad.gz | gunzip | untar out"], in: dir)
        XCTAssertEqual(result.status, 5, result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir).sorted(), ["bad.gz", "ref", "src", "t.tar.gz"])

        let arguments = ["--progress", "json", "--checkpoint-interval", "64KiB", "read t.tar.gz | verify sha256:\(digest) | gunzip | untar out"]
        let run = try SluiceChild(arguments, in: dir)
        XCTAssertNotNil(run.waitForEvent("checkpoint", timeout: 60, where: { (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) > 100_000 }))
        // Stopped first, so the interruption lands long before the end whatever the machine's speed.
        run.send(SIGSTOP)
        run.send(SIGTERM)
        run.send(SIGCONT)
        let stopped = run.waitForExit(timeout: 60)
        XCTAssertEqual(stopped.status, 130, stopped.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out.sluice"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
        let final = try runSluiceBounded(arguments, in: dir, timeout: 120)
        XCTAssertEqual(final.status, 0, final.stderr)
        XCTAssertEqual(treeDifferences(treeSnapshot(dir + "/ref", includeRoot: true), treeSnapshot(dir + "/out", includeRoot: true)), [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"))
    }
}
