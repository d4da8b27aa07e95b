import Foundation
import Synchronization
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
            guard case .obstructed(let at, _)? = error as? SluiceError else { return XCTFail("\(error)") }
            XCTAssertEqual(at, path)
        }
        XCTAssertEqual(FileManager.default.contents(atPath: path), precious)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.temporaryPath))
        store.remove()
        XCTAssertEqual(FileManager.default.contents(atPath: path), precious, "the end of the run removes only a checkpoint")
    }

    /// A file at `C.tmp` that is not a whole checkpoint (empty, a few bytes) was
    /// never sluice's — saves link theirs there only complete — so neither a save nor the end
    /// of the run removes it; a save put beside it during the run stops and says so. A whole
    /// checkpoint there (a save interrupted before its rename) is removed as before.
    func testOnlyAWholeCheckpointAtTheTemporaryNameIsRemoved() throws {
        let (store, _) = try store()
        for content in [Data(), Data("{\"mac\":\"hmac".utf8), Data("notes\n".utf8)] {
            try content.write(to: URL(fileURLWithPath: store.temporaryPath))
            XCTAssertFalse(CheckpointStore.isLeftoverTemporary(store.temporaryPath, keyDirectory: store.keyDirectory))
            XCTAssertThrowsError(try store.save(sample())) { error in
                guard case .obstructed(let at, let reason)? = error as? SluiceError else { return XCTFail("\(error)") }
                XCTAssertEqual(at, store.temporaryPath)
                XCTAssertTrue(reason.contains("sluice leaves it"), reason)
            }
            store.remove()
            XCTAssertEqual(FileManager.default.contents(atPath: store.temporaryPath), content)
            XCTAssertEqual(unlink(store.temporaryPath), 0)
        }
        try store.save(sample())
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.temporaryPath), "a save leaves nothing there")
        // What a save killed between linking its file to C.tmp and the rename leaves: a whole
        // checkpoint with that one name.
        try XCTUnwrap(FileManager.default.contents(atPath: store.path)).write(to: URL(fileURLWithPath: store.temporaryPath))
        XCTAssertTrue(CheckpointStore.isLeftoverTemporary(store.temporaryPath, keyDirectory: store.keyDirectory))
        try store.save(sample())
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.temporaryPath))
    }

    /// F2: a file at `C.tmp` was judged by its first 20 bytes, so a checkpoint cut short (a
    /// copy interrupted) or a text file that begins like one was deleted as sluice's. Only a
    /// whole checkpoint sealed with this user's key is provably what a save left; anything
    /// else is refused before the run (naming it), stops a save during it, and is kept.
    func testAFileThatOnlyBeginsLikeACheckpointAtTheTemporaryNameIsKept() throws {
        let (store, path) = try store()
        try store.save(sample())
        let whole = try XCTUnwrap(FileManager.default.contents(atPath: path))
        let elsewhere = CheckpointStore(path: path + "-elsewhere", keyDirectory: path + "-other-state")
        try elsewhere.save(sample())
        let lookalikes: [(String, Data)] = [
            ("cut short in its JSON", whole.prefix(40)),
            ("cut short by one byte", whole.dropLast()),
            ("a text file that begins like one", Data("{\"mac\":\"hmac-sha256:00ff\",\"format\": my notes\n".utf8)),
            ("sealed with another key", try XCTUnwrap(FileManager.default.contents(atPath: elsewhere.path))),
        ]
        let temporary = store.temporaryPath
        for (what, content) in lookalikes {
            try content.write(to: URL(fileURLWithPath: temporary))
            XCTAssertFalse(CheckpointStore.isLeftoverTemporary(temporary, keyDirectory: store.keyDirectory), what)
            let refusal = RunPaths(output: nil, checkpoint: path, input: nil, stdout: nil)
                .problem(probe: .live(keyDirectory: store.keyDirectory))
            if case .unsafePath(let at, let reason)? = refusal {
                XCTAssertEqual(at, temporary, what)
                XCTAssertTrue(reason.contains("sluice leaves it"), reason)
            } else {
                XCTFail("\(what): not refused before the run: \(String(describing: refusal))")
            }
            XCTAssertThrowsError(try store.save(sample()), what) { error in
                guard case .obstructed(let at, _)? = error as? SluiceError else { return XCTFail("\(what): \(error)") }
                XCTAssertEqual(at, temporary, what)
            }
            store.remove()
            XCTAssertEqual(FileManager.default.contents(atPath: temporary), content, "\(what): deleted or changed")
            XCTAssertEqual(unlink(temporary), 0)
        }
    }

    /// A whole checkpoint of ours at C.tmp that has a second name was linked there by
    /// someone (a save links its file to C.tmp only): it is kept, and so is the other name.
    func testAWholeCheckpointWithASecondNameAtTheTemporaryNameIsKept() throws {
        let (store, path) = try store()
        try store.save(sample())
        let kept = path + "-kept"
        XCTAssertEqual(link(path, kept), 0)
        XCTAssertEqual(link(kept, store.temporaryPath), 0)
        XCTAssertFalse(CheckpointStore.isLeftoverTemporary(store.temporaryPath, keyDirectory: store.keyDirectory))
        // Refused before a run for what it is: whole and sealed, but with another name.
        let paths = RunPaths(output: nil, checkpoint: path, input: nil, stdout: nil)
        guard case .unsafePath(let at, let reason)? = paths.problem(probe: .live(keyDirectory: store.keyDirectory)) else {
            return XCTFail("a checkpoint with a second name at C.tmp was not refused")
        }
        XCTAssertEqual(at, store.temporaryPath)
        XCTAssertTrue(reason.contains("under no other name"), reason)
        store.remove()
        XCTAssertTrue(FileManager.default.fileExists(atPath: store.temporaryPath), "a file with a second name was removed")
        XCTAssertEqual(unlink(store.temporaryPath), 0)
        // With its one name it is what a save interrupted before its rename leaves.
        XCTAssertEqual(rename(kept, store.temporaryPath), 0)
        XCTAssertTrue(CheckpointStore.isLeftoverTemporary(store.temporaryPath, keyDirectory: store.keyDirectory))
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

    /// F1: something put at `C.tmp` while a run goes on (a file, a link, a FIFO, a directory)
    /// stopped it with exit 2, whose row says nothing was created, though the partial output
    /// and the checkpoint stay (the rerun resumes once it is moved). It is a local fault like a
    /// failed write: exit 6, naming the name, and what was put there is left as it is.
    func testSomethingPutAtTheTemporaryNameDuringARunStopsItWithExit6AndStaysUntouched() throws {
        for kind in PlantedKind.allCases {
            let dir = try makeTemporaryDirectory(self)
            let (fifo, writer) = try EndlessWriter.fifo(in: dir)
            defer { writer.stop() }
            let out = dir + "/out"
            let temporary = CheckpointStore.temporaryPath(for: out + ".sluice")
            let planted = Mutex(false)
            var options = PipelineOptions()
            options.checkpointInterval = 64 << 10
            options.progress = { event in
                // After a checkpoint was stored: the next one meets what is put there.
                guard case .checkpoint(let offset, _) = event, offset > 0 else { return }
                let first = planted.withLock { (done: inout Bool) -> Bool in
                    defer { done = true }
                    return !done
                }
                guard first else { return }
                do {
                    try kind.plant(at: temporary, in: dir)
                } catch {
                    XCTFail("\(kind): \(error)")
                }
            }
            let pipeline = Pipeline(spec: try PipelineSpec(parsing: "read \(fifo) | file \(out)"), options: options)
            // The FIFO never ends: only the failure (or this guard, failing the test) stops the run.
            DispatchQueue.global().asyncAfter(deadline: .now() + 60) { pipeline.cancel() }
            XCTAssertThrowsError(try pipeline.run(), "\(kind)") { error in
                guard case .obstructed(let path, let reason)? = error as? SluiceError else { return XCTFail("\(kind): \(error)") }
                XCTAssertEqual(path, temporary)
                XCTAssertEqual((error as? SluiceError)?.exitCode, 6)
                XCTAssertTrue(reason.contains(kind.named), "\(kind): \(reason)")
            }
            XCTAssertEqual(POSIX.lstatFacts(temporary)?.kind, kind.fileKind, "\(kind) was not left as it was")
            if kind == .file { XCTAssertEqual(FileManager.default.contents(atPath: temporary), Data("my notes\n".utf8)) }
            if kind == .symlink { XCTAssertEqual(FileManager.default.contents(atPath: dir + "/victim"), Data("mine".utf8)) }
            let checkpoint = try XCTUnwrap(try CheckpointStore(path: out + ".sluice").load(), "\(kind): the last checkpoint is gone")
            XCTAssertGreaterThan(checkpoint.source.offset, 0)
            XCTAssertGreaterThanOrEqual(POSIX.lstatFacts(out + ".sluice-part")?.size ?? 0, checkpoint.source.offset, "\(kind)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: out))
        }
    }

    private enum PlantedKind: CaseIterable {
        case file, symlink, fifo, directory

        var fileKind: FileKind {
            switch self {
            case .file: return .regular
            case .symlink: return .symlink
            case .fifo: return .fifo
            case .directory: return .directory
            }
        }

        /// How the message names it.
        var named: String {
            switch self {
            case .file: return "a file"
            case .symlink: return "a symbolic link"
            case .fifo: return "a FIFO"
            case .directory: return "a directory"
            }
        }

        func plant(at path: String, in dir: String) throws {
            switch self {
            case .file: try Data("my notes\n".utf8).write(to: URL(fileURLWithPath: path))
            case .symlink:
                try Data("mine".utf8).write(to: URL(fileURLWithPath: dir + "/victim"))
                try HostileFile.symlink(at: path, to: dir + "/victim")
            case .fifo: try HostileFile.fifo(at: path)
            case .directory: try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            }
        }
    }
}
