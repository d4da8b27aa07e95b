import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The sequence checks unzstd makes once per block (literal and output totals) and at
/// execution (an offset of 0, reach, window), on hand-built frames whose sequence tables are
/// RLE (one code each, no state bits), so every length and offset is chosen exactly. Each
/// frame is decoded planned ahead on a worker and one block at a time: same bytes, same error.
final class ZstdSequenceEdgeTests: XCTestCase {
    /// Literal length, match length, offset extra bits of one sequence.
    typealias Extras = (ll: UInt64, ml: UInt64, of: UInt64)

    enum Block {
        case raw([UInt8])
        /// Raw literals; `codes` are the RLE symbols of the three tables.
        case sequences(literals: [UInt8], codes: (ll: Int, of: Int, ml: Int), extras: [Extras])
    }

    private static let literalExtra: [Int] = Array(repeating: 0, count: 16) + [1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    private static let matchExtra: [Int] = Array(repeating: 0, count: 32) + [1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]

    /// A frame without checksum or content size, window 1 KiB << `windowExponent`; returns it and
    /// where each block's content starts.
    static func frame(_ blocks: [Block], windowExponent: UInt8 = 0) -> (bytes: [UInt8], starts: [Int]) {
        var out: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x00, windowExponent << 3]
        var starts: [Int] = []
        for (index, block) in blocks.enumerated() {
            let (type, content) = encode(block)
            let header = UInt32(index == blocks.count - 1 ? 1 : 0) | type << 1 | UInt32(content.count) << 3
            out += [UInt8(header & 0xff), UInt8(header >> 8 & 0xff), UInt8(header >> 16)]
            starts.append(out.count)
            out += content
        }
        return (out, starts)
    }

    private static func encode(_ block: Block) -> (type: UInt32, content: [UInt8]) {
        switch block {
        case .raw(let bytes):
            return (0, bytes)
        case .sequences(let literals, let codes, let extras):
            let n = literals.count
            var out: [UInt8] = [UInt8(0x0c | (n & 0xf) << 4), UInt8(n >> 4 & 0xff), UInt8(n >> 12)] + literals
            out += extras.count < 128 ? [UInt8(extras.count)] : [UInt8(0x80 + extras.count >> 8), UInt8(extras.count & 0xff)]
            out += [0x54, UInt8(codes.ll), UInt8(codes.of), UInt8(codes.ml)]
            // Written last sequence first, so that reading backwards meets the first one first.
            var bits = BitWriter()
            for extra in extras.reversed() {
                bits.put(extra.ll, literalExtra[codes.ll])
                bits.put(extra.ml, matchExtra[codes.ml])
                bits.put(extra.of, codes.of)
            }
            bits.put(1, 1)  // end marker
            return (2, out + bits.bytes)
        }
    }

    struct BitWriter {
        var bytes: [UInt8] = []
        var used = 0
        mutating func put(_ value: UInt64, _ count: Int) {
            for i in 0..<count {
                if used % 8 == 0 { bytes.append(0) }
                bytes[bytes.count - 1] |= UInt8(value >> UInt64(i) & 1) << UInt8(used % 8)
                used += 1
            }
        }
    }

    /// Decodes with and without planning ahead; both must agree. The output, or the error and
    /// the output written before it.
    private func decodeBothWays(_ zst: [UInt8], file: StaticString = #filePath, line: UInt = #line) -> (
        output: [UInt8], error: SluiceError?
    ) {
        var results: [([UInt8], SluiceError?)] = []
        for planAhead in [true, false] {
            let sink = MemorySink()
            do {
                let decoder = try ZstdDecoder(next: sink, planAhead: planAhead)
                try write(zst, to: decoder, chunk: 700)
                try decoder.finish()
                results.append((sink.bytes, nil))
            } catch let error as SluiceError {
                results.append((sink.bytes, error))
            } catch {
                XCTFail("unexpected \(error)", file: file, line: line)
                results.append((sink.bytes, nil))
            }
        }
        XCTAssertEqual(results[0].0, results[1].0, "planned ahead and one by one differ", file: file, line: line)
        XCTAssertEqual(results[0].1, results[1].1, "planned ahead and one by one differ", file: file, line: line)
        XCTAssertEqual(ZstdBlockPlanner.liveWorkers.load(ordering: .relaxed), 0, file: file, line: line)
        return results[0]
    }

    private func expectCorrupt(
        _ zst: [UInt8], at offset: Int, _ words: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        let result = decodeBothWays(zst, file: file, line: line)
        guard case .corruptData(let format, let at, let reason)? = result.error else {
            return XCTFail("expected corrupt data, got \(String(describing: result.error))", file: file, line: line)
        }
        XCTAssertEqual(format, "zstd", file: file, line: line)
        XCTAssertEqual(at, UInt64(offset), reason, file: file, line: line)
        XCTAssertTrue(reason.contains(words), "\(reason) — expected “\(words)”", file: file, line: line)
    }

    private let ramp = (0..<1000).map { UInt8($0 % 251) }

