import Foundation
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// The file sink renames its partial file by name at the end: it must publish only the file
/// it wrote, never one put at that name during the run.
final class FileSinkPublishTests: XCTestCase {
    private func write(_ sink: FileSink, _ text: String) throws {
        try Array(text.utf8).withUnsafeBytes { try sink.write($0) }
    }

    func testAPartialFileReplacedDuringTheRunIsNotPublished() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let sink = try FileSink(path: out)
        try write(sink, "the verified bytes")
        // What `sluice 'read other | file out.sluice-part'` does at its end, while this run goes on.
        let other = dir + "/other"
        try Data("someone else's bytes".utf8).write(to: URL(fileURLWithPath: other))
        XCTAssertEqual(rename(other, FileSink.partialPath(for: out)), 0)
        XCTAssertThrowsError(try sink.finish()) { error in
            // Put there during the run: exit 6, not the exit 2 of a refusal that changed nothing.
            guard case SluiceError.obstructed(let path, let reason)? = error as? SluiceError else {
                return XCTFail("expected obstructed, got \(error)")
            }
            XCTAssertEqual(path, FileSink.partialPath(for: out))
            XCTAssertTrue(reason.contains("replaced"), reason)
            XCTAssertEqual((error as? SluiceError)?.exitCode, 6)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: out), "another file was published as the output")
        XCTAssertEqual(try String(contentsOfFile: FileSink.partialPath(for: out), encoding: .utf8), "someone else's bytes")
    }

    func testAPartialFileRemovedDuringTheRunIsNotReplacedByNothing() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        try Data("older output".utf8).write(to: URL(fileURLWithPath: out))
        let sink = try FileSink(path: out)
        try write(sink, "bytes")
        XCTAssertEqual(unlink(FileSink.partialPath(for: out)), 0)
        XCTAssertThrowsError(try sink.finish())
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "older output")
    }

    func testAnUntouchedPartialFileIsPublished() throws {
        let dir = try makeTemporaryDirectory(self)
        let out = dir + "/out"
        let sink = try FileSink(path: out)
        try write(sink, "all of it")
        try sink.finish()
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "all of it")
        XCTAssertFalse(FileManager.default.fileExists(atPath: FileSink.partialPath(for: out)))
    }

    /// F3: a checkpoint whose partial file is gone (its run published `out` and was killed
    /// before removing the checkpoint), with an `out` that cannot be resumed on: the restart
    /// said the partial file was "shorter than N bytes" and nothing of `out`. It says the
    /// partial file is missing, and why `out` was not used.
    func testAMissingPartialFileIsCalledMissingAndWhyTheOutputWasNotUsedIsSaid() throws {
        let data = Data(makeTestData(count: 300_000, seed: 23))
        let recorded = 100_000
        for (what, published, why) in [
            ("no output", nil, nil),
            ("a changed output", data.prefix(10) + Data([data[10] ^ 0xff]) + data.dropFirst(11), "are not the ones the checkpoint records"),
            ("a shorter output", data.prefix(recorded - 1), "holds 99999 bytes, fewer than the 100000 bytes the checkpoint records"),
        ] as [(String, Data?, String?)] {
            let dir = try makeTemporaryDirectory(self)
            let out = dir + "/out"
            try data.write(to: URL(fileURLWithPath: dir + "/in.bin"))
            let spec = try PipelineSpec(parsing: "read \(dir)/in.bin | file \(out)")
            var crc = OutputChecksum()
            data.prefix(recorded).withUnsafeBytes { crc.update($0) }
            try CheckpointStore(path: out + ".sluice").save(
                Checkpoint(
                    spec: spec.checkpointIdentity, source: try FileSource(path: dir + "/in.bin").state(at: UInt64(recorded)),
                    stages: [StageState(FileSinkState(path: out, bytesWritten: UInt64(recorded), crc64: crc.value))]))
            if let published {
                try published.write(to: URL(fileURLWithPath: out))
            }
            let said = Mutex<[String]>([])
            var options = PipelineOptions()
            options.progress = { event in
                switch event {
                case .notice(let text), .restart(let text): said.withLock { $0.append(text) }
                default: break
                }
            }
            try Pipeline(spec: spec, options: options).run()
            XCTAssertEqual(FileManager.default.contents(atPath: out), data, what)
            let lines = said.withLock { $0 }
            let restart = lines.filter { $0.contains("starting over") }
            XCTAssertEqual(restart.count, 1, "\(what): \(lines)")
            XCTAssertTrue(restart.allSatisfy { $0.contains(".sluice-part: it is missing") }, "\(what): \(lines)")
            XCTAssertFalse(lines.contains { $0.contains("shorter than") }, "\(what): \(lines)")
            let aboutOutput = lines.filter { $0.hasPrefix(out + " is there") }
            if let why {
                XCTAssertEqual(aboutOutput.count, 1, "\(what): \(lines)")
                XCTAssertTrue(aboutOutput.allSatisfy { $0.contains(why) && $0.contains("cannot resume on it") }, "\(what): \(lines)")
            } else {
                XCTAssertEqual(aboutOutput, [], what)
            }
        }
    }
}
