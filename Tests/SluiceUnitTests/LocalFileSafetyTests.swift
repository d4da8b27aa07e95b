import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// RunLock, CheckpointStore, FileSink and StdoutSink against links, FIFOs, hard links and
/// files that are not theirs — in process, one call at a time.
final class LocalFileSafetyTests: XCTestCase {
    private func inode(_ path: String) -> ino_t? {
        var st = stat()
        return lstat(path, &st) == 0 ? st.st_ino : nil
    }

    private func assertUnsafePath(
        _ body: () throws -> Void, mentioning word: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            guard case SluiceError.unsafePath(_, let reason)? = error as? SluiceError else {
                return XCTFail("expected unsafePath, got \(error)", file: file, line: line)
            }
            XCTAssertTrue(reason.contains(word), reason, file: file, line: line)
            XCTAssertEqual((error as? SluiceError)?.exitCode, 2, file: file, line: line)
        }
    }

    // MARK: RunLock (item 3, 7, 19)

    func testHeldLockRefusesAnotherAndKeepsItsFile() throws {
        let path = try makeTemporaryDirectory(self) + "/out.sluice.lock"
        let holder = RunLock(path: path)
        try holder.acquire()
        let held = inode(path)
        XCTAssertThrowsError(try RunLock(path: path).acquire()) { error in
            XCTAssertEqual(error as? SluiceError, .locked(checkpoint: path))
        }
        XCTAssertEqual(inode(path), held, "the refused lock removed or replaced the holder's file")
        holder.release()
        XCTAssertNil(inode(path), "the holder leaves no lock file")
    }

    /// A lock file replaced under its holder (as another run would after the holder's
    /// file vanished): the old holder's release must not remove the new holder's file.
    func testReleaseNeverRemovesALockFileItDoesNotHold() throws {
        let path = try makeTemporaryDirectory(self) + "/l.lock"
        let first = RunLock(path: path)
        try first.acquire()
        unlink(path)
        let second = RunLock(path: path)
        try second.acquire()
        let secondFile = inode(path)
        first.release()
        XCTAssertEqual(inode(path), secondFile, "releasing one lock removed another run's lock file")
        XCTAssertThrowsError(try RunLock(path: path).acquire(), "the second holder's lock no longer excludes anyone")
        second.release()
        XCTAssertNil(inode(path))
    }

    func testLeftoverLockFileDoesNotBlock() throws {
        let path = try makeTemporaryDirectory(self) + "/l.lock"
        // What a crash leaves: sluice never writes into its lock files.
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(), attributes: [.posixPermissions: 0o400]))
        let lock = RunLock(path: path)
        try lock.acquire()
        lock.release()
        XCTAssertNil(inode(path))
    }

    /// A file with contents at a lock's name (`--checkpoint notes` beside `notes.lock`) is
    /// someone's, not a lock sluice left: it may be locked, but is never removed.
    func testLockNeverRemovesAFileWithContents() throws {
        let path = try makeTemporaryDirectory(self) + "/notes.lock"
        try Data("my notes".utf8).write(to: URL(fileURLWithPath: path))
        let lock = RunLock(path: path)
        try lock.acquire()
        lock.release()
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("my notes".utf8))
    }

    func testLinkOrFIFOAtTheLockIsRefusedUntouched() throws {
        let dir = try makeTemporaryDirectory(self)
        try HostileFile.symlink(at: dir + "/dangling.lock", to: dir + "/created-through-link")
        assertUnsafePath({ try RunLock(path: dir + "/dangling.lock").acquire() }, mentioning: "link")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/created-through-link"))
        try HostileFile.fifo(at: dir + "/fifo.lock")
        assertUnsafePath({ try RunLock(path: dir + "/fifo.lock").acquire() }, mentioning: "FIFO")
    }

    // MARK: CheckpointStore (items 7, 9, 13)

    func testCheckpointThatIsAFIFOOrALinkIsRefusedWithoutBlocking() throws {
        let dir = try makeTemporaryDirectory(self)
        try HostileFile.fifo(at: dir + "/fifo")
        assertUnsafePath({ _ = try CheckpointStore(path: dir + "/fifo").load() }, mentioning: "FIFO")
        assertUnsafePath({ _ = try CheckpointInspector(path: dir + "/fifo") }, mentioning: "FIFO")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: dir + "/target"))
        try HostileFile.symlink(at: dir + "/link", to: "target")
        assertUnsafePath({ _ = try CheckpointStore(path: dir + "/link").load() }, mentioning: "link")
    }

    func testWhatAStoredFileIs() throws {
        let dir = try makeTemporaryDirectory(self)
        let store = CheckpointStore(path: dir + "/c")
        XCTAssertEqual(try store.read(), StoredCheckpoint.none)
        for foreign in ["", "notes", "{\"format\": \"other\"}", "[]"] {
            try Data(foreign.utf8).write(to: URL(fileURLWithPath: store.path))
            XCTAssertEqual(try store.read(), .foreign(path: store.path), foreign)
        }
        try Data("{\"format\": \"sluice-checkpoint\", \"version\": 99}".utf8).write(to: URL(fileURLWithPath: store.path))
        guard case .damaged? = try? store.read() else { return XCTFail("another version of ours is damaged, not foreign") }
        let checkpoint = Checkpoint(
            spec: "read a | file b", source: SourceState(kind: "read", location: "a"),
            stages: [StageState(FileSinkState(path: "b", bytesWritten: 0))])
        try store.save(checkpoint)
        guard case .valid(let read)? = try? store.read() else { return XCTFail("a saved checkpoint does not read back") }
        XCTAssertEqual(read.spec, checkpoint.spec)
    }

    /// The temporary file is created, never opened through what is there: a link at its
    /// name fails the save and its target keeps its contents and mode.
    func testSaveNeverWritesThroughALinkAtTheTemporaryName() throws {
        let dir = try makeTemporaryDirectory(self)
        let victim = dir + "/victim"
        try Data("mine".utf8).write(to: URL(fileURLWithPath: victim))
        chmod(victim, 0o644)
        let store = CheckpointStore(path: dir + "/c")
        try HostileFile.symlink(at: store.temporaryPath, to: victim)
        let checkpoint = Checkpoint(
            spec: "read a | file b", source: SourceState(kind: "read", location: "a"),
            stages: [StageState(FileSinkState(path: "b", bytesWritten: 0))])
        XCTAssertThrowsError(try store.save(checkpoint))
        XCTAssertEqual(FileManager.default.contents(atPath: victim), Data("mine".utf8))
        var st = stat()
        stat(victim, &st)
        XCTAssertEqual(st.st_mode & 0o777, 0o644, "the link's target was chmod'ed")
        // remove() leaves links alone too.
        store.remove()
        XCTAssertNotNil(inode(store.temporaryPath))
    }

    /// Someone's file at the temporary name (`--checkpoint notes` beside `notes.tmp`) is
    /// neither removed by a save or by `remove()`, nor written: the save fails instead.
    /// Only what a save interrupted before its rename leaves (a whole checkpoint sealed with
    /// this user's key: saves link theirs there complete) is replaced; an empty file or a few
    /// bytes are someone's, refused and kept (CheckpointReplacedTests).
    func testSaveAndRemoveKeepSomeonesFileAtTheTemporaryName() throws {
        let dir = try makeTemporaryDirectory(self)
        let store = CheckpointStore(path: dir + "/notes", keyDirectory: dir + "/state")
        let checkpoint = Checkpoint(
            spec: "read a | file b", source: SourceState(kind: "read", location: "a"),
            stages: [StageState(FileSinkState(path: "b", bytesWritten: 0))])
        try Data("my notes".utf8).write(to: URL(fileURLWithPath: store.temporaryPath))
        XCTAssertThrowsError(try store.save(checkpoint))
        store.remove()
        XCTAssertEqual(FileManager.default.contents(atPath: store.temporaryPath), Data("my notes".utf8))
        let paths = RunPaths(output: nil, checkpoint: store.path, input: nil, stdout: nil)
        let probe = RunPaths.Probe.live(keyDirectory: store.keyDirectory)
        XCTAssertNotNil(paths.problem(probe: probe), "a run would start and then fail at its first checkpoint")

        for notOurs in ["", "{\"mac\":\"hmac-sha", "{\"mac\":\"hmac-sha256:00ff\",\"format\""] {
            try Data(notOurs.utf8).write(to: URL(fileURLWithPath: store.temporaryPath))
            XCTAssertNotNil(paths.problem(probe: probe), notOurs)
            XCTAssertThrowsError(try store.save(checkpoint))
            XCTAssertEqual(FileManager.default.contents(atPath: store.temporaryPath), Data(notOurs.utf8))
        }
        // What a save interrupted before its rename leaves: a whole checkpoint of this key's.
        XCTAssertEqual(unlink(store.temporaryPath), 0)
        try store.save(checkpoint)
        try FileManager.default.copyItem(atPath: store.path, toPath: store.temporaryPath)
        XCTAssertNil(paths.problem(probe: probe))
        try store.save(checkpoint)
        XCTAssertNil(inode(store.temporaryPath), "a save did not replace the leftover checkpoint")
    }

    // MARK: FileSink (item 7)

    func testPartialFileIsNeverOpenedThroughALinkOrWithOtherNames() throws {
        let dir = try makeTemporaryDirectory(self)
        let victim = dir + "/victim"
        try Data("mine".utf8).write(to: URL(fileURLWithPath: victim))
        try HostileFile.symlink(at: dir + "/a.sluice-part", to: victim)
        assertUnsafePath({ _ = try FileSink(path: dir + "/a") }, mentioning: "link")
        XCTAssertEqual(link(victim, dir + "/b.sluice-part"), 0)
        assertUnsafePath({ _ = try FileSink(path: dir + "/b") }, mentioning: "hard links")
        XCTAssertEqual(FileManager.default.contents(atPath: victim), Data("mine".utf8))
        FileSink.discard(path: dir + "/a")
        XCTAssertNotNil(inode(dir + "/a.sluice-part"), "discard removed a link it did not create")
    }

    /// A FIFO put at PATH during the run is not replaced by the final rename (item 8).
    func testFinishDoesNotReplaceWhatAppearedAtThePathDuringTheRun() throws {
        let dir = try makeTemporaryDirectory(self)
        let sink = try FileSink(path: dir + "/out")
        try Array("data".utf8).withUnsafeBytes { try sink.write($0) }
        try HostileFile.fifo(at: dir + "/out")
        // Put there during the run: exit 6 (the partial file and checkpoint stay), not exit 2.
        XCTAssertThrowsError(try sink.finish()) { error in
            guard case .obstructed(let path, let reason)? = error as? SluiceError else { return XCTFail("\(error)") }
            XCTAssertEqual(path, dir + "/out")
            XCTAssertTrue(reason.contains("a FIFO was put there during the run"), reason)
            // The sink cannot know whether a checkpoint was written (stdin, interval 0).
            XCTAssertTrue(reason.contains("a rerun resumes from the last checkpoint (with none written, it starts over)"), reason)
        }
        XCTAssertNotNil(FileManager.default.contents(atPath: dir + "/out.sluice-part"), "the output was not kept")
        var st = stat()
        XCTAssertEqual(lstat(dir + "/out", &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFIFO)
    }

    // MARK: StdoutSink (item 10)

    func testStdoutIsCutBackOnlyWhenItIsTheRecordedFile() throws {
        let dir = try makeTemporaryDirectory(self)
        let recorded = open(dir + "/log", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        let other = open(dir + "/other", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        defer {
            close(recorded)
            close(other)
        }
        let bytes = [UInt8](repeating: 0x41, count: 100)
        for fd in [recorded, other] { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        let identity = try XCTUnwrap(POSIX.fstatFacts(recorded)?.identity)
        var written = OutputChecksum()  // what a resume reads back: the 40 bytes the sink wrote
        Array(bytes.prefix(40)).withUnsafeBytes { written.update($0) }
        let state = StdoutSinkState(bytesWritten: 40, fileSize: 40, startFileSize: 10, file: identity, crc64: written.value)

        assertUnsafePath({ _ = try StdoutSink(fd: other, restoring: state) }, mentioning: "not the file the checkpoint recorded")
        assertUnsafePath({ try StdoutSink.undo(state, fd: other) }, mentioning: "not the file the checkpoint recorded")
        var unrecorded = state
        unrecorded.file = nil
        assertUnsafePath({ _ = try StdoutSink(fd: other, restoring: unrecorded) }, mentioning: "does not record")
        XCTAssertEqual(POSIX.fileSize(other), 100, "another file on stdout was cut back")

        let resumed = try StdoutSink(fd: recorded, restoring: state)
        // Cut back when the run first uses the sink: a refused restore of an earlier stage leaves it.
        XCTAssertEqual(POSIX.fileSize(recorded), 100)
        try resumed.finish()
        XCTAssertEqual(POSIX.fileSize(recorded), 40)
        try StdoutSink.undo(state, fd: recorded)
        XCTAssertEqual(POSIX.fileSize(recorded), 10)
    }
}
