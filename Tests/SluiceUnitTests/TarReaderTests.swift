import XCTest
@testable import Sluice

/// The tar reader by table: numeric fields, pax records and times, names, and the
/// events a hand-built archive produces, fed whole and one byte at a time.
final class TarReaderTests: XCTestCase {
    private final class Recorder: TarEventHandler {
        var events: [String] = []
        func tarEntry(_ entry: TarEntry) throws {
            events.append(
                "entry \(String(decoding: entry.path, as: UTF8.self)) \(entry.kind) size=\(entry.size) mtime=\(entry.mtime.seconds).\(entry.mtime.nanoseconds) link=\(String(decoding: entry.linkTarget, as: UTF8.self))"
            )
        }
        func tarData(_ bytes: UnsafeRawBufferPointer) throws {
            if bytes.isEmpty { return }
            if let last = events.last, last.hasPrefix("data ") {
                events[events.count - 1] = last + String(decoding: bytes, as: UTF8.self)
            } else {
                events.append("data " + String(decoding: bytes, as: UTF8.self))
            }
        }
        func tarEntryEnd() throws { events.append("end") }
    }

    /// One header block with a valid checksum.
    static func header(
        _ name: String, type: Character = "0", size: Int = 0, mode: Int = 0o644, mtime: Int = 1_000_000_000,
        link: String = "", magic: String = "ustar\u{0}00", sizeField: [UInt8]? = nil
    ) -> [UInt8] {
        var block = [UInt8](repeating: 0, count: 512)
        func put(_ bytes: [UInt8], at offset: Int) { for (i, b) in bytes.enumerated() { block[offset + i] = b } }
        put(Array(name.utf8), at: 0)
        put(Array(String(format: "%07o", mode).utf8), at: 100)
        put(sizeField ?? Array(String(format: "%011o", size).utf8), at: 124)
        put(Array(String(format: "%011o", mtime).utf8), at: 136)
        block[156] = UInt8(ascii: type.unicodeScalars.first!)
        put(Array(link.utf8), at: 157)
        put(Array(magic.utf8), at: 257)
        put([UInt8](repeating: 0x20, count: 8), at: 148)
        let sum = block.reduce(0) { $0 + Int($1) }
        put(Array(String(format: "%06o", sum).utf8) + [0, 0x20], at: 148)
        return block
    }

    static func padded(_ data: [UInt8]) -> [UInt8] {
        data + [UInt8](repeating: 0, count: (512 - data.count % 512) % 512)
    }

    static func pax(_ records: [(String, String)], type: Character = "x") -> [UInt8] {
        var body: [UInt8] = []
        for (key, value) in records {
            let core = " \(key)=\(value)\n"
            var length = core.utf8.count + 1
            while String(length).count + core.utf8.count != length { length += 1 }
            body += Array("\(length)\(core)".utf8)
        }
        return header("pax", type: type, size: body.count) + padded(body)
    }

    static let end = [UInt8](repeating: 0, count: 1024)

    private func events(_ archive: [UInt8], byteAtATime: Bool = false) throws -> [String] {
        var reader = TarReader()
        let recorder = Recorder()
        if byteAtATime {
            for byte in archive { try [byte].withUnsafeBytes { try reader.consume($0, into: recorder) } }
        } else {
            try archive.withUnsafeBytes { try reader.consume($0, into: recorder) }
        }
        try reader.finish()
        return recorder.events
    }

