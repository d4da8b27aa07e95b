import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Issue 8, item 6: a checkpoint is trusted only with the user's MAC, and a resume checks
/// the bytes already on disk against the checksum the checkpoint recorded.
final class CheckpointAuthTests: XCTestCase {
    private func sample() -> Checkpoint {
        Checkpoint(
            spec: "read x | file out", writtenAt: Date(timeIntervalSince1970: 0),
            source: SourceState(kind: "read", location: "x", offset: 3),
            stages: [StageState(FileSinkState(path: "out", bytesWritten: 3, crc64: 42))])
    }

    func testKeyIsMadeOnceWithPrivateModes() throws {
        let dir = try makeTemporaryDirectory(self) + "/state/sluice"
        XCTAssertNil(try CheckpointKey.existing(in: dir), "no key before the first save")
        let key = try CheckpointKey.loadOrCreate(in: dir)
        XCTAssertEqual(key.bytes.count, 32)
        XCTAssertEqual(try CheckpointKey.loadOrCreate(in: dir).bytes, key.bytes, "made once, then reused")
        XCTAssertEqual(try CheckpointKey.existing(in: dir)?.bytes, key.bytes)
        var st = stat()
        XCTAssertEqual(stat(dir + "/key", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertEqual(stat(dir, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o700)
        XCTAssertNotEqual(try CheckpointKey.loadOrCreate(in: dir + "2").bytes, key.bytes, "a new key is random")
    }

    func testKeyOthersCouldReadOrAStrayLinkIsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        _ = try CheckpointKey.loadOrCreate(in: dir)
        chmod(dir + "/key", 0o644)
        XCTAssertThrowsError(try CheckpointKey.existing(in: dir))
        unlink(dir + "/key")
        XCTAssertEqual(symlink(dir + "/elsewhere", dir + "/key"), 0)
        XCTAssertThrowsError(try CheckpointKey.loadOrCreate(in: dir), "a symlink at the key's name is not followed")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/elsewhere"))
    }

    /// A HOME where the key directory cannot be made (here a file stands in its path): the
    /// message names the key, the directory that failed, and SLUICE_STATE_DIR, which puts the
    /// key elsewhere.
    func testAKeyDirectoryThatCannotBeMadeNamesTheKeyAndTheWayOut() throws {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertTrue(FileManager.default.createFile(atPath: dir + "/home", contents: Data("x".utf8)))
        let keys = CheckpointKey.directory(environment: ["HOME": dir + "/home"])
        XCTAssertThrowsError(try CheckpointKey.loadOrCreate(in: keys)) { error in
            guard let error = error as? SluiceError, case .io(let path, _, ENOTDIR) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(path, dir + "/home/.local")
            XCTAssertEqual(error.exitCode, 6)
            let message = error.description
            for part in ["checkpoint key \(dir)/home/.local/state/sluice/key", "SLUICE_STATE_DIR", "make the directory \(dir)/home/.local:"] {
                XCTAssertTrue(message.contains(part), "\(message) — expected “\(part)”")
            }
        }
    }

    func testKeyDirectoryFollowsTheEnvironment() {
        XCTAssertEqual(CheckpointKey.directory(environment: ["SLUICE_STATE_DIR": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"]), "/s")
        XCTAssertEqual(CheckpointKey.directory(environment: ["XDG_STATE_HOME": "/x", "HOME": "/h"]), "/x/sluice")
        XCTAssertEqual(CheckpointKey.directory(environment: ["XDG_STATE_HOME": "relative", "HOME": "/h"]), "/h/.local/state/sluice")
        XCTAssertEqual(CheckpointKey.directory(environment: ["HOME": "/h"]), "/h/.local/state/sluice")
    }

    func testOnlyTheSealingKeyIsTrusted() throws {
        let data = try sample().encoded(key: .test)
        let decoded = try Checkpoint.decode(data, path: "c", key: .test)
        XCTAssertEqual(decoded.stages, sample().stages)
        XCTAssertTrue(decoded.mac?.hasPrefix("hmac-sha256:") ?? false)
        let other = CheckpointKey(bytes: Array(repeating: 8, count: 32))
        XCTAssertThrowsError(try Checkpoint.decode(data, path: "c", key: other)) { XCTAssertTrue($0 is CheckpointDistrust, "\($0)") }
        XCTAssertThrowsError(try Checkpoint.decode(data, path: "c", key: nil)) { error in
            XCTAssertTrue("\(error)".contains("no checkpoint key"), "\(error)")
        }
        // A forged field with the old MAC left in place: what someone without the key can do.
        let forged = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\"bytes_written\":3", with: "\"bytes_written\":2")
        XCTAssertNotEqual(Data(forged.utf8), data)
        XCTAssertThrowsError(try Checkpoint.decode(Data(forged.utf8), path: "c", key: .test)) { XCTAssertTrue($0 is CheckpointDistrust) }
        // The plain digest of earlier builds is no MAC.
        let unsealed = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\"mac\"", with: "\"digest\"")
        XCTAssertThrowsError(try Checkpoint.decode(Data(unsealed.utf8), path: "c", key: .test)) { XCTAssertTrue($0 is CheckpointDistrust) }
    }

    func testStoreSealsWithTheKeyInItsDirectory() throws {
        let dir = try makeTemporaryDirectory(self)
        let store = CheckpointStore(path: dir + "/ck", keyDirectory: dir + "/keys")
        try store.save(sample())
        XCTAssertEqual(try store.load()?.spec, sample().spec)
        XCTAssertThrowsError(try CheckpointStore(path: dir + "/ck", keyDirectory: dir + "/other").load()) {
            XCTAssertTrue($0 is CheckpointDistrust, "\($0)")
        }
    }

    // MARK: the partial output's checksum

    func testFileSinkResumesOnlyOverTheBytesItWrote() throws {
        let dir = try makeTemporaryDirectory(self)
        let path = dir + "/out"
        let data = makeTestData(count: 3 << 20, seed: 5)
        let sink = try FileSink(path: path)
        try data.withUnsafeBytes { try sink.write($0) }
        let state = sink.snapshot()
        XCTAssertEqual(state.bytesWritten, UInt64(data.count))
        var reference = OutputChecksum()
        data.withUnsafeBytes { reference.update($0) }
        XCTAssertEqual(state.crc64, reference.value)

        // Unchanged: the resume keeps the bytes and continues.
        let resumed = try FileSink(path: path, restoring: state)
        XCTAssertEqual(resumed.snapshot(), state)

        // One byte changed in the middle: the resume refuses to build on it.
        let fd = open(path + ".sluice-part", O_WRONLY)
        XCTAssertEqual(pwrite(fd, [data[1_000_000] ^ 1], 1, 1_000_000), 1)
        close(fd)
        XCTAssertThrowsError(try FileSink(path: path, restoring: state)) { error in
            XCTAssertEqual(error as? FileSinkError, .partialChanged(path: path + ".sluice-part", bytes: UInt64(data.count)))
        }
        // A forged length beyond off_t is refused, not trapped on.
        var huge = state
        huge.bytesWritten = 1 << 63
        XCTAssertThrowsError(try FileSink(path: path, restoring: huge))
    }

    func testStdoutFileStateWithOffsetsBeyondOffTIsRefused() throws {
        let dir = try makeTemporaryDirectory(self)
        let fd = open(dir + "/out", O_RDWR | O_CREAT, 0o600)
        defer { close(fd) }
        for state in [
            StdoutSinkState(bytesWritten: 1 << 63, fileSize: 10),
            StdoutSinkState(bytesWritten: 1, fileSize: UInt64.max),
            StdoutSinkState(bytesWritten: 1, fileSize: 1, startFileSize: 1 << 63),
        ] {
            XCTAssertThrowsError(try StdoutSink(fd: fd, restoring: state)) { error in
                XCTAssertTrue(error is StateRejected, "\(error)")
            }
        }
    }

    func testStdoutFileWhoseBytesChangedIsRefusedWithExit7() throws {
        let dir = try makeTemporaryDirectory(self)
        let fd = open(dir + "/out", O_RDWR | O_CREAT | O_APPEND, 0o600)
        defer { close(fd) }
        XCTAssertEqual(write(fd, "before\n", 7), 7)
        let sink = try StdoutSink(fd: fd)
        let data = makeTestData(count: 100_000, seed: 9)
        try data.withUnsafeBytes { try sink.write($0) }
        let state = sink.snapshot()
        XCTAssertNoThrow(try StdoutSink(fd: fd, restoring: state), "unchanged: resumes")
        // Another writer (not appending) changes one byte of what the sink wrote.
        let other = open(dir + "/out", O_WRONLY)
        XCTAssertEqual(pwrite(other, "X", 1, 50_000), 1)
        close(other)
        XCTAssertThrowsError(try StdoutSink(fd: fd, restoring: state)) { error in
            XCTAssertEqual((error as? SluiceError)?.exitCode, 7, "\(error)")
        }
    }
}
