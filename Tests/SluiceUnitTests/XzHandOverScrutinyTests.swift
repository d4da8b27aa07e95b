import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A worker decodes its next block into the buffer the relay is still writing out
/// (`Relay.handOverPiece` at a time). Here the sink is slow and suspicious: it reads every
/// piece several times while it "writes" it, so a worker trailing it always waits at the
/// relay's position, and a byte of the next block written where the relay has not been
/// yet shows as a piece that changed under the sink or that differs from xz's output.
/// Blocks are very compressible (the decoder outruns the sink) and of varied sizes, with
/// and without filters, in concatenated streams, on two to four decoders.
final class XzHandOverScrutinyTests: XCTestCase {
    func testPiecesNeverChangeWhileTheRelayWritesThem() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = Self.taggedZeros(count: 9 * Relay.handOverPiece + 4321)
        let third = plain.count / 3
        let parts = [Array(plain[..<third]), Array(plain[third..<(2 * third)]), Array(plain[(2 * third)...])]
        var xz: [UInt8] = []
        for (part, options) in zip(parts, ["-0 --block-size=1234567", "--delta=dist=1 --lzma2=preset=0 --block-size=1100000", "-0 --block-size=2500000"]) {
            xz += try XzParallelTests.multiBlock(part, options, dir: dir)
        }
        xz += try XzParallelTests.multiBlock(plain, "-0 --block-list=3000000,1048576,1048575,1048608,5000000,700", dir: dir)
        let expected = plain + plain
        for decoders in 2...4 {
            let sink = ScrutinySink(expecting: expected)
            let relay = try Relay(
                next: sink, control: RunControl(progress: ProgressReporter(handler: nil)), name: "test", bufferCount: 2, bufferSize: 4096)
            let decoder = try XzDecoder(next: relay, decoders: decoders)
            try write(xz, to: decoder, chunk: 1 << 20)
            try decoder.finish()
            XCTAssertGreaterThan(decoder.blocksHandedOver, 4, "\(decoders) decoders")
            XCTAssertEqual(sink.problems, [], "\(decoders) decoders")
            XCTAssertEqual(sink.count, expected.count, "\(decoders) decoders")
            XCTAssertEqual(decoder.workersRunning, 0)
        }
    }

    /// Zeros with the offset written every 4 KiB: every block is different, and decodes far
    /// faster than the sink below reads it.
    static func taggedZeros(count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        for offset in stride(from: 0, to: count - 16, by: 4096) {
            for (i, byte) in String(format: "@%012d", offset).utf8.enumerated() { bytes[offset + i] = byte }
        }
        return bytes
    }
}

/// Compares every write with the expected bytes, then reads it again and again (slow, so a
/// worker trails it): a write that changes while the sink holds it is a buffer reused too
/// early.
private final class ScrutinySink: ByteSink, @unchecked Sendable {
    private let expected: [UInt8]
    private(set) var count = 0
    private(set) var problems: [String] = []

    init(expecting expected: [UInt8]) { self.expected = expected }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        let first = [UInt8](bytes)
        let same = count + first.count <= expected.count && expected.withUnsafeBytes { memcmp($0.baseAddress! + count, base, first.count) == 0 }
        if !same { problems.append("\(first.count) bytes at \(count) differ from xz's") }
        for pass in 0..<32 where first.withUnsafeBytes({ memcmp($0.baseAddress!, base, first.count) }) != 0 {
            problems.append("\(first.count) bytes at \(count) changed while written (pass \(pass))")
            break
        }
        count += first.count
    }

    func barrier(_ cut: Cut) throws {}
    func finish() throws {}
}
