import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// unzstd plans blocks (literals, sequences) ahead on a worker thread: cuts taken while
/// blocks are in flight record exactly the state one block at a time records, errors found
/// by the worker carry their own block's offset, and the worker always stops.
final class ZstdPlanAheadTests: XCTestCase {
    /// One frame of many blocks (zstd -3 on 1.5 MB), and where each block's content starts and ends.
    private func multiBlockFrame() throws -> (zst: [UInt8], plain: [UInt8], blocks: [Range<Int>]) {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 1_500_000, seed: 77)
        let zst = try zstdCompress(plain, "-3", in: dir)
        var at = 4
        at += ZstdFrameHeader.size(descriptor: zst[at])
        var blocks: [Range<Int>] = []
        while true {
            let header = Int(zst[at]) | Int(zst[at + 1]) << 8 | Int(zst[at + 2]) << 16
            let size = (header >> 1) & 3 == 1 ? 1 : header >> 3
            blocks.append(at + 3..<at + 3 + size)
            at += 3 + size
            if header & 1 != 0 { break }
        }
        XCTAssertGreaterThan(blocks.count, 8)
        return (zst, plain, blocks)
    }

    func testCutsWithBlocksInFlightRecordTheSequentialState() throws {
        let (zst, plain, blocks) = try multiBlockFrame()
        var sawInFlight = false
        // A cut right after each block's last byte (blocks queued), and inside blocks.
        let points = blocks.map(\.upperBound) + blocks.map { $0.lowerBound + $0.count / 2 }
        for cut in points.sorted() {
            let ahead = MemorySink()
            let planned = try ZstdDecoder(next: ahead, planAhead: true)
            let oneByOne = MemorySink()
            let sequential = try ZstdDecoder(next: oneByOne, planAhead: false)
            try zst[0..<cut].withUnsafeBytes {
                try planned.write($0)
                try sequential.write($0)
            }
            XCTAssertEqual(sequential.blocksInFlight, 0)
            if planned.blocksInFlight > 0 { sawInFlight = true }
            let checkpoint = try roundTripped(takeCut(planned, offset: cut, spec: "read x | unzstd | stdout"))
            XCTAssertEqual(planned.blocksInFlight, 0, "a barrier executes every block in flight")
            let reference = try takeCut(sequential, offset: cut, spec: "read x | unzstd | stdout")
            XCTAssertEqual(
                checkpoint.stages.first?.as(ZstdState.self), reference.stages.first?.as(ZstdState.self), "cut at \(cut)")
            XCTAssertEqual(ahead.bytes, oneByOne.bytes)

            let sink = MemorySink(restoring: checkpoint.stages.last?.as(StdoutSinkState.self), previous: ahead.bytes)
            let resumed = try ZstdDecoder(next: sink, restoring: checkpoint.stages.first?.as(ZstdState.self), planAhead: true)
            try zst[cut...].withUnsafeBytes { try resumed.write($0) }
            try resumed.finish()
            XCTAssertEqual(sink.bytes, plain, "cut at \(cut)")
        }
        XCTAssertTrue(sawInFlight, "no cut landed with a block in flight: the test proves nothing")
        XCTAssertEqual(ZstdBlockPlanner.liveWorkers.load(ordering: .relaxed), 0)
    }

    /// A block whose sequences bitstream lacks its end marker is refused by the planner;
    /// the error names that block's offset, the blocks before it are written, and nothing hangs.
    func testCorruptBlockFoundAheadFailsAtItsOffset() throws {
        let (zst, plain, blocks) = try multiBlockFrame()
        for victim in [1, blocks.count / 2, blocks.count - 2] {
            var bad = zst
            bad[blocks[victim].upperBound - 1] = 0
            var errors: [SluiceError] = []
            var outputs: [[UInt8]] = []
            for planAhead in [true, false] {
                let sink = MemorySink()
                do {
                    let decoder = try ZstdDecoder(next: sink, planAhead: planAhead)
                    try write(bad, to: decoder, chunk: 50_000)
                    try decoder.finish()
                    XCTFail("corrupt block \(victim) was accepted")
                } catch let error as SluiceError {
                    errors.append(error)
                }
                outputs.append(sink.bytes)
            }
            XCTAssertEqual(errors.first, errors.last)
            guard case .corruptData(let format, let offset, _) = errors[0] else {
                return XCTFail("expected corrupt data, got \(errors[0])")
            }
            XCTAssertEqual(format, "zstd")
            XCTAssertEqual(offset, UInt64(blocks[victim].lowerBound), "block \(victim)")
            XCTAssertEqual(outputs[0], outputs[1])
            XCTAssertEqual(outputs[0], Array(plain.prefix(outputs[0].count)))
            XCTAssertEqual(ZstdBlockPlanner.liveWorkers.load(ordering: .relaxed), 0, "the worker outlived its decoder")
        }
    }

    /// The worker is stopped when the decoder goes away mid-frame, with blocks queued.
    func testWorkerStopsWhenTheDecoderIsDropped() throws {
        let (zst, _, blocks) = try multiBlockFrame()
        do {
            let decoder = try ZstdDecoder(next: MemorySink(), planAhead: true)
            try zst[0..<blocks[5].upperBound].withUnsafeBytes { try decoder.write($0) }
            XCTAssertGreaterThan(ZstdBlockPlanner.liveWorkers.load(ordering: .relaxed), 0)
        }
        XCTAssertEqual(ZstdBlockPlanner.liveWorkers.load(ordering: .relaxed), 0)
    }

    /// A frame of tiny blocks (empty raw and empty compressed ones, 3–5 bytes each) is
    /// decoded on the stage's thread: each block a round trip through the worker made a
    /// hostile 9 MB file of them take ~10 s (zstd -dc: 0.08 s). A normal frame still queues.
    func testTinyBlocksAreDecodedWithoutTheWorker() throws {
        var zst: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00]  // no checksum, 1 KiB window
        for i in 0..<20_000 {
            // An empty raw block, or an empty compressed one (no literals, no sequences).
            zst += i % 2 == 0 ? [0x00, 0x00, 0x00] : [0x14, 0x00, 0x00, 0x00, 0x00]
        }
        zst += [0x03, 0x00, 0x00, 0x41]  // the last block: RLE, one byte 'A'... of size 0
        let sink = MemorySink()
        let decoder = try ZstdDecoder(next: sink, planAhead: true)
        try zst.withUnsafeBytes { try decoder.write($0) }
        try decoder.finish()
        XCTAssertEqual(sink.bytes, [])
        XCTAssertFalse(decoder.queuedAnyBlock)

        let (normal, plain, _) = try multiBlockFrame()
        let normalSink = MemorySink()
        let planned = try ZstdDecoder(next: normalSink, planAhead: true)
        try normal.withUnsafeBytes { try planned.write($0) }
        try planned.finish()
        XCTAssertTrue(normalSink.bytes == plain)
        XCTAssertTrue(planned.queuedAnyBlock)
    }
}
