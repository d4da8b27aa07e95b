import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// `unxz` against `xz -dc` on data and options made at test time.
final class XzDecoderTests: XCTestCase {
    /// Decodes `xz` in writes of `chunk` bytes.
    static func decode(_ xz: [UInt8], chunk: Int = 65536, memoryLimit: UInt64 = 256 << 20) throws -> [UInt8] {
        let sink = MemorySink()
        let decoder = try XzDecoder(next: sink, memoryLimit: memoryLimit)
        var i = 0
        while i < xz.count {
            let end = min(xz.count, i + chunk)
            try decoder.write(Array(xz[i..<end]))
            i = end
        }
        try decoder.finish()
        XCTAssertTrue(sink.finished)
        return sink.bytes
    }

    static func plain(_ count: Int, seed: UInt64) -> [UInt8] { makeTestData(count: count, seed: seed) }

    private func assertMatchesXz(_ xz: [UInt8], _ label: String, dir: String, chunks: [Int] = [7, 1 << 20]) throws {
        let reference = try XCTUnwrap(try XzTool.decompress(xz, dir: dir), "xz -dc refuses \(label)")
        for chunk in chunks {
            let output = try Self.decode(xz, chunk: chunk)
            XCTAssertTrue(output == reference, "\(label) in \(chunk)-byte writes: \(output.count) bytes, xz gives \(reference.count)")
        }
    }

