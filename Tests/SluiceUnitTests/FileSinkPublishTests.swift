import Foundation
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
            guard case SluiceError.unsafePath(let path, let reason)? = error as? SluiceError else {
                return XCTFail("expected unsafePath, got \(error)")
            }
            XCTAssertEqual(path, FileSink.partialPath(for: out))
            XCTAssertTrue(reason.contains("replaced"), reason)
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
}
