import Foundation
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// untar renames DIR.sluice-part by name at the end: only the directory this run extracted
/// into may become DIR, never one put at that name during the run.
final class UntarPublishTests: XCTestCase {
    private func extracting(into out: String, in dir: String) throws -> UntarSink {
        try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
        try Data("archived".utf8).write(to: URL(fileURLWithPath: dir + "/src/a"))
        XCTAssertEqual(try shell("tar -cf \(dir)/a.tar -C \(dir)/src .").status, 0)
        let sink = try UntarSink(directory: out)
        try Data(contentsOf: URL(fileURLWithPath: dir + "/a.tar")).withUnsafeBytes { try sink.write($0) }
        return sink
    }

    func testAPartialTreeReplacedDuringTheRunIsNotPublished() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let sink = try extracting(into: out, in: dir)
        let part = UntarSink.partialPath(for: out)
        XCTAssertEqual(rename(part, dir + "/moved"), 0)
        try FileManager.default.createDirectory(atPath: part, withIntermediateDirectories: false)
        try Data("someone else's".utf8).write(to: URL(fileURLWithPath: part + "/evil"))
        XCTAssertThrowsError(try sink.finish()) { error in
            // Put there during the run: exit 6, not the exit 2 of a refusal that changed nothing.
            guard case SluiceError.obstructed(let path, let reason)? = error as? SluiceError else {
                return XCTFail("expected obstructed, got \(error)")
            }
            XCTAssertEqual(path, part)
            XCTAssertTrue(reason.contains("replaced"), reason)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: out), "another tree was published as DIR")
        XCTAssertTrue(FileManager.default.fileExists(atPath: part + "/evil"))
    }

    func testAnUntouchedPartialTreeIsPublished() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        try extracting(into: out, in: dir).finish()
        XCTAssertEqual(try String(contentsOfFile: out + "/a", encoding: .utf8), "archived")
        XCTAssertFalse(FileManager.default.fileExists(atPath: UntarSink.partialPath(for: out)))
    }

    /// F5: a run with `--checkpoint C` stopped after DIR.sluice-part became DIR and before C
    /// was removed: the rerun said only "DIR exists and is not empty; name a new or empty
    /// directory". It says what happened and what to do, as it does for `DIR.sluice`.
    func testACheckpointNamedElsewhereLeftBesideACompletedTreeIsExplained() throws {
        let dir = try makeTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
        for name in ["a", "b", "c"] {
            try Data(makeTestData(count: 300_000, seed: UInt64(name.utf8.first ?? 0))).write(to: URL(fileURLWithPath: dir + "/src/" + name))
        }
        XCTAssertEqual(try shell("tar -cf \(dir)/in.tar -C \(dir)/src .").status, 0)
        let checkpoint = dir + "/elsewhere"
        let spec = "read \(dir)/in.tar | untar \(dir)/out"
        let saved = Mutex<Data?>(nil)
        let stored = DispatchSemaphore(value: 0)
        var options = PipelineOptions()
        options.checkpointPath = checkpoint
        options.checkpointInterval = 64 << 10
        options.progress = { event in
            switch event {
            case .checkpoint(let offset, _) where offset > 0:
                saved.withLock { $0 = FileManager.default.contents(atPath: checkpoint) }
                stored.signal()
            case .progress:
                // The source waits (on its first report, past a cut) until a checkpoint after
                // the start is stored: the run would otherwise outrun the checkpoint writer.
                if saved.withLock({ $0 == nil }) { XCTAssertEqual(stored.wait(timeout: .now() + 60), .success) }
            default: break
            }
        }
        try Pipeline(spec, options: options).run()
        // What a kill between the rename and the checkpoint's removal leaves.
        try XCTUnwrap(saved.withLock { $0 }, "no checkpoint was written").write(to: URL(fileURLWithPath: checkpoint))

        options.progress = nil
        XCTAssertThrowsError(try Pipeline(spec, options: options).run()) { error in
            guard case .usage(let message)? = error as? SluiceError else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("\(checkpoint) is left from a run that completed it"), message)
            XCTAssertTrue(message.contains("remove \(checkpoint)"), message)
        }
        XCTAssertNotNil(FileManager.default.contents(atPath: checkpoint), "the checkpoint is the user's to remove")
    }
}
