import CZlib
import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The two engines, and `gzip -t`, agree on crafted deflate streams whose dynamic block
/// headers are valid, incomplete or over-subscribed (issue 8, item 21).
final class DeflateDifferentialTests: XCTestCase {
    struct Case {
        let name: String
        let literalLengths: [Int: Int]
        let distanceLengths: [Int]
        /// The block's symbols: a literal/length symbol, with a distance symbol after a length.
        let symbols: [(Int, Int?)]
        let valid: Bool
    }

    static let cases: [Case] = [
        Case(
            name: "complete codes", literalLengths: [97: 1, 256: 1], distanceLengths: [0],
            symbols: [(97, nil), (97, nil), (256, nil)], valid: true),
        Case(
            name: "a single distance code of length 1 (zlib allows it)", literalLengths: [97: 1, 256: 2, 257: 2],
            distanceLengths: [1], symbols: [(97, nil), (257, 0), (256, nil)], valid: true),
        Case(
            name: "no distance codes at all", literalLengths: [97: 1, 256: 1], distanceLengths: [0],
            symbols: [(97, nil), (256, nil)], valid: true),
        Case(
            name: "incomplete literal/length code", literalLengths: [97: 2, 256: 2], distanceLengths: [0],
            symbols: [(97, nil), (97, nil), (256, nil)], valid: false),
        Case(
            name: "incomplete literal/length code with long codes", literalLengths: [97: 1, 98: 2, 256: 4, 99: 13],
            distanceLengths: [0], symbols: [(97, nil), (98, nil), (256, nil)], valid: false),
        Case(
            name: "incomplete distance code", literalLengths: [97: 1, 256: 2, 257: 2], distanceLengths: [2, 2],
            symbols: [(97, nil), (257, 0), (256, nil)], valid: false),
        Case(
            name: "over-subscribed literal/length code", literalLengths: [97: 1, 98: 1, 256: 1], distanceLengths: [0],
            symbols: [(97, nil), (256, nil)], valid: false),
        Case(
            name: "over-subscribed distance code", literalLengths: [97: 1, 256: 2, 257: 2], distanceLengths: [1, 1, 1],
            symbols: [(97, nil), (257, 0), (256, nil)], valid: false),
        Case(
            name: "no end-of-block code", literalLengths: [97: 1, 98: 1], distanceLengths: [0],
            symbols: [(97, nil)], valid: false),
    ]

    func testEnginesAndGzipAgreeOnCraftedHeaders() throws {
        let dir = try makeTemporaryDirectory(self)
        for (i, test) in Self.cases.enumerated() {
            // The same block twice: a bad header in a later block counts as much as in the first.
            for blocks in [1, 2] {
                let deflate = Self.dynamicBlocks(test, count: blocks)
                let plain = Self.plain(test.symbols, blocks: blocks)
                let gzip = Self.gzipMember(deflate: deflate, plain: plain)
                let path = dir + "/case\(i)-\(blocks).gz"
                try Data(gzip).write(to: URL(fileURLWithPath: path))
                let gzipAccepts = try shell("gzip -t '\(path)' 2>/dev/null").status == 0
                XCTAssertEqual(gzipAccepts, test.valid, "gzip -t on \(test.name) (\(blocks) blocks)")
                for engine in InflateEngineKind.allCases {
                    for chunk in [1, 7, 65536] {
                        let result = Result { try decode(gzip, engine: engine, chunk: chunk) }
                        switch result {
                        case .success(let output):
                            XCTAssertTrue(test.valid, "\(engine) accepted \(test.name) (\(blocks) blocks, chunk \(chunk))")
                            XCTAssertEqual(output, plain, "\(engine) on \(test.name)")
                        case .failure(let error):
                            XCTAssertFalse(test.valid, "\(engine) rejected \(test.name): \(error)")
                            guard case SluiceError.corruptData? = error as? SluiceError else {
                                return XCTFail("\(engine) on \(test.name): \(error)")
                            }
                        }
                    }
                }
            }
        }
    }

    private func decode(_ gzip: [UInt8], engine: InflateEngineKind, chunk: Int = 65536) throws -> [UInt8] {
        try gunzip(gzip, engine: engine, chunk: chunk)
    }

