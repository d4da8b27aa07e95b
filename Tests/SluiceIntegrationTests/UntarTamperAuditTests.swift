import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The second external audit's untar cases: the partial tree changed between an interrupted
/// run and its resume. Each must end in the archive's exact tree or a refusal that blames the
/// partial tree — never exit 0 with another tree, never "corrupt data" for a good archive.
/// A tar of a symlink, a 3 MiB file and a directory, a run of `read | untar` stopped
/// in-process inside the big file's data, and the archive's tree extracted by GNU tar.
struct TamperFixture {
    let dir: String
    var tar: String { dir + "/a.tar" }
    var out: String { dir + "/out" }
    var ref: String { dir + "/ref" }
    var spec: String { "read \(tar) | untar \(out)" }
    var partial: String { out + ".sluice-part" }

    init(_ test: XCTestCase) throws {
        dir = try makeMemoryTemporaryDirectory(test)
        setenv("SLUICE_STATE_DIR", dir + "/state", 1)
        test.addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
        try FileManager.default.createDirectory(atPath: dir + "/src/sub", withIntermediateDirectories: true)
        // A symlink first, then the big file the run is stopped in, then a directory.
        XCTAssertEqual(try shell("ln -s big \(dir)/src/alink && touch -h -d @1600000000 \(dir)/src/alink").status, 0)
        try Data(makeTestData(count: 3 << 20, seed: 41)).write(to: URL(fileURLWithPath: dir + "/src/big"))
        try Data(makeTestData(count: 5000, seed: 42)).write(to: URL(fileURLWithPath: dir + "/src/sub/small"))
        XCTAssertEqual(
            try shell("tar -cf \(tar) -C \(dir)/src alink big sub && mkdir \(ref) && tar -xf \(tar) -C \(ref)").status, 0)
    }

    /// Stops the run in-process inside `big`'s data (the file being written at the cut).
    func interruptedInsideBig() throws {
        let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: out + ".sluice")
        let state = try XCTUnwrap(checkpoint.stages.lazy.compactMap { $0.as(UntarState.self) }.first)
        XCTAssertEqual(try XCTUnwrap(state.current, "the run stopped outside big's data").path.bytes, Array("big".utf8))
    }

    /// Exit 0 only with the archive's tree; otherwise exit 2 (the partial tree is blamed) and no DIR.
    func assertExactTreeOrRefused(_ result: SluiceBinary.Result, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(result.signalled, result.stderr, file: file, line: line)
        if result.status == 0 {
            XCTAssertEqual(treeDifferences(treeSnapshot(ref), treeSnapshot(out)), [], file: file, line: line)
        } else {
            XCTAssertEqual(result.status, 2, result.stderr, file: file, line: line)
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), file: file, line: line)
        }
    }
}