    func testEventsOfAMixedArchiveWholeAndByteByByte() throws {
        let longName = String(repeating: "n", count: 150)
        var archive = Self.header("dir/", type: "5")
        archive += Self.header("dir/a.txt", size: 5) + Self.padded(Array("hello".utf8))
        archive += Self.pax([("path", "dir/pax name ü"), ("mtime", "1234567890.5"), ("comment", "ignored")])
        archive += Self.header("ignored", size: 3) + Self.padded(Array("abc".utf8))
        archive += Self.header("v7dir/", type: "\u{0}", magic: "")
        archive += Self.pax([("path", "global")], type: "g")
        archive += Self.header("L", type: "L", size: longName.utf8.count + 1, magic: "ustar  \u{0}") + Self.padded(Array(longName.utf8) + [0])
        archive += Self.header("short", type: "2", link: "target", magic: "ustar  \u{0}")
        archive += Self.header("plain", type: "5")
        archive += Self.end + [UInt8](repeating: 0, count: 4096)
        let expected = [
            "entry dir/ directory size=0 mtime=1000000000.0 link=", "end",
            "entry dir/a.txt regular size=5 mtime=1000000000.0 link=", "data hello", "end",
            "entry dir/pax name ü regular size=3 mtime=1234567890.500000000 link=", "data abc", "end",
            "entry v7dir/ directory size=0 mtime=1000000000.0 link=", "end",
            // A GNU long name wins over a global path; the global path names every later member.
            "entry \(longName) symlink size=0 mtime=1000000000.0 link=target", "end",
            "entry global directory size=0 mtime=1000000000.0 link=", "end",
        ]
        XCTAssertEqual(try events(archive), expected)
        XCTAssertEqual(try events(archive, byteAtATime: true), expected)
    }

    func testNumericFields() {
        func parse(_ bytes: [UInt8]) -> Int64? { bytes.withUnsafeBytes { TarNumber.parse($0) } }
        XCTAssertEqual(parse(Array("00000000644\0".utf8)), 0o644)
        XCTAssertEqual(parse(Array("  644 \0".utf8)), 0o644)
        XCTAssertEqual(parse([0, 0, 0, 0]), 0)
        XCTAssertNil(parse(Array("0008\0".utf8)))
        XCTAssertNil(parse(Array("12 3\0".utf8)))
        // GNU base-256: 9 GB in 12 bytes, and a negative mtime.
        XCTAssertEqual(parse([0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x18, 0x71, 0x1A, 0x00]), 9_000_000_000)
        XCTAssertEqual(parse([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]), -2)
        XCTAssertNil(parse([0x80, 0x7F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]), "larger than Int64")
        XCTAssertEqual(TarNumber.decimal(Array("18446744073709551615".utf8)), UInt64.max)
        XCTAssertNil(TarNumber.decimal(Array("18446744073709551616".utf8)))
        XCTAssertNil(TarNumber.decimal(Array("12a".utf8)))
    }

    func testPaxTimes() {
        func time(_ s: String) -> TarTime? { TarTime(pax: Array(s.utf8)) }
        XCTAssertEqual(time("12.5"), TarTime(seconds: 12, nanoseconds: 500_000_000))
        XCTAssertEqual(time("12.1234567899"), TarTime(seconds: 12, nanoseconds: 123_456_789))
        XCTAssertEqual(time("-1.25"), TarTime(seconds: -2, nanoseconds: 750_000_000))
        XCTAssertEqual(time("7"), TarTime(seconds: 7, nanoseconds: 0))
        for bad in ["", "1.", "x", "1.2.3", "99999999999999999999"] { XCTAssertNil(time(bad), bad) }
    }

    func testCorruptArchives() {
        let good = Self.header("a", size: 3) + Self.padded(Array("abc".utf8))
        var badSum = good
        badSum[0] ^= 1
        let cases: [(String, [UInt8], String)] = [
            ("checksum", badSum + Self.end, "checksum mismatch"),
            ("truncated", Array(good.prefix(514)), "truncated inside member 1"),
            ("no end", good, "no end-of-archive marker"),
            ("lone zero block", good + [UInt8](repeating: 0, count: 512), "no end-of-archive marker"),
            ("non-zero second end block", good + [UInt8](repeating: 0, count: 512) + Self.header("b"), "second end-of-archive block"),
            ("data after end", good + Self.end + [0, 0, 9], "after the end-of-archive marker"),
            ("empty", [], "empty"),
            ("bad pax record", Self.header("p", type: "x", size: 6) + Self.padded(Array("9 a=b\n".utf8)) + good + Self.end, "pax"),
            ("pax header too big", Self.header("p", type: "x", size: 2 << 20), "limit"),
            ("sparse", Self.header("s", type: "S") + Self.end, "sparse"),
            ("pax sparse", Self.pax([("GNU.sparse.major", "1")]) + good + Self.end, "sparse"),
            ("negative size", Self.header("n", sizeField: [0xFF] + [UInt8](repeating: 0xFF, count: 11)), "negative size"),
            ("pax then end", Self.pax([("path", "x")]) + Self.end, "not followed by a member"),
            ("bad pax size", Self.pax([("size", "12x")]) + good + Self.end, "bad pax size '12x'"),
            ("bad pax mtime", Self.pax([("mtime", "1e400")]) + good + Self.end, "bad pax mtime '1e400'"),
        ]
        for (name, archive, message) in cases {
            XCTAssertThrowsError(try events(archive), name) { error in
                guard case TarError.corrupt(_, let reason) = error else { return XCTFail("\(name): \(error)") }
                XCTAssertTrue(reason.contains(message), "\(name): \(reason)")
                XCTAssertFalse(reason.contains("''"), "\(name) quotes a value twice: \(reason)")
            }
        }
    }

