import Foundation
import XCTest

@testable import Sluice
@testable import SluiceTestSupport

/// A review of untar's resume after the MemberPath, tree-check and symlink-mtime changes:
/// what a kill at an unlucky moment or a change between the runs does to the resumed run.
/// These resume as a user whom permissions bind (root hands the files to nobody first),
/// since modes only matter then.
final class UntarReviewTwoTests: XCTestCase {
    private struct Fixture {
        let dir: String
        var tar: String { dir + "/a.tar" }
        var out: String { dir + "/out" }
        var ref: String { dir + "/ref" }
        var partial: String { out + ".sluice-part" }
        var spec: String { "read \(tar) | untar \(out)" }

        /// `members` are tarred in this order from `dir/src` (no recursion) and extracted by
        /// GNU tar into `ref`; `make` fills `dir/src` first.
        init(_ test: XCTestCase, members: [String], make: (String) throws -> Void) throws {
            dir = try makeMemoryTemporaryDirectory(test)
            setenv("SLUICE_STATE_DIR", dir + "/state", 1)
            test.addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
            try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
            try make(dir + "/src")
            let list = members.map { "'\($0)'" }.joined(separator: " ")
            XCTAssertEqual(
                try shell("tar -cf \(tar) -C \(dir)/src --no-recursion \(list) && mkdir \(ref) && tar -xf \(tar) -C \(ref)").status, 0)
        }

        /// Stops the run in-process inside `member`'s data.
        func interrupted(inside member: String) throws {
            let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: out + ".sluice")
            let state = try XCTUnwrap(checkpoint.stages.lazy.compactMap { $0.as(UntarState.self) }.first)
            XCTAssertEqual(state.current?.path.bytes, Array(member.utf8), "the run stopped elsewhere")
        }

        /// Runs the resume as nobody when the tests run as root (root ignores modes).
        func resume() throws -> (status: Int32, stderr: String) {
            try runSluiceUnprivileged(["-q", spec], stateDirectory: dir + "/state")
        }