    /// Literal length 0 with offset value 3 means "repeat offset 1, minus one": an offset of 0
    /// when repeat offset 1 is 1 (a frame's start, or set so). Planning leaves it to the
    /// execution's reach check, which must refuse it at its own block — also with the planner
    /// several blocks ahead of it, and with the repeat carried over from the block before.
    func testRepeatOffsetOneMinusOneIsRefused() {
        let zero = Block.sequences(literals: [], codes: (0, 1, 0), extras: [(0, 0, 1)])
        let first = Self.frame([zero, .raw(ramp)])
        expectCorrupt(first.bytes, at: first.starts[0], "offset of 0")
        // Offset value 4 sets repeat offset 1 to 1 in the block before.
        let setOne = Block.sequences(literals: Array("abcd".utf8), codes: (4, 2, 0), extras: [(0, 0, 0)])
        let blocks =
            Array(repeating: Block.raw(ramp), count: 10) + Array(repeating: setOne, count: 6) + [zero]
            + Array(repeating: Block.raw(ramp), count: 6)
        let later = Self.frame(blocks)
        expectCorrupt(later.bytes, at: later.starts[16], "offset of 0")
        let result = decodeBothWays(later.bytes)
        XCTAssertEqual(result.output, Array(Array(repeating: ramp, count: 10).joined()) + Array(repeating: Array("abcdddd".utf8), count: 6).joined())
        // In the middle of a block: repeat offset 1 is 2 (offset value 5 in the block before),
        // minus one is 1 for the first sequence, and 0 for the second.
        let setTwo = Block.sequences(literals: Array("ab".utf8), codes: (2, 2, 0), extras: [(0, 0, 1)])
        let twice = Block.sequences(literals: [], codes: (0, 1, 0), extras: [(0, 0, 1), (0, 0, 1)])
        let mixedZero = Self.frame([.raw(ramp), setTwo, twice, .raw(ramp)])
        expectCorrupt(mixedZero.bytes, at: mixedZero.starts[2], "sequence 1 repeats an offset of 0")
    }

    /// Repeat offset 1 minus one is fine when that is at least 1, and is carried to the next block.
    func testRepeatOffsetOneMinusOneAcrossBlocks() {
        // "ab" then offset 2 (value 5: code 2, extra 1), match 3: "aba"; then, next block, no
        // literals and value 3: offset 2 - 1 = 1, match 3: "aaa".
        let built = Self.frame([
            .raw(Array("0123456789".utf8)),
            .sequences(literals: Array("ab".utf8), codes: (2, 2, 0), extras: [(0, 0, 1)]),
            .sequences(literals: [], codes: (0, 1, 0), extras: [(0, 0, 1)]),
        ])
        let result = decodeBothWays(built.bytes)
        XCTAssertNil(result.error)
        XCTAssertEqual(String(decoding: result.output, as: UTF8.self), "0123456789ababaaaa")
    }

    /// Literal lengths add up to more than the block's literals: refused before anything is written.
    func testLiteralTotalOverTheLiteralsIsRefused() {
        let built = Self.frame([
            .raw(ramp), .sequences(literals: Array("abcdef".utf8), codes: (4, 2, 0), extras: [(0, 0, 0), (0, 0, 0)]),
        ])
        expectCorrupt(built.bytes, at: built.starts[1], "literals")
        XCTAssertEqual(decodeBothWays(built.bytes).output, ramp)
    }

    /// With a 1 KiB window a block may produce 1024 bytes: 341 matches of 3 and one literal
    /// fit, 342 matches do not. Long literal and match lengths whose sum is far over are refused too.
    func testOutputTotalAtTheBlockMaximum() {
        let exact = Self.frame([
            .raw(Array("abc".utf8)),
            .sequences(literals: [7], codes: (0, 2, 0), extras: Array(repeating: (0, 0, 0), count: 341)),
        ])
        let fits = decodeBothWays(exact.bytes)
        XCTAssertNil(fits.error)
        XCTAssertEqual(fits.output, Array("abc".utf8) + Array(repeating: UInt8(ascii: "c"), count: 1023) + [7])
        let over = Self.frame([
            .raw(Array("abc".utf8)),
            .sequences(literals: [], codes: (0, 2, 0), extras: Array(repeating: (0, 0, 0), count: 342)),
        ])
        expectCorrupt(over.bytes, at: over.starts[1], "maximum size")
        // Match lengths of 65539 + 65535 each, 40 of them: 5 MB claimed in a 128 KiB block.
        let huge = Self.frame(
            [.raw(Array("abc".utf8)), .sequences(literals: [], codes: (0, 2, 52), extras: Array(repeating: (0, 65535, 0), count: 40))],
            windowExponent: 7)
        expectCorrupt(huge.bytes, at: huge.starts[1], "maximum size")
    }

    /// An offset may reach back to the frame's first byte and as far as the window, not one byte further.
    func testOffsetsAtTheFrameStartAndTheWindowEdge() {
        // After 100 bytes: offset 100 (value 103: code 6, extra 39) reaches byte 0; 101 does not.
        let ramp100 = Array(ramp.prefix(100))
        let reach = Self.frame([.raw(ramp100), .sequences(literals: [], codes: (0, 6, 0), extras: [(0, 0, 39)])])
        let reached = decodeBothWays(reach.bytes)
        XCTAssertNil(reached.error)
        XCTAssertEqual(reached.output, ramp100 + ramp100.prefix(3))
        let before = Self.frame([.raw(ramp100), .sequences(literals: [], codes: (0, 6, 0), extras: [(0, 0, 40)])])
        expectCorrupt(before.bytes, at: before.starts[1], "before the start of the frame")
        // After 2000 bytes with a 1 KiB window: offset 1024 (value 1027: code 10, extra 3) is the
        // window's first byte; 1025 is outside it (libzstd accepts it: RFC 8878 does not).
        let two = Block.raw(Array(ramp.prefix(1000)))
        let edge = Self.frame([two, two, .sequences(literals: [], codes: (0, 10, 0), extras: [(0, 0, 3)])])
        let atEdge = decodeBothWays(edge.bytes)
        XCTAssertNil(atEdge.error)
        XCTAssertEqual(atEdge.output.suffix(3), ramp[976..<979])
        let outside = Self.frame([two, two, .sequences(literals: [], codes: (0, 10, 0), extras: [(0, 0, 4)])])
        expectCorrupt(outside.bytes, at: outside.starts[2], "before the start of the window")
    }
}
