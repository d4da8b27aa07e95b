import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

final class GzipDecoderTests: XCTestCase {
    static var fixtures: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fixtures").path
    }

    private func decode(_ gzip: [UInt8], engine: InflateEngineKind, chunk: Int = 65536) throws -> [UInt8] {
        try gunzip(gzip, engine: engine, chunk: chunk)
    }

    private func gzipDCFile(_ path: String, dir: String) throws -> [UInt8] {
        let out = dir + "/reference.out"
        XCTAssertEqual(try shell("gzip -dc '\(path)' > '\(out)'").status, 0)
        return try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
    }

    /// Many small members (empty ones among them), as concatenated logs are: the ISA-L
    /// engine is reset between members rather than made anew, and a member whose first
    /// match reaches back into the member before it (deflated with that member as a preset
    /// dictionary) is refused — nothing of the last member is reachable after the reset.
    func testManyMembersAndNoHistoryAcrossThem() throws {
        let dir = try makeTemporaryDirectory(self)
        let script = """
            import gzip, zlib, struct, sys
            d = b"The quick brown fox jumps over the lazy dog. " * 40
            many = b"".join(gzip.compress(d[:i % 97] if i % 3 else b"", mtime=0) for i in range(2000))
            open(sys.argv[1] + "/many.gz", "wb").write(many)
            c = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=d)
            body = c.compress(d) + c.flush()
            tail = bytes([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]) + body + struct.pack("<II", zlib.crc32(d), len(d))
            open(sys.argv[1] + "/reach.gz", "wb").write(gzip.compress(d, mtime=0) + tail)
            """
        try script.write(toFile: dir + "/make.py", atomically: true, encoding: .utf8)
        XCTAssertEqual(try shell("python3 '\(dir)/make.py' '\(dir)'").status, 0)
        let many = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/many.gz")))
        let reference = try gzipDCFile(dir + "/many.gz", dir: dir)
        let reach = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/reach.gz")))
        for engine in InflateEngineKind.allCases {
            XCTAssertTrue(try decode(many, engine: engine, chunk: 4096) == reference, "\(engine)")
            XCTAssertThrowsError(try decode(reach, engine: engine), "\(engine)") { error in
                guard case SluiceError.corruptData? = error as? SluiceError else { return XCTFail("\(error)") }
            }
        }
    }

    /// Every fixture, both engines, various chunk sizes: identical to gzip -dc.
    func testFixturesMatchGzipOnBothEngines() throws {
        let dir = try makeTemporaryDirectory(self)
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.fixtures).filter { $0.hasSuffix(".gz") }
        XCTAssertGreaterThanOrEqual(names.count, 4)
        for name in names {
            let path = Self.fixtures + "/" + name
            let gzip = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
            let reference = try gzipDCFile(path, dir: dir)
            for engine in InflateEngineKind.allCases {
                for chunk in [1, 7, 4096, 1 << 20] where chunk > 1 || (gzip.count < 200_000 && Thoroughness.full) {
                    let output = try decode(gzip, engine: engine, chunk: chunk)
                    XCTAssertTrue(output == reference, "\(name) with \(engine), \(chunk)-byte writes")
                }
            }
        }
    }

    /// Generated data through the gzip CLI at several levels, including multi-member
    /// concatenations; both engines agree with each other and with gzip -dc.
    func testGeneratedDataMatchesGzip() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 3_000_000, seed: 11)
        try Data(plain).write(to: URL(fileURLWithPath: dir + "/plain"))
        for level in [1, 6, 9] {
            XCTAssertEqual(try shell("cd '\(dir)' && gzip -\(level) -c plain > a.gz && head -c 100000 plain | gzip -c >> a.gz").status, 0)
            let gzip = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/a.gz")))
            let reference = try gzipDCFile(dir + "/a.gz", dir: dir)
            let zlib = try decode(gzip, engine: .zlib)
            let isal = try decode(gzip, engine: .isal)
            XCTAssertTrue(zlib == reference, "zlib, level \(level)")
            XCTAssertTrue(isal == zlib, "isal agrees with zlib, level \(level)")
        }
    }

    func testCorruptStreamsAreRejected() throws {
        let plain = makeTestData(count: 200_000, seed: 5)
        let good = GzipMember(data: plain).encoded()
        var badCRC = good
        badCRC[badCRC.count - 8] ^= 0xff
        var badSize = good
        badSize[badSize.count - 1] ^= 0x01
        var badMagic = good
        badMagic[1] = 0x8c
        var badMethod = good
        badMethod[2] = 7
        var flipped = good
        flipped[good.count / 2] ^= 0x10
        let cases: [(String, [UInt8], String)] = [
            ("truncated member", Array(good.prefix(good.count - 100)), "end of data"),
            ("truncated trailer", Array(good.prefix(good.count - 3)), "trailer"),
            ("bad CRC", badCRC, "CRC"),
            ("bad ISIZE", badSize, "length"),
            ("bad magic", badMagic, "gzip format"),
            ("bad method", badMethod, "method"),
            ("garbage after member", good + Array("garbage".utf8), "garbage"),
            ("bit flip in deflate data", flipped, ""),
            ("empty input", [], "no gzip data"),
        ]
        for engine in InflateEngineKind.allCases {
            for (name, bytes, words) in cases {
                XCTAssertThrowsError(try decode(bytes, engine: engine), "\(name), \(engine)") { error in
                    guard case SluiceError.corruptData(_, _, let reason)? = error as? SluiceError else {
                        return XCTFail("\(name), \(engine): unexpected \(error)")
                    }
                    if !words.isEmpty { XCTAssertTrue(reason.contains(words), "\(name), \(engine): '\(reason)'") }
                }
            }
        }
    }

    /// Zero padding after the last member (tape blocking) is accepted, as gzip does;
    /// anything after the padding is still garbage.
    func testZeroPaddingAfterTheLastMember() throws {
        let plain = makeTestData(count: 100_000, seed: 9)
        let padded = GzipMember(data: plain).encoded() + [UInt8](repeating: 0, count: 10_000)
        for engine in InflateEngineKind.allCases {
            XCTAssertEqual(try decode(padded, engine: engine, chunk: 4096), plain, "\(engine)")
            XCTAssertThrowsError(try decode(padded + [1], engine: engine), "\(engine)")
        }
    }
}

/// What the byte after a member starts, by table.
final class MemberBoundaryTests: XCTestCase {
    func testTheByteAfterAMember() {
        let rows: [(byte: UInt8, membersDone: Int, expected: GzipDecoder.MemberBoundary, line: UInt)] = [
            (0x1f, 0, .member, #line),
            (0x00, 0, .member, #line),  // the first member's header parser reports the bad magic
            (0x42, 0, .member, #line),
            (0x1f, 1, .member, #line),
            (0x00, 1, .padding, #line),
            (0x42, 3, .garbage, #line),
            (0x8b, 1, .garbage, #line),
        ]
        for row in rows {
            XCTAssertEqual(GzipDecoder.MemberBoundary.decide(nextByte: row.byte, membersDone: row.membersDone), row.expected, line: row.line)
        }
    }
}
