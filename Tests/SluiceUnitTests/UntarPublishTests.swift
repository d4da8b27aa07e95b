import Foundation
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
            guard case SluiceError.unsafePath(let path, let reason)? = error as? SluiceError else {
                return XCTFail("expected unsafePath, got \(error)")
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
}