        /// Everything to nobody (when root), so the resume as nobody owns the tree.
        func handToNobody() throws {
            if getuid() == 0 { XCTAssertEqual(try shell("chmod 755 \(dir) && chown -R 65534:65534 \(dir)").status, 0) }
        }
    }

    /// `zero` (mode 000), then `big`, the run stopped inside `big`.
    private func zeroThenBigStoppedInBig() throws -> Fixture {
        let fixture = try Fixture(self, members: ["zero", "big"]) { src in
            try Data(makeTestData(count: 700, seed: 63)).write(to: URL(fileURLWithPath: src + "/zero"))
            try Data(makeTestData(count: 3 << 20, seed: 64)).write(to: URL(fileURLWithPath: src + "/big"))
            XCTAssertEqual(chmod(src + "/zero", 0), 0)
        }
        try fixture.interrupted(inside: "big")
        return fixture
    }

    /// A run is killed in `finish`, after the directories got their archive modes (0555 here,
    /// the tree's root too) and before the rename — during its `syncfs`, say. Its checkpoint is
    /// from inside `ro/big`, so the rerun writes into `ro` again: it failed with exit 6
    /// "Permission denied … rerun the same command to resume", and every rerun the same.
    func testResumeAfterAKillWhileDirectoryModesWereAppliedCompletes() throws {
        let fixture = try Fixture(self, members: [".", "ro", "ro/big", "ro/later"]) { src in
            try FileManager.default.createDirectory(atPath: src + "/ro", withIntermediateDirectories: true)
            try Data(makeTestData(count: 3 << 20, seed: 61)).write(to: URL(fileURLWithPath: src + "/ro/big"))
            try Data(makeTestData(count: 900, seed: 62)).write(to: URL(fileURLWithPath: src + "/ro/later"))
            XCTAssertEqual(try shell("chmod 555 \(src)/ro \(src)").status, 0)
        }
        defer { _ = try? shell("chmod -R u+w \(fixture.dir)") }
        try fixture.interrupted(inside: "ro/big")
        // What `finish` does before its syncfs: each directory's mode, children before parents.
        XCTAssertEqual(chmod(fixture.partial + "/ro", 0o555), 0)
        XCTAssertEqual(chmod(fixture.partial, 0o555), 0)
        try fixture.handToNobody()
        let result = try fixture.resume()
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(treeDifferences(treeSnapshot(fixture.ref), treeSnapshot(fixture.out)), [])
    }

    /// A file of the tree replaced between the runs by a hard link to a file outside it that
    /// its owner cannot read: the tree check granted u+r to that outside file through
    /// /proc/self/fd and put its mode back — a change outside DIR (its ctime, and a setgid
    /// bit of a group the user is not in, which chmod by a non-member drops for good).
    func testTreeCheckNeverChangesTheModeOfAFileOutsideTheTree() throws {
        let fixture = try zeroThenBigStoppedInBig()
        let outside = fixture.dir + "/outside"
        try Data(makeTestData(count: 700, seed: 65)).write(to: URL(fileURLWithPath: outside))
        XCTAssertEqual(unlink(fixture.partial + "/zero"), 0)
        XCTAssertEqual(link(outside, fixture.partial + "/zero"), 0)
        try fixture.handToNobody()
        // Owned by the resuming user; when root runs the test, of a group nobody is not in, setgid.
        let wanted: mode_t = getuid() == 0 ? 0o2000 : 0
        if getuid() == 0 { XCTAssertEqual(chown(outside, 65534, 0), 0) }
        XCTAssertEqual(chmod(outside, wanted), 0)
        var before = stat()
        XCTAssertEqual(stat(outside, &before), 0)
        let result = try fixture.resume()
        XCTAssertEqual(result.status, 2, result.stderr)
        var after = stat()
        XCTAssertEqual(stat(outside, &after), 0)
        XCTAssertEqual(after.st_mode & 0o7777, wanted, "the outside file's mode changed")
        XCTAssertEqual(after.st_ctim.tv_sec, before.st_ctim.tv_sec, "the outside file was changed (ctime)")
        XCTAssertEqual(after.st_ctim.tv_nsec, before.st_ctim.tv_nsec, "the outside file was changed (ctime)")
    }

    /// A directory no member made (`deep`, the implied parent of `deep/a/f`), its mode changed
    /// between the runs so its owner cannot write: the resumed run failed to create
    /// `deep/later` with exit 6 "fix the problem and rerun the same command to resume", and
    /// so did every rerun (the end check that gives such directories their mode again never
    /// came). The resume gives them the default mode first, as the end check would.
    func testImpliedDirectoryMadeReadOnlyBeforeTheResumeCompletes() throws {
        let fixture = try Fixture(self, members: ["deep/a/f", "deep/big", "deep/later"]) { src in
            try FileManager.default.createDirectory(atPath: src + "/deep/a", withIntermediateDirectories: true)
            try Data(makeTestData(count: 900, seed: 66)).write(to: URL(fileURLWithPath: src + "/deep/a/f"))
            try Data(makeTestData(count: 3 << 20, seed: 67)).write(to: URL(fileURLWithPath: src + "/deep/big"))
            try Data(makeTestData(count: 900, seed: 68)).write(to: URL(fileURLWithPath: src + "/deep/later"))
        }
        try fixture.interrupted(inside: "deep/big")
        XCTAssertEqual(chmod(fixture.partial + "/deep", 0o500), 0)
        try fixture.handToNobody()
        let result = try fixture.resume()
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(
            treeDifferences(
                treeSnapshot(fixture.ref, directoryMtimes: false), treeSnapshot(fixture.out, directoryMtimes: false)), [])
    }

    /// A run killed inside the tree check's moment of u+r on a file its owner cannot read
    /// (between the grant and taking it back) left the file 0400: every rerun then refused
    /// the tree with exit 2 "changed since the checkpoint" — its own step. The file as
    /// recorded but for that bit gets its mode back.
    func testReadGrantLeftByAKillIsTakenBack() throws {
        let fixture = try zeroThenBigStoppedInBig()
        XCTAssertEqual(chmod(fixture.partial + "/zero", 0o400), 0)
        try fixture.handToNobody()
        let result = try fixture.resume()
        XCTAssertEqual(result.status, 0, result.stderr)
        var st = stat()
        XCTAssertEqual(lstat(fixture.out + "/zero", &st), 0)
        XCTAssertEqual(st.st_mode & 0o7777, 0)
    }
}
