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
        let (fifo, writer) = try EndlessWriter.fifo(in: dir)
        defer { writer.stop() }
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
