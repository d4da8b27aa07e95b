import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The real binary resuming `untar` over a partial tree changed between runs: members
/// finished before the checkpoint edited, cut short, removed, swapped for symlinks (to a
/// file outside, for a directory), or names added that no member made. Each is found
/// before the tree would become DIR and the run is refused (exit 2), naming
/// DIR.sluice-part and the member and advising `--restart`: no DIR, nothing outside it
/// touched; `--restart` then extracts the archive's tree. And a checkpoint left beside a
/// completed DIR is recognised and explained.
final class UntarTreeTrustTests: XCTestCase {
    private var fixture: UntarTrustFixture!
    private var dir: String { fixture.dir }
    private var spec: String { fixture.spec }
    private var out: String { fixture.out }
    private var part: String { fixture.part }
    private var outside: String { dir + "/outside" }

    override func setUpWithError() throws {
        let small = ["sub/a", "sub/b", "sub/c", "sub/d", "sub/deep/e"].enumerated().map {
            UntarTrustFixture.File(path: $0.element, size: 2000 + 100 * $0.offset, seed: UInt64(40 + $0.offset))
        }
        // The big file last: the run is stopped in the middle of its data, after the others.
        fixture = try UntarTrustFixture(
            self, files: small + [.init(path: "big", size: UntarTrustFixture.bigSize, seed: 41)], tarOptions: "--sort=name",
            members: "sub big")
        try Data("outside".utf8).write(to: URL(fileURLWithPath: outside))
        try FileManager.default.createDirectory(atPath: dir + "/outside-dir", withIntermediateDirectories: true)
    }

    /// The checkpoint stands inside `big`, with the members before it finished.
    private func interruptedRun() throws {
        let (_, state) = try fixture.interruptedRun()
        XCTAssertEqual(TreeLedger.decode([UInt8](state.tree))?.count, 7, "sub, its four files, sub/deep and sub/deep/e")
    }

    private func assertTreeIsTheArchives(_ what: String, file: StaticString = #filePath, line: UInt = #line) {
        fixture.assertTreeIsTheArchives(what, file: file, line: line)
    }

    private func assertOutsideUntouched(_ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(try? String(contentsOfFile: outside, encoding: .utf8), "outside", what, file: file, line: line)
        XCTAssertEqual(try? FileManager.default.contentsOfDirectory(atPath: dir + "/outside-dir"), [], what, file: file, line: line)
    }

    func testChangedFinishedMembersAreRefused() throws {
        let changes: [(what: String, member: String, command: String)] = [
            ("a flipped byte", "sub/b", "printf '\\377\\000' | dd of=\(part)/sub/b bs=1 seek=100 conv=notrunc status=none"),
            ("a truncated file", "sub/c", "truncate -s 1000 \(part)/sub/c"),
            ("a removed file", "sub/a", "rm \(part)/sub/a"),
            ("a file swapped for a symlink to a file outside", "sub/d", "rm \(part)/sub/d && ln -s \(outside) \(part)/sub/d"),
            ("a directory swapped for a symlink", "sub/deep", "rm -r \(part)/sub/deep && ln -s \(dir)/outside-dir \(part)/sub/deep"),
            ("an added file", "sub/extra", "echo extra > \(part)/sub/extra"),
        ]
        for change in changes {
            try interruptedRun()
            let edited = try shell(change.command)
            XCTAssertEqual(edited.status, 0, "\(change.what): \(edited.output)")
            let result = try SluiceBinary.run([spec])
            XCTAssertEqual(result.status, 2, "\(change.what): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("\(part): '\(change.member)' "), "\(change.what): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("--restart"), "\(change.what): \(result.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), change.what)
            assertOutsideUntouched(change.what)
            let restarted = try SluiceBinary.run(["-q", "--restart", spec])
            XCTAssertEqual(restarted.status, 0, "\(change.what): \(restarted.stderr)")
            assertTreeIsTheArchives(change.what)
            assertOutsideUntouched(change.what)
            XCTAssertFalse(FileManager.default.fileExists(atPath: part), change.what)
            XCTAssertFalse(FileManager.default.fileExists(atPath: out + ".sluice"), change.what)
        }
    }

    func testUntouchedTreeResumes() throws {
        try interruptedRun()
        let result = try SluiceBinary.run(["--progress", "json", spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("\"event\":\"resume\""), result.stderr)
        XCTAssertFalse(result.stderr.contains("starting over"), result.stderr)
        assertTreeIsTheArchives("resumed")
    }

    /// A kill after DIR.sluice-part became DIR and before the checkpoint was removed: the
    /// rerun says what happened and what to do (exit 2), touching nothing; when DIR does not
    /// hold what the checkpoint lists, it says DIR is not that run's output.
    func testCheckpointLeftBesideACompletedTreeIsExplained() throws {
        try interruptedRun()
        let saved = try Data(contentsOf: URL(fileURLWithPath: out + ".sluice"))
        let completed = try SluiceBinary.run(["-q", spec])
        XCTAssertEqual(completed.status, 0, completed.stderr)
        try saved.write(to: URL(fileURLWithPath: out + ".sluice"))

        var result = try SluiceBinary.run([spec])
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("left from a run that completed it"), result.stderr)
        XCTAssertTrue(result.stderr.contains("remove \(out).sluice"), result.stderr)
        assertTreeIsTheArchives("after the refusal")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: out + ".sluice")), saved, "the checkpoint is the user's to remove")

        XCTAssertEqual(try shell("echo changed > \(out)/sub/c").status, 0)
        result = try SluiceBinary.run([spec])
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("does not hold what it lists"), result.stderr)
        XCTAssertTrue(result.stderr.contains("sub/c"), result.stderr)
        XCTAssertEqual(try String(contentsOfFile: out + "/sub/c", encoding: .utf8), "changed\n")
    }
}