/// The second external audit's untar cases: the partial tree changed between an interrupted
/// run and its resume. Each must end in the archive's exact tree or a refusal that blames the
/// partial tree — never exit 0 with another tree.
final class UntarTamperAuditTests: XCTestCase {
    /// The file being written at the cut had its mode changed before the resume: the resumed
    /// run continued in it and kept the changed mode (exit 0, `big` mode 000 in DIR).
    func testModeOfTheFileBeingWrittenIsRestored() throws {
        let fixture = try TamperFixture(self)
        try fixture.interruptedInsideBig()
        XCTAssertEqual(chmod(fixture.partial + "/big", 0), 0)
        let result = try SluiceBinary.run(["-q", fixture.spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        fixture.assertExactTreeOrRefused(result)
    }

    /// The same with the mode widened (an executable bit the archive never set).
    func testWidenedModeOfTheFileBeingWrittenIsRestored() throws {
        let fixture = try TamperFixture(self)
        try fixture.interruptedInsideBig()
        XCTAssertEqual(chmod(fixture.partial + "/big", 0o755), 0)
        let result = try SluiceBinary.run(["-q", fixture.spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        fixture.assertExactTreeOrRefused(result)
    }

    /// Run as a user without CAP_DAC_OVERRIDE, a resume whose tree holds a file the archive
    /// made unreadable to its owner (mode 000, 200) failed at the very end with exit 6
    /// "cannot open …/zero: Permission denied; … rerun the same command to resume" — and
    /// every rerun failed the same way. A fresh run extracts the same archive with exit 0.
    /// The tree check now reads such a file of ours through a moment's u+r.
    func testResumeOfATreeWithAFileItsOwnerCannotReadCompletes() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        setenv("SLUICE_STATE_DIR", dir + "/state", 1)
        addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
        let tar = dir + "/a.tar", out = dir + "/out"
        try FileManager.default.createDirectory(atPath: dir + "/src/p", withIntermediateDirectories: true)
        try Data(makeTestData(count: 700, seed: 51)).write(to: URL(fileURLWithPath: dir + "/src/p/zero"))
        try Data(makeTestData(count: 3 << 20, seed: 52)).write(to: URL(fileURLWithPath: dir + "/src/p/later"))
        XCTAssertEqual(try shell("chmod 000 \(dir)/src/p/zero && tar -cf \(tar) -C \(dir)/src --no-recursion p p/zero p/later").status, 0)
        let spec = "read \(tar) | untar \(out)"
        let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: out + ".sluice")
        let state = try XCTUnwrap(checkpoint.stages.lazy.compactMap { $0.as(UntarState.self) }.first)
        XCTAssertEqual(state.current?.path.bytes, Array("p/later".utf8), "the run stopped after p/zero, inside p/later")
        var st = stat()
        XCTAssertEqual(lstat(out + ".sluice-part/p/zero", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0, "p/zero got its mode 000")
        // Resume as a user whom permissions bind: root hands everything to nobody first.
        if getuid() == 0 { XCTAssertEqual(try shell("chmod 755 \(dir) && chown -R 65534:65534 \(dir)").status, 0) }
        let result = try runSluiceUnprivileged(["-q", spec], stateDirectory: dir + "/state")
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: out + "/p/later")?.count, 3 << 20)
        XCTAssertEqual(lstat(out + "/p/zero", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0)
        XCTAssertEqual(st.st_size, 700)
    }

    /// A directory the archive implies (`deep/a/f` without a `deep/` member) is made with the
    /// default mode, and neither the ledger nor the directory list kept it: `chmod 1777` on it
    /// between the runs reached DIR with exit 0 (a world-writable directory no member asked for).
    func testModeOfAnImpliedDirectoryIsRestored() throws {
        let fixture = try TamperFixture(self)
        // A second archive: implied directories, then the big file the run stops in.
        let tar = fixture.dir + "/implied.tar", out = fixture.dir + "/implied", ref = fixture.dir + "/implied-ref"
        try FileManager.default.createDirectory(atPath: fixture.dir + "/src2/deep/a", withIntermediateDirectories: true)
        try Data(makeTestData(count: 900, seed: 43)).write(to: URL(fileURLWithPath: fixture.dir + "/src2/deep/a/f"))
        try Data(makeTestData(count: 3 << 20, seed: 44)).write(to: URL(fileURLWithPath: fixture.dir + "/src2/big"))
        XCTAssertEqual(
            try shell(
                "tar -cf \(tar) -C \(fixture.dir)/src2 --no-recursion deep/a/f big && mkdir \(ref) && tar -xf \(tar) -C \(ref)"
            ).status, 0)
        let spec = "read \(tar) | untar \(out)"
        let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: out + ".sluice")
        let state = try XCTUnwrap(checkpoint.stages.lazy.compactMap { $0.as(UntarState.self) }.first)
        XCTAssertEqual(state.current?.path.bytes, Array("big".utf8))
        XCTAssertEqual(chmod(out + ".sluice-part/deep", 0o1777), 0)
        XCTAssertEqual(chmod(out + ".sluice-part/deep/a", 0o700), 0)
        let result = try SluiceBinary.run(["-q", spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        // Implied directories get the time they were made, as with GNU tar: modes must match.
        XCTAssertEqual(
            treeDifferences(treeSnapshot(ref, directoryMtimes: false), treeSnapshot(out, directoryMtimes: false)), [])
    }

    /// A symlink's mtime is restored by untar (README: "mtimes … are restored, on symlinks
    /// too"); the ledger hashed only its target, so `touch -h` on a symlink extracted before
    /// the cut came out in DIR with exit 0. Its hash now covers the mtime.
    func testSymlinkMtimeChangedBeforeTheResumeIsNotExitZero() throws {
        let fixture = try TamperFixture(self)
        try fixture.interruptedInsideBig()
        XCTAssertEqual(try shell("touch -h -d @1700000000 \(fixture.partial)/alink").status, 0)
        fixture.assertExactTreeOrRefused(try SluiceBinary.run(["-q", fixture.spec]))
    }

    /// A non-empty directory planted where a later member will be written: the resumed run
    /// failed with exit 5 "corrupt tar data … would replace a directory that is not empty"
    /// and removed the checkpoint and the partial tree, though the archive is fine. A
    /// resumed run that must refuse a member now checks the tree first: exit 2, both kept.
    func testNonEmptyDirectoryPlantedAtALaterMemberIsNotCorruptData() throws {
        let fixture = try TamperFixture(self)
        try fixture.interruptedInsideBig()
        XCTAssertEqual(try shell("mkdir -p \(fixture.partial)/sub/small && touch \(fixture.partial)/sub/small/x").status, 0)
        fixture.assertExactTreeOrRefused(try SluiceBinary.run(["-q", fixture.spec]))
    }
}
