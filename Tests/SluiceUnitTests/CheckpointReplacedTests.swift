import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Found by the second external audit: a file put at the checkpoint path during a run (the
/// output of another sluice run named like it, `cp notes out.sluice`) was renamed over by
/// the next checkpoint and deleted when the run finished.
final class CheckpointReplacedTests: XCTestCase {
    private func sample() -> Checkpoint {
        Checkpoint(
            spec: "read x | file out", writtenAt: Date(timeIntervalSince1970: 0),
            source: SourceState(kind: "read", location: "x", offset: 3),
            stages: [StageState(FileSinkState(path: "out", bytesWritten: 3, crc64: 42))])
    }

    private func store() throws -> (CheckpointStore, String) {
        let dir = try makeTemporaryDirectory(self)
        return (CheckpointStore(path: dir + "/c", keyDirectory: dir + "/state"), dir + "/c")
    }

    func testAFileReplacingTheCheckpointDuringTheRunIsNeitherOverwrittenNorRemoved() throws {
        let (store, path) = try store()
        try store.save(sample())
        let precious = Data("someone's file, not a checkpoint\n".utf8)
        XCTAssertEqual(unlink(path), 0)
        try precious.write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try store.save(sample())) { error in
            guard case .unsafePath(let at, _)? = error as? SluiceError else { return XCTFail("\(error)") }
            XCTAssertEqual(at, path)
        }
        XCTAssertEqual(FileManager.default.contents(atPath: path), precious)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.temporaryPath))
        store.remove()
        XCTAssertEqual(FileManager.default.contents(atPath: path), precious, "the end of the run removes only a checkpoint")
    }

    /// A file at `C.tmp` that does not begin as a whole checkpoint (empty, a few bytes) was
    /// never sluice's — saves link theirs there only complete — so neither a save nor the end
    /// of the run removes it; a save put beside it during the run stops and says so. A whole
    /// checkpoint there (a save interrupted before its rename) is removed as before.
    func testOnlyAWholeCheckpointAtTheTemporaryNameIsRemoved() throws {
        let (store, _) = try store()
        for content in [Data(), Data("{\"mac\":\"hmac".utf8), Data("notes\n".utf8)] {
            try content.write(to: URL(fileURLWithPath: store.temporaryPath))
            XCTAssertFalse(CheckpointStore.isLeftoverTemporary(store.temporaryPath))
            XCTAssertThrowsError(try store.save(sample())) { error in
                guard case .unsafePath(let at, let reason)? = error as? SluiceError else { return XCTFail("\(error)") }
                XCTAssertEqual(at, store.temporaryPath)
                XCTAssertTrue(reason.contains("sluice leaves it"), reason)
            }
            store.remove()
            XCTAssertEqual(FileManager.default.contents(atPath: store.temporaryPath), content)
            XCTAssertEqual(unlink(store.temporaryPath), 0)
        }
        try store.save(sample())
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.temporaryPath), "a save leaves nothing there")
        XCTAssertEqual(link(store.path, store.temporaryPath), 0)
        XCTAssertTrue(CheckpointStore.isLeftoverTemporary(store.temporaryPath))
        try store.save(sample())
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.temporaryPath))
    }

    func testTheStoresOwnCheckpointIsReplacedAndRemoved() throws {
        let (store, path) = try store()
        try store.save(sample())
        try store.save(sample())
        XCTAssertEqual(try store.load()?.source.offset, 3)
        store.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }

    /// A damaged checkpoint whose JSON was reformatted by hand (it still says it is one) is
    /// what `--restart` removes: the store read it as a checkpoint.
    func testAReformattedDamagedCheckpointTheStoreReadIsRemoved() throws {
        let (store, path) = try store()
        try Data("{ \"format\": \"sluice-checkpoint\", \"version\": 3 }\n".utf8).write(to: URL(fileURLWithPath: path))
        guard case .damaged = try store.read() else { return XCTFail("not judged a damaged checkpoint") }
        store.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }

    /// A checkpoint cut short inside its JSON was "not a sluice checkpoint", which `--restart`
    /// never removes; it begins as one, so it is a damaged checkpoint.
    func testACheckpointCutShortIsDamagedNotForeign() throws {
        let (store, path) = try store()
        try store.save(sample())
        XCTAssertEqual(truncate(path, 60), 0)
        guard case .damaged(let error) = try store.read() else { return XCTFail("not judged a damaged checkpoint") }
        XCTAssertEqual(error.exitCode, 2)
        store.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }
}
