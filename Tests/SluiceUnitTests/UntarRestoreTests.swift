import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The resume property for `untar`: cut the stage at random bytes (inside headers,
/// extended headers, member data, padding, the end marker), snapshot → JSON → decode →
/// restore in a fresh sink over the same partial tree (after the "killed" sink wrote on
/// past the cut) → continue: the tree equals an uninterrupted extraction.
final class UntarRestoreTests: XCTestCase {
    private func archive(format: String, in dir: String, seed: UInt64) throws -> [UInt8] {
        try makeSourceTree(at: dir + "/src-\(format)", files: 60, seed: seed, largeFile: 200_000)
        XCTAssertEqual(try shell("tar --format=\(format) -cf \(dir)/\(format).tar -C \(dir)/src-\(format) .").status, 0)
        return try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/\(format).tar")))
    }

    private func feed(_ sink: UntarSink, _ bytes: ArraySlice<UInt8>, random: inout SeededRandom) throws {
        var at = bytes.startIndex
        while at < bytes.endIndex {
            let n = min(bytes.endIndex - at, 1 + Int(random.next() % 70_000))
            try bytes[at..<(at + n)].withUnsafeBytes { try sink.write($0) }
            at += n
        }
    }

    func testRandomCutsRestoreToTheSameTree() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        var random = SeededRandom(seed: 11)
        var cuts = 0
        var phases: Set<String> = []
        for (format, count) in [("pax", 110), ("gnu", 100)] {
            let bytes = try archive(format: format, in: dir, seed: UInt64(count))
            let out = dir + "/out"
            let whole = try UntarSink(directory: out)
            try feed(whole, bytes[...], random: &random)
            try whole.finish()
            let expected = treeSnapshot(out, includeRoot: true)
            XCTAssertGreaterThan(expected.count, 60)
            try FileManager.default.removeItem(atPath: out)

            for _ in 0..<count {
                let cut = Int(random.next() % UInt64(bytes.count))
                let first = try UntarSink(directory: out)
                try feed(first, bytes[..<cut], random: &random)
                let saved = try JSONEncoder().encode(StageState(first.snapshot()))
                // The killed run got further than its last checkpoint before it died.
                let beyond = min(bytes.count, cut + Int(random.next() % 40_000))
                try feed(first, bytes[cut..<beyond], random: &random)
                let decoded = try JSONDecoder().decode(StageState.self, from: saved)
                guard let state = decoded.as(UntarState.self) else { return XCTFail("decoded another stage's state") }
                phases.insert(state.reader.phase.rawValue + (state.current == nil ? "" : "+file"))
                let second = try UntarSink(directory: out, restoring: state)
                try feed(second, bytes[cut...], random: &random)
                try second.finish()
                let differences = treeDifferences(expected, treeSnapshot(out, includeRoot: true))
                XCTAssertEqual(differences, [], "\(format) cut at \(cut)")
                try FileManager.default.removeItem(atPath: out)
                cuts += 1
            }
        }
        XCTAssertGreaterThanOrEqual(cuts, 200)
        for phase in ["header", "member+file", "padding", "extended"] {
            XCTAssertTrue(phases.contains(phase), "no cut landed in phase \(phase): \(phases)")
        }
    }

    /// A partial file changed since the checkpoint (its CRC differs) is not continued.
    func testChangedPartialFileIsNotContinued() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
        try Data(makeTestData(count: 100_000, seed: 3)).write(to: URL(fileURLWithPath: dir + "/src/big"))
        XCTAssertEqual(try shell("tar -cf \(dir)/a.tar -C \(dir)/src big").status, 0)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/a.tar")))
        var random = SeededRandom(seed: 1)
        let first = try UntarSink(directory: dir + "/out")
        try feed(first, bytes[..<50_000], random: &random)
        let state = first.snapshot()
        XCTAssertNotNil(state.current)
        // Someone edits a byte the checkpoint covers.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: dir + "/out.sluice-part/big"))
        try handle.seek(toOffset: 100)
        handle.write(Data([0xFF, 0xFE]))
        try handle.close()
        XCTAssertThrowsError(try UntarSink(directory: dir + "/out", restoring: state)) { error in
            XCTAssertTrue(error is PartialOutputChanged, "\(error)")
        }
        // A missing partial tree too.
        try FileManager.default.removeItem(atPath: dir + "/out.sluice-part")
        XCTAssertThrowsError(try UntarSink(directory: dir + "/out", restoring: state)) { error in
            XCTAssertTrue(error is PartialOutputChanged, "\(error)")
        }
    }

    /// The partial file swapped for a hard link to a file outside DIR with the same bytes
    /// (its CRC matches): the resume continues in a copy, never cutting or writing that file.
    func testHardLinkedPartialFileIsNotContinued() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
        try Data(makeTestData(count: 100_000, seed: 4)).write(to: URL(fileURLWithPath: dir + "/src/big"))
        XCTAssertEqual(try shell("tar -cf \(dir)/a.tar -C \(dir)/src big").status, 0)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/a.tar")))
        var random = SeededRandom(seed: 2)
        let first = try UntarSink(directory: dir + "/out")
        try feed(first, bytes[..<50_000], random: &random)
        let state = first.snapshot()
        XCTAssertNotNil(state.current)
        let partialFile = dir + "/out.sluice-part/big"
        let outside = dir + "/outside"
        try FileManager.default.copyItem(atPath: partialFile, toPath: outside)
        let before = try Data(contentsOf: URL(fileURLWithPath: outside))
        try FileManager.default.removeItem(atPath: partialFile)
        XCTAssertEqual(link(outside, partialFile), 0)
        let second = try UntarSink(directory: dir + "/out", restoring: state)
        try feed(second, bytes[50_000...], random: &random)
        try second.finish()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: outside)), before, "a file outside DIR was written")
        XCTAssertEqual(
            try Data(contentsOf: URL(fileURLWithPath: dir + "/out/big")),
            try Data(contentsOf: URL(fileURLWithPath: dir + "/src/big")))
        var st = stat()
        XCTAssertEqual(stat(dir + "/out/big", &st), 0)
        XCTAssertEqual(st.st_nlink, 1)
        XCTAssertEqual(st.st_mode & 0o777, 0o644 & ~SafeExtractor.currentUmask())
    }

    /// A resume that continued in a private copy (the partial file had a second name: a
    /// later member's hard link made before the kill) and is killed again before its next
    /// cut: the next resume finds a file with one name, trusts the old checkpoint's mode
    /// flags, and must still end with the member's mode (the copy was made 0600).
    func testPrivateCopyKilledBeforeItsCutKeepsTheMembersMode() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
        try Data(makeTestData(count: 100_000, seed: 5)).write(to: URL(fileURLWithPath: dir + "/src/big"))
        XCTAssertEqual(chmod(dir + "/src/big", 0o644), 0)
        XCTAssertEqual(try shell("cd \(dir)/src && ln big big.hl && tar -cf \(dir)/a.tar big big.hl").status, 0)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/a.tar")))
        var random = SeededRandom(seed: 3)
        let first = try UntarSink(directory: dir + "/out")
        try feed(first, bytes[..<50_000], random: &random)
        let state = first.snapshot()
        XCTAssertNotNil(state.current)
        // The killed run went on past `big` and linked `big.hl` to it.
        try feed(first, bytes[50_000..<(bytes.count - 1024)], random: &random)
        // Resume 1 continues in a copy, then is killed before any cut.
        let second = try UntarSink(directory: dir + "/out", restoring: state)
        try feed(second, bytes[50_000..<60_000], random: &random)
        // Resume 2, from the same checkpoint, runs to the end.
        let third = try UntarSink(directory: dir + "/out", restoring: state)
        try feed(third, bytes[50_000...], random: &random)
        try third.finish()
        for name in ["big", "big.hl"] {
            var st = stat()
            XCTAssertEqual(stat(dir + "/out/" + name, &st), 0)
            XCTAssertEqual(st.st_mode & 0o777, 0o644 & ~SafeExtractor.currentUmask(), name)
        }
        XCTAssertEqual(
            try Data(contentsOf: URL(fileURLWithPath: dir + "/out/big.hl")),
            try Data(contentsOf: URL(fileURLWithPath: dir + "/src/big")))
    }

    /// A restored state is hostile input: fields no reader could have left are refused.
    func testEditedStatesAreRefused() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        XCTAssertEqual(try shell("mkdir \(dir)/out.sluice-part").status, 0)
        var base = UntarState(directory: dir + "/out", strip: 0, reader: TarReaderState(), current: nil, directories: [], root: nil)
        var edits: [(String, UntarState)] = []
        var s = base
        s.reader.pending = [UInt8](repeating: 1, count: 600)
        edits.append(("pending", s))
        s = base
        s.reader.phase = .member
        s.reader.remaining = 0
        edits.append(("member with nothing left", s))
        s = base
        s.reader.phase = .padding
        s.reader.padding = 700
        edits.append(("padding", s))
        s = base
        s.reader.phase = .extended
        s.reader.extendedType = UInt8(ascii: "x")
        s.reader.remaining = 1 << 40
        edits.append(("huge extended", s))
        s = base
        s.reader.pax["evil"] = ByteString([1])
        edits.append(("unknown pax key", s))
        s = base
        s.directories = [DirectoryMetadata(path: ByteString(Array("../up".utf8)), mode: 0o755, mtime: TarTime(seconds: 0, nanoseconds: 0))]
        edits.append(("directory outside", s))
        s = base
        s.strip = 3
        edits.append(("other strip", s))
        s = base
        s.version = 0  // before symlink hashes covered the mtime
        edits.append(("older version", s))
        s = base
        s.current = .init(
            path: ByteString(Array("a".utf8)), written: 1, size: 6, crc64: 0, mode: 0o644,
            mtime: TarTime(seconds: 0, nanoseconds: 0), needsChmod: false)
        edits.append(("file outside member", s))
        // In member data at byte 1 of 6: header at 0, data from 512; padding 506 after it.
        s.reader.phase = .member
        s.reader.remaining = 5
        s.reader.offset = 513
        s.reader.padding = 506
        let inMember = s
        s.current?.path = ByteString(Array("/etc/passwd".utf8))
        edits.append(("absolute current file", s))
        // The forged short file: bytes written and still to come no longer make the size.
        s = inMember
        s.current?.written = 0
        edits.append(("written 0", s))
        s = inMember
        s.current?.size = 1 << 40
        edits.append(("size", s))
        s = inMember
        s.current?.written = UInt64.max
        s.current?.size = 4
        edits.append(("written overflows", s))
        s = inMember
        s.current?.written = 2
        s.current?.size = 7
        edits.append(("written past the data start", s))
        s = inMember
        s.reader.padding = 7
        edits.append(("padding of another size", s))
        s = inMember
        s.reader.offset = 1000
        edits.append(("reader offset off its block", s))
        s = base
        s.reader.pending = [1, 2, 3]
        edits.append(("header bytes off their block", s))
        for (what, state) in edits {
            XCTAssertThrowsError(try UntarSink(directory: dir + "/out", restoring: state), what) { error in
                XCTAssertTrue(error is StateRejected, "\(what): \(error)")
            }
        }
        base.reader.phase = .header
        XCTAssertNoThrow(try UntarSink(directory: dir + "/out", restoring: base))
        // The consistent member state is accepted as far as the state goes (the file itself is missing).
        XCTAssertThrowsError(try UntarSink(directory: dir + "/out", restoring: inMember)) { error in
            XCTAssertTrue(error is PartialOutputChanged, "\(error)")
        }
    }

    /// The packed directory list: what is appended comes back in order (names sharing
    /// prefixes or not, mtimes before and after the epoch), and bytes it could not have
    /// written are refused, not misread.
    func testDirectoryListRoundTripsAndRefusesForeignBytes() throws {
        var random = SeededRandom(seed: 5)
        var dirs: [DirectoryMetadata] = []
        var path: [UInt8] = Array("a".utf8)
        for i in 0..<500 {
            switch random.next() % 3 {
            case 0: path += Array("/d\(i)".utf8)
            case 1: path = Array("top\(i)/x".utf8)
            default: path = Array(path.prefix(max(1, path.count - 3))) + Array("é\(i)".utf8)
            }
            let seconds = Int64(bitPattern: random.next()) >> Int64(random.next() % 64)
            dirs.append(
                DirectoryMetadata(
                    path: ByteString(path), mode: UInt32(random.next() % 0o7777),
                    mtime: TarTime(seconds: seconds, nanoseconds: Int32(random.next() % 1_000_000_000))))
        }
        let list = DirectoryList(dirs)
        XCTAssertEqual(list.list, dirs)
        XCTAssertEqual(list.count, dirs.count)
        let reread = try XCTUnwrap(DirectoryList(packed: list.bytes))
        XCTAssertEqual(reread.list, dirs)
        // Appending after a reread continues the front coding where it stopped.
        var continued = reread
        continued.append(dirs[0])
        XCTAssertEqual(continued.list, dirs + [dirs[0]])
        XCTAssertNil(DirectoryList(packed: []))
        XCTAssertNil(DirectoryList(packed: [1] + list.bytes.dropFirst()), "another format byte")
        XCTAssertNil(DirectoryList(packed: Array(list.bytes.dropLast())), "truncated")
        XCTAssertNil(DirectoryList(packed: [2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), "overlong number")
        XCTAssertNil(DirectoryList(packed: [2, 0o55, 0, 0, 5, 1, 0x61]), "shares more than the previous path has")
        XCTAssertNil(DirectoryList(packed: [2, 0o55, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1, 0x61]), "nanoseconds out of range")
        // A suffix length near 2^64: adding the shared count must not trap.
        let huge: [UInt8] = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        XCTAssertNil(DirectoryList(packed: [2, 0o55, 0, 0, 0, 1, 0x61] + [0o55, 0, 0, 1] + huge + [0x62]), "suffix length overflows")
    }
}
