import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// `sluice inspect` on the checkpoint of a job that is running says so — read-only: the
/// lock stays the running job's.
final class InspectRunningTests: XCTestCase {
    func testInspectSaysTheJobIsRunningAndLeavesTheLock() throws {
        let dir = try makeTemporaryDirectory(self)
        let path = dir + "/out.sluice"
        let checkpoint = Checkpoint(
            spec: "read a | file b", source: SourceState(kind: "read", location: dir + "/a"),
            stages: [StageState(FileSinkState(path: "b", bytesWritten: 0))])
        try CheckpointStore(path: path, keyDirectory: dir + "/keys").save(checkpoint)
        setenv("SLUICE_STATE_DIR", dir + "/keys", 1)
        defer { unsetenv("SLUICE_STATE_DIR") }

        XCTAssertNil(try CheckpointInspector(path: path).running, "no lock file: not running")
        let lock = RunLock(path: path + ".lock")
        try lock.acquire()
        defer { lock.release() }
        let inspector = try CheckpointInspector(path: path)
        XCTAssertEqual(inspector.running, LockHolder(pid: getpid()))
        let text = inspector.render(json: false)
        XCTAssertTrue(text.contains("running     a sluice (pid \(getpid())) holds \(path).lock: the job is running"), text)
        let json = try XCTUnwrap(
            try JSONSerialization.jsonObject(with: Data(inspector.render(json: true).utf8)) as? [String: Any])
        let running = try XCTUnwrap(json["running"] as? [String: Any], "\(json)")
        XCTAssertEqual(running["pid"] as? Int, Int(getpid()))
        XCTAssertEqual(running["lock"] as? String, path + ".lock")

        // The job's lock is still held: another run is refused, the lock file is there.
        XCTAssertThrowsError(try RunLock(path: path + ".lock").acquire()) { error in
            guard case SluiceError.locked? = error as? SluiceError else { return XCTFail("\(error)") }
        }
        XCTAssertNotNil(POSIX.lstatFacts(path + ".lock"))

        // Ended (a lock file left behind, as after kill -9, is not a running job).
        lock.release(removeFile: false)
        XCTAssertNotNil(POSIX.lstatFacts(path + ".lock"))
        XCTAssertNil(try CheckpointInspector(path: path).running)
        XCTAssertFalse(try CheckpointInspector(path: path).render(json: false).contains("running"))
    }

    func testLockHolderReadsProcLocks() throws {
        let dir = try makeTemporaryDirectory(self)
        let path = dir + "/c.lock"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        let facts = try XCTUnwrap(POSIX.lstatFacts(path))
        let device = facts.identity.device
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let spot = String(format: "%02llx:%02llx:%llu", major, minor, facts.identity.inode)
        let other = String(format: "%02llx:%02llx:%llu", major, minor, facts.identity.inode + 1)
        XCTAssertNil(LockHolder.of(path, locks: "1: FLOCK  ADVISORY  WRITE 77 \(other) 0 EOF\n"))
        XCTAssertNil(LockHolder.of(path, locks: "1: POSIX  ADVISORY  WRITE 77 \(spot) 0 EOF\n"), "not a sluice lock")
        XCTAssertNil(LockHolder.of(path, locks: "1: -> FLOCK  ADVISORY  WRITE 78 \(spot) 0 EOF\n"), "a waiter")
        XCTAssertEqual(
            LockHolder.of(path, locks: "1: FLOCK  ADVISORY  WRITE 77 \(other) 0 EOF\n2: FLOCK  ADVISORY  WRITE 4242 \(spot) 0 EOF\n"),
            LockHolder(pid: 4242))
        XCTAssertEqual(LockHolder.of(path, locks: "2: FLOCK  ADVISORY  WRITE -1 \(spot) 0 EOF\n"), LockHolder(pid: nil))
        XCTAssertNil(LockHolder.of(path, locks: nil), "unreadable /proc/locks: cannot tell")
        XCTAssertNil(LockHolder.of(dir + "/none", locks: "2: FLOCK  ADVISORY  WRITE 1 \(spot) 0 EOF\n"))
    }
}
