import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// `read PATH` must deliver the file it opened, whole, or say it changed: a file cut short
/// while being read (truncated, rotated with copytruncate) used to end the stream early,
/// and `read | file out` exited 0 with an output that was neither the old file nor the new.
final class FileSourceChangeTests: XCTestCase {
    /// Keeps what it receives and runs `onFirstWrite` once, in the middle of the read.
    private final class InterferingSink: ByteSink {
        var received = 0
        var onFirstWrite: (() -> Void)?
        func write(_ bytes: UnsafeRawBufferPointer) throws {
            received += bytes.count
            onFirstWrite?()
            onFirstWrite = nil
        }
        func barrier(_ cut: Cut) throws {}
        func finish() throws {}
    }

    private func makeFile(bytes: Int) throws -> String {
        let path = try makeTemporaryDirectory(self) + "/in"
        try Data(makeTestData(count: bytes, seed: 7)).write(to: URL(fileURLWithPath: path))
        return path
    }

    func testFileTruncatedWhileBeingReadIsAChangeNotAnEnd() throws {
        let path = try makeFile(bytes: 64 * 1024)
        let source = try FileSource(path: path, chunkSize: 4096)
        let sink = InterferingSink()
        sink.onFirstWrite = { _ = truncate(path, 10_000) }
        XCTAssertThrowsError(try source.run(into: sink)) { error in
            guard let changed = error as? SourceChanged else { return XCTFail("expected SourceChanged, got \(error)") }
            XCTAssertTrue(changed.reason.contains("65536"), changed.reason)
        }
        XCTAssertEqual(sink.received, 10_000)
    }

    func testWholeFileStillEndsCleanly() throws {
        let path = try makeFile(bytes: 64 * 1024 + 5)
        let sink = InterferingSink()
        try FileSource(path: path, chunkSize: 4096).run(into: sink)
        XCTAssertEqual(sink.received, 64 * 1024 + 5)
    }

    func testResumedFileStillEndsCleanly() throws {
        let path = try makeFile(bytes: 10_000)
        let first = try FileSource(path: path)
        let sink = InterferingSink()
        try FileSource(path: path, resumeFrom: first.state(at: 4_000), chunkSize: 4096).run(into: sink)
        XCTAssertEqual(sink.received, 6_000)
    }

    func testAPipeHasNoSizeToReach() throws {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        let payload = [UInt8](repeating: 7, count: 1000)
        XCTAssertEqual(payload.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }, 1000)
        close(fds[1])
        defer { close(fds[0]) }
        let sink = InterferingSink()
        try FileSource(path: "/dev/fd/\(fds[0])").run(into: sink)
        XCTAssertEqual(sink.received, 1000)
    }
}