    func testPresetsMatchXz() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = Self.plain(150_000, seed: 1)
        // -7…-9 make xz allocate hundreds of MiB whatever the input; a smaller input keeps them brief.
        for preset in ["-0", "-1", "-2", "-3", "-4", "-5", "-6", "-7", "-8", "-9", "-0e", "-6e", "-9e"] {
            let input = preset.hasPrefix("-7") || preset.hasPrefix("-8") || preset.hasPrefix("-9") ? Array(plain.prefix(60_000)) : plain
            try assertMatchesXz(try XzTool.compress(input, options: preset, dir: dir), preset, dir: dir)
        }
    }

    func testChecksBlocksAndFiltersMatchXz() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = Self.plain(120_000, seed: 2)
        let options = [
            "--check=none", "--check=crc32", "--check=crc64", "--check=sha256",
            "-T2 --block-size=65536", "--block-size=100000 --check=sha256", "-1 --block-size=1000",
            "--x86 --lzma2", "--x86=start=1234 --lzma2=preset=1", "--arm64 --lzma2", "--arm64=start=4096 --lzma2",
            "--delta=dist=1 --lzma2", "--delta=dist=256 --lzma2", "--delta=dist=4 --x86 --lzma2=preset=0",
            "--lzma2=preset=6,lc=0,lp=4,pb=4", "--lzma2=preset=1,lc=4,lp=0,pb=0", "--lzma2=dict=4KiB",
        ]
        for option in options {
            try assertMatchesXz(try XzTool.compress(plain, options: option, dir: dir), option, dir: dir)
        }
    }

    /// Machine code has the E8/E9 and BL/ADRP patterns the branch filters convert.
    func testBranchFiltersOnMachineCode() throws {
        let dir = try makeTemporaryDirectory(self)
        let code = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "/bin/bash"))).prefix(300_000)
        for option in ["--x86 --lzma2=preset=0", "--arm64 --lzma2=preset=0", "--x86 --delta=dist=3 --lzma2=preset=0"] {
            try assertMatchesXz(try XzTool.compress(Array(code), options: option, dir: dir), option, dir: dir, chunks: [3, 1 << 16])
        }
    }

    func testEdgeInputsMatchXz() throws {
        let dir = try makeTemporaryDirectory(self)
        var random = SeededRandom(seed: 3)
        let incompressible = (0..<200_000).map { _ in UInt8.random(in: 0...255, using: &random) }
        for (label, plain) in [
            ("empty", [UInt8]()), ("one byte", [0x41]), ("tiny", Array("hello, xz\n".utf8)),
            ("incompressible", incompressible),
        ] {
            for option in ["-6", "--check=sha256 -0", "--x86 --lzma2"] {
                try assertMatchesXz(try XzTool.compress(plain, options: option, dir: dir), "\(label) \(option)", dir: dir, chunks: [1, 4096])
            }
        }
        // Uncompressed chunks followed by LZMA chunks in one block.
        let mixed = incompressible.prefix(100_000) + Self.plain(200_000, seed: 4) + incompressible.suffix(70_000)
        try assertMatchesXz(try XzTool.compress(Array(mixed), options: "-3", dir: dir), "mixed", dir: dir)
    }

    func testConcatenatedStreamsAndPadding() throws {
        let dir = try makeTemporaryDirectory(self)
        let a = try XzTool.compress(Self.plain(100_000, seed: 5), options: "-1", dir: dir)
        let b = try XzTool.compress(Self.plain(50_000, seed: 6), options: "--check=sha256 --x86 --lzma2", dir: dir)
        let empty = try XzTool.compress([], options: "", dir: dir)
        let zeros = { (n: Int) in [UInt8](repeating: 0, count: n) }
        try assertMatchesXz(a + b + empty + a, "three streams", dir: dir)
        try assertMatchesXz(a + zeros(4) + b + zeros(12) + a + zeros(8), "padded streams", dir: dir, chunks: [1, 5, 65536])
        // Padding that is not a multiple of four, and padding before the first stream, are errors as in xz.
        for bad in [a + zeros(3), a + zeros(5) + b, zeros(4) + a] {
            XCTAssertNil(try XzTool.decompress(bad, dir: dir))
            assertCorrupt(bad)
        }
    }

    func testEmptyInputIsAnError() {
        assertCorrupt([])
    }

    func testMemoryLimit() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(Self.plain(10_000, seed: 7), options: "--lzma2=dict=64MiB", dir: dir)
        XCTAssertThrowsError(try Self.decode(xz, memoryLimit: 32 << 20)) { error in
            guard case SluiceError.limitExceeded("xz", _, "dictionary", 64 << 20, 32 << 20, "memlimit") = error else {
                return XCTFail("\(error)")
            }
        }
        XCTAssertEqual(try Self.decode(xz, memoryLimit: 64 << 20), Self.plain(10_000, seed: 7))
    }

    func testOtherFiltersAreRefusedByName() throws {
        let dir = try makeTemporaryDirectory(self)
        for (option, name) in [("--powerpc --lzma2", "PowerPC"), ("--sparc --lzma2", "SPARC"), ("--armthumb --lzma2", "ARM-Thumb")] {
            let xz = try XzTool.compress(Self.plain(10_000, seed: 8), options: option, dir: dir)
            XCTAssertThrowsError(try Self.decode(xz)) { error in
                guard case SluiceError.corruptData("xz", _, let reason) = error else { return XCTFail("\(error)") }
                XCTAssertTrue(reason.contains(name), reason)
            }
        }
    }

    // MARK: Corrupt input

    /// Every kind of damage ends in a typed corrupt-data error, or in the right output
    /// (a byte no field depends on), never in a crash or wrong output.
    func testFuzzedInputsFailCleanly() throws {
        let dir = try makeTemporaryDirectory(self)
        var random = SeededRandom(seed: 42)
        let plain = Self.plain(6_000, seed: 9)
        let bases = try [
            "--check=crc32", "--check=crc64 -T2 --block-size=2000", "--check=sha256 --x86 --lzma2=preset=1",
            "--check=crc64 --delta=dist=2 --lzma2",
        ].map { try XzTool.compress(plain, options: $0, dir: dir) }
        var mutants = 0, rejected = 0
        for base in bases {
            for _ in 0..<600 {
                var bytes = base
                switch random.next() % 5 {
                case 0: bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(1 << (random.next() % 8))
                case 1: bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
                case 2: bytes.removeLast(1 + Int(random.next() % UInt64(bytes.count)))
                case 3: bytes.remove(at: Int(random.next() % UInt64(bytes.count)))
                default:
                    // Damage in the first bytes, where the headers are.
                    bytes[Int(random.next() % UInt64(min(bytes.count, 40)))] ^= UInt8(1 << (random.next() % 8))
                }
                mutants += 1
                do {
                    let output = try Self.decode(bytes, chunk: 1 + Int(random.next() % 3000))
                    XCTAssertTrue(output == plain, "a mutant decoded to wrong output without an error")
                } catch SluiceError.corruptData(format: "xz", offset: let offset, reason: _) {
                    XCTAssertLessThanOrEqual(offset, UInt64(bytes.count))
                    rejected += 1
                }
            }
        }
        XCTAssertGreaterThanOrEqual(mutants, 2000)
        XCTAssertGreaterThan(rejected, mutants * 9 / 10)
    }

    /// Every bit of every container field — stream header, block header, index, stream
    /// footer, the check — is covered by a CRC, a magic or a comparison: flipping any is caught.
    func testEveryContainerBitFlipIsCaught() throws {
        let dir = try makeTemporaryDirectory(self)
        let xz = try XzTool.compress(Self.plain(3_000, seed: 12), options: "--check=sha256 --x86 --lzma2", dir: dir)
        let headerEnd = 12 + (Int(xz[12]) + 1) * 4
        let backward = (Int(xz[xz.count - 8]) | Int(xz[xz.count - 7]) << 8) + 1
        let checkStart = xz.count - 12 - backward * 4 - 32
        var flips = 0
        for position in Array(0..<headerEnd) + Array(checkStart..<xz.count) {
            for bit in 0..<8 {
                var bytes = xz
                bytes[position] ^= UInt8(1 << bit)
                assertCorrupt(bytes)
                flips += 1
            }
        }
        XCTAssertGreaterThan(flips, 8 * (12 + 12 + 32 + 8 + 12))
    }

    /// An index whose record disagrees with the block (its own CRC32 made right again).
    func testWrongIndexIsCaught() throws {
        let dir = try makeTemporaryDirectory(self)
        var xz = try XzTool.compress(Self.plain(5_000, seed: 10), options: "--check=crc32", dir: dir)
        let backward = (Int(xz[xz.count - 8]) | Int(xz[xz.count - 7]) << 8 | Int(xz[xz.count - 6]) << 16 | Int(xz[xz.count - 5]) << 24)
        let indexSize = (backward + 1) * 4
        let start = xz.count - 12 - indexSize
        XCTAssertEqual(xz[start], 0)
        XCTAssertEqual(xz[start + 1], 1)  // one record
        xz[start + 2] ^= 4  // its unpadded size
        let crc = xz[start..<(xz.count - 16)].withUnsafeBytes { xzCRC32($0) }
        for i in 0..<4 { xz[xz.count - 16 + i] = UInt8(truncatingIfNeeded: crc >> (8 * i)) }
        XCTAssertNil(try XzTool.decompress(xz, dir: dir))
        assertCorrupt(xz, reasonContains: "index")
    }

    func testWrongCheckIsCaught() throws {
        let dir = try makeTemporaryDirectory(self)
        for (check, name) in [("crc32", "CRC32"), ("crc64", "CRC64"), ("sha256", "SHA-256")] {
            var xz = try XzTool.compress(Self.plain(5_000, seed: 11), options: "--check=\(check)", dir: dir)
            let backward = (Int(xz[xz.count - 8]) | Int(xz[xz.count - 7]) << 8) + 1
            xz[xz.count - 12 - backward * 4 - 1] ^= 0x80  // the check's last byte, just before the index
            assertCorrupt(xz, reasonContains: name)
        }
    }

    private func assertCorrupt(_ xz: [UInt8], reasonContains text: String? = nil, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try Self.decode(xz), file: file, line: line) { error in
            guard case SluiceError.corruptData("xz", _, let reason) = error else {
                return XCTFail("not a corrupt-data error: \(error)", file: file, line: line)
            }
            if let text { XCTAssertTrue(reason.contains(text), reason, file: file, line: line) }
        }
    }
}