    func testMemberPathRules() throws {
        func path(_ s: String, strip: Int = 0) throws -> String? {
            try MemberPath.member(Array(s.utf8), strip: strip).map { String(decoding: $0.joined, as: UTF8.self) }
        }
        XCTAssertEqual(try path("./a//b/./c"), "a/b/c")
        XCTAssertEqual(try path("a/b/../c"), "a/c")
        XCTAssertEqual(try path("./"), "")
        XCTAssertEqual(try path("./top/a", strip: 2), "a")
        XCTAssertNil(try path("./top", strip: 2))
        XCTAssertEqual(try path("a/b/../../c/", strip: 0), "c")
        XCTAssertThrowsError(try path("a/../b", strip: 1))  // strip drops "a"; the ".." then leaves
        XCTAssertNil(try path("a//", strip: 1))
        // The parts of a normalised name, as the extractor uses them.
        let deep = try XCTUnwrap(try MemberPath.member(Array("./x//y/./z.c".utf8), strip: 0))
        XCTAssertEqual(deep.depth, 3)
        XCTAssertEqual(deep.components, [Array("x".utf8), Array("y".utf8), Array("z.c".utf8)])
        XCTAssertEqual(deep.leaf.map(Array.init), Array("z.c".utf8))
        XCTAssertEqual(Array(deep.parent), Array("x/y".utf8))
        XCTAssertEqual(deep, MemberPath(components: deep.components))
        let top = try XCTUnwrap(try MemberPath.member(Array("f".utf8), strip: 0))
        XCTAssertEqual(top.leaf.map(Array.init), Array("f".utf8))
        XCTAssertTrue(top.parent.isEmpty)
        let root = try XCTUnwrap(try MemberPath.member(Array("./".utf8), strip: 0))
        XCTAssertTrue(root.isEmpty)
        XCTAssertNil(root.leaf)
        for bad in ["/etc/passwd", "../x", "a/../../x", "", "a\nb", "a\u{1}b", String(repeating: "x", count: 256)] {
            XCTAssertThrowsError(try path(bad), bad)
        }
        func link(_ target: String, depth: Int) -> Bool {
            (try? MemberPath.checkSymlinkTarget(Array(target.utf8), linkDirectoryDepth: depth)) != nil
        }
        XCTAssertTrue(link("../lib/x.so", depth: 1))
        XCTAssertTrue(link(".", depth: 0))
        XCTAssertTrue(link("a/b", depth: 0))
        XCTAssertFalse(link("..", depth: 0))
        XCTAssertFalse(link("../../x", depth: 1))
        XCTAssertFalse(link("a/../..", depth: 3))
        XCTAssertFalse(link("/abs", depth: 3))
    }

    func testStateRoundTripsAndBadStatesAreRefused() throws {
        var reader = TarReader()
        let recorder = Recorder()
        let archive = Self.pax([("path", "p")]) + Self.header("a", size: 700) + Self.padded([UInt8](repeating: 65, count: 700)) + Self.end
        try archive.prefix(800).withUnsafeBytes { try reader.consume($0, into: recorder) }
        let data = try JSONEncoder().encode(reader.state)
        var restored = try TarReader(restoring: JSONDecoder().decode(TarReaderState.self, from: data))
        XCTAssertEqual(restored.state, reader.state)
        try archive.dropFirst(800).withUnsafeBytes { try restored.consume($0, into: recorder) }
        try restored.finish()
        XCTAssertEqual(recorder.events.first, "entry p regular size=700 mtime=1000000000.0 link=")
    }
}
