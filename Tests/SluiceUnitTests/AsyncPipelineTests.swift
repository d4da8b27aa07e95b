import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The library as Swift callers use it: `try await pipeline.run()`, progress as an
/// `AsyncStream`, cancellation through the task.
final class AsyncPipelineTests: XCTestCase {
    func testAsyncRunDeliversTheOutputAndEndsTheEventStream() async throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 300_000, seed: 5)
        try Data(GzipMember(data: plain).encoded()).write(to: URL(fileURLWithPath: dir + "/in.gz"))
        let pipeline = try Pipeline("read \(dir)/in.gz | gunzip | file \(dir)/out")

        async let report = pipeline.run()
        var events: [ProgressEvent] = []
        for await event in pipeline.events { events.append(event) }  // ends when the run does

        let sourceBytes = try await report.sourceBytes
        XCTAssertGreaterThan(sourceBytes, 0)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/out")), Data(plain))
        guard case .start? = events.first, case .done(_, let output, _)? = events.last else {
            return XCTFail("expected start … done, got \(events)")
        }
        XCTAssertEqual(output, UInt64(plain.count))
    }

    /// A FIFO that keeps delivering bytes until the run ends: the run cannot finish on
    /// its own, so only cancelling the task ends it.
    func testCancellingTheTaskStopsTheRun() async throws {
        let dir = try makeTemporaryDirectory(self)
        let fifo = dir + "/endless"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let writer = EndlessWriter(path: fifo)
        defer { writer.stop() }

        signal(SIGPIPE, SIG_IGN)  // the writer outlives the reader
        let pipeline = try Pipeline("read \(fifo) | file \(dir)/out")
        let run = Task { try await pipeline.run() }
        for await event in pipeline.events {
            if case .progress = event { break }  // bytes are flowing: now cancel
        }
        run.cancel()
        do {
            _ = try await run.value
            XCTFail("a cancelled run must not succeed")
        } catch let error as SluiceError {
            XCTAssertEqual(error, .cancelled)
        }
    }
}

/// Writes 64 KiB chunks into a FIFO from its own thread until stopped (or the reader leaves).
private final class EndlessWriter: @unchecked Sendable {
    private let stopped = NSLock()
    private var isStopped = false

    init(path: String) {
        let thread = Thread { [self] in
            let fd = open(path, O_WRONLY)
            guard fd >= 0 else { return }
            defer { close(fd) }
            let chunk = [UInt8](repeating: 0x61, count: 64 << 10)
            while !shouldStop() {
                if chunk.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) < 0 { return }
            }
        }
        thread.start()
    }

    private func shouldStop() -> Bool {
        stopped.lock()
        defer { stopped.unlock() }
        return isStopped
    }

    func stop() {
        stopped.lock()
        isStopped = true
        stopped.unlock()
    }
}
