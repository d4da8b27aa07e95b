import Foundation
import XCTest
@testable import Sluice

/// Runs `spec` in this process and cancels it at its first progress event, which the source
/// thread reports in the middle of its first write: the run stops there and saves a
/// checkpoint at `checkpoint`, whatever the timing. Returns that checkpoint.
@discardableResult
func runCancelledAtFirstProgress(
    _ spec: String, checkpoint: String, options: PipelineOptions = PipelineOptions(),
    file: StaticString = #filePath, line: UInt = #line
) throws -> Checkpoint {
    var options = options
    options.checkpointInterval = 64 << 10
    let box = CancelBox()
    options.progress = { event in
        if case .progress = event { box.cancel() }
    }
    let pipeline = try Pipeline(spec, options: options)
    box.pipeline = pipeline
    XCTAssertThrowsError(try pipeline.run(), file: file, line: line) {
        XCTAssertEqual($0 as? SluiceError, .cancelled, file: file, line: line)
    }
    return try XCTUnwrap(try CheckpointStore(path: checkpoint).load(), "a checkpoint remains", file: file, line: line)
}

private final class CancelBox: @unchecked Sendable {
    var pipeline: Pipeline?

    func cancel() {
        pipeline?.cancel()
    }
}