    // MARK: building streams (RFC 1951 §3.2.7)

    /// What the symbols decode to when the code is valid: literals, and length 3 copies at distance 1.
    static func plain(_ symbols: [(Int, Int?)], blocks: Int) -> [UInt8] {
        var out: [UInt8] = []
        for _ in 0..<blocks {
            for (symbol, _) in symbols {
                if symbol < 256 { out.append(UInt8(symbol)) }
                if symbol == 257, let last = out.last { out += [last, last, last] }
            }
        }
        return out
    }

    static func dynamicBlocks(_ test: Case, count: Int) -> [UInt8] {
        var bits = BitWriter()
        for block in 0..<count {
            bits.write(block == count - 1 ? 1 : 0, 1)  // BFINAL
            bits.write(2, 2)  // dynamic Huffman codes
            let literalCount = max(257, (test.literalLengths.keys.max() ?? 0) + 1)
            bits.write(UInt32(literalCount - 257), 5)
            bits.write(UInt32(test.distanceLengths.count - 1), 5)
            // Code lengths 0…15 are sent with a complete code-length code: 16 symbols of 4 bits.
            let order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
            bits.write(UInt32(19 - 4), 4)
            for symbol in order { bits.write(symbol < 16 ? 4 : 0, 3) }
            let lengthCode = canonicalCodes(Dictionary(uniqueKeysWithValues: (0..<16).map { ($0, 4) }))
            let lengths = (0..<literalCount).map { test.literalLengths[$0] ?? 0 } + test.distanceLengths
            for length in lengths { bits.writeCode(lengthCode[length]!) }
            let literals = canonicalCodes(test.literalLengths)
            let distances = canonicalCodes(Dictionary(uniqueKeysWithValues: test.distanceLengths.enumerated().map { ($0, $1) }))
            for (symbol, distance) in test.symbols {
                // A code the header left without a code word is written as zeros: the
                // stream is invalid anyway, and a decoder must say so.
                bits.writeCode(literals[symbol] ?? (0, 1))
                if let distance { bits.writeCode(distances[distance] ?? (0, 1)) }
            }
        }
        return bits.bytes()
    }

    /// Canonical Huffman codes (RFC 1951 §3.2.2) for symbol → length; over-subscribed
    /// lengths still get (overlapping) codes.
    static func canonicalCodes(_ lengths: [Int: Int]) -> [Int: (code: UInt32, length: Int)] {
        var count = [Int](repeating: 0, count: 16)
        for (_, length) in lengths where length > 0 { count[length] += 1 }
        var next = [UInt32](repeating: 0, count: 16)
        var code: UInt32 = 0
        for bits in 1..<16 {
            code = (code + UInt32(count[bits - 1])) << 1
            next[bits] = code
        }
        var codes: [Int: (code: UInt32, length: Int)] = [:]
        for symbol in lengths.keys.sorted() {
            guard let length = lengths[symbol], length > 0 else { continue }
            codes[symbol] = (next[length] & ((1 << length) - 1), length)
            next[length] += 1
        }
        return codes
    }

    static func gzipMember(deflate: [UInt8], plain: [UInt8]) -> [UInt8] {
        let crc = UInt32(crc32(0, plain, uInt(plain.count)))
        return [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3] + deflate + littleEndian(crc) + littleEndian(UInt32(plain.count))
    }

    /// Packs bits least-significant first, as deflate does; Huffman codes go most-significant bit first.
    struct BitWriter {
        private var out: [UInt8] = []
        private var buffer: UInt64 = 0
        private var count = 0

        mutating func write(_ value: UInt32, _ n: Int) {
            buffer |= UInt64(value) << UInt64(count)
            count += n
            while count >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer))
                buffer >>= 8
                count -= 8
            }
        }

        mutating func writeCode(_ code: (code: UInt32, length: Int)) {
            var reversed: UInt32 = 0
            for i in 0..<code.length where code.code & (1 << i) != 0 { reversed |= 1 << (code.length - 1 - i) }
            write(reversed, code.length)
        }

        func bytes() -> [UInt8] {
            count > 0 ? out + [UInt8(truncatingIfNeeded: buffer)] : out
        }
    }
}
