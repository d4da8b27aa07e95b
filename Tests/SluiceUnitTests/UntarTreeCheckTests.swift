import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The ledger of what the partial tree holds, and the check a resumed run makes with it
/// before the tree becomes DIR: members finished before the cut that changed, went missing
/// or were replaced, and names no member made, are found; a tree the killed run carried on
/// past its cut (new names, a duplicate replacing an earlier member) is not a difference.
final class UntarTreeCheckTests: XCTestCase {
    private var dir = ""

    override func setUpWithError() throws {
        dir = try makeMemoryTemporaryDirectory(self)
    }

    private func feed(_ sink: UntarSink, _ bytes: ArraySlice<UInt8>) throws {
        var at = bytes.startIndex
        while at < bytes.endIndex {
            let n = min(bytes.endIndex - at, 7_000)
            try bytes[at..<(at + n)].withUnsafeBytes { try sink.write($0) }
            at += n
        }
    }

    /// `src`: small files, a directory with files, a symlink, a hard link, then `big`; then
    /// `a` again with other bytes (appended: a duplicate member, which the hard link `h`
    /// to the first `a` must survive).
    private func archive() throws -> [UInt8] {
        let src = dir + "/src"
        try FileManager.default.createDirectory(atPath: src + "/sub/deep", withIntermediateDirectories: true)
        for (i, name) in ["a", "b", "sub/c", "sub/d", "sub/deep/e"].enumerated() {
            try Data(makeTestData(count: 3000 + i * 100, seed: UInt64(i))).write(to: URL(fileURLWithPath: src + "/" + name))
        }
        XCTAssertEqual(symlink("c", src + "/sub/s"), 0)
        XCTAssertEqual(link(src + "/a", src + "/h"), 0)
        try Data(makeTestData(count: 400_000, seed: 9)).write(to: URL(fileURLWithPath: src + "/big"))
        let tar = dir + "/a.tar"
        var result = try shell("tar -cf \(tar) -C \(src) a b h sub big")
        XCTAssertEqual(result.status, 0, result.output)
        try FileManager.default.removeItem(atPath: src + "/a")
        try Data(makeTestData(count: 5000, seed: 10)).write(to: URL(fileURLWithPath: src + "/a"))
        result = try shell("tar -rf \(tar) -C \(src) a")
        XCTAssertEqual(result.status, 0, result.output)
        return try [UInt8](Data(contentsOf: URL(fileURLWithPath: tar)))
    }

    private func wholeTree(_ bytes: [UInt8]) throws -> [String: TreeEntry] {
        let out = dir + "/whole"
        let sink = try UntarSink(directory: out)
        try feed(sink, bytes[...])
        try sink.finish()
        defer { try? FileManager.default.removeItem(atPath: out) }
        return treeSnapshot(out)
    }

    /// Cuts everywhere, the killed sink writing on past each (up to the end of the
    /// archive): every resume finishes with the uninterrupted tree.
    func testTreesCarriedPastTheCutResumeWithoutADifference() throws {
        let bytes = try archive()
        let expected = try wholeTree(bytes)
        let out = dir + "/out"
        var random = SeededRandom(seed: 3)
        for _ in 0..<40 {
            let cut = Int(random.next() % UInt64(bytes.count))
            let beyond = cut + Int(random.next() % UInt64(bytes.count - cut + 1))
            let first = try UntarSink(directory: out)
            try feed(first, bytes[..<cut])
            let state = try roundTrip(first.snapshot())
            try feed(first, bytes[cut..<beyond])
            let second = try UntarSink(directory: out, restoring: state)
            try feed(second, bytes[cut...])
            try second.finish()
            XCTAssertEqual(treeDifferences(expected, treeSnapshot(out)), [], "cut \(cut), killed at \(beyond)")
            try FileManager.default.removeItem(atPath: out)
        }
    }

    private func roundTrip(_ state: UntarState) throws -> UntarState {
        let decoded = try JSONDecoder().decode(StageState.self, from: try JSONEncoder().encode(StageState(state)))
        return try XCTUnwrap(decoded.as(UntarState.self))
    }

    /// Each change to what was finished before the cut (inside `big`) is found at the end,
    /// naming the member (exit 2); DIR is not made, nothing outside the tree is touched;
    /// the untouched tree finishes.
    func testChangesBeforeTheCutAreFoundBeforeTheTreeBecomesDIR() throws {
        let bytes = try archive()
        let expected = try wholeTree(bytes)
        let out = dir + "/out", part = dir + "/out.sluice-part"
        let outside = dir + "/outside"
        try Data("keep".utf8).write(to: URL(fileURLWithPath: outside))
        try FileManager.default.createDirectory(atPath: dir + "/outside-dir", withIntermediateDirectories: true)
        let bigHeader = stride(from: 0, to: bytes.count, by: 512).first { bytes[$0...].starts(with: Array("big\0".utf8)) }
        let bigData = try XCTUnwrap(bigHeader) + 512 + 1000
        let changes: [(String, String, () throws -> Void)] = [
            ("flip a byte", "sub/c", { try self.flipByte(part + "/sub/c", at: 10) }),
            ("truncate", "b", { try self.shellOK("truncate -s 100 \(part)/b") }),
            ("delete", "sub/d", { try self.shellOK("rm \(part)/sub/d") }),
            ("symlink to a file outside", "b", { try self.shellOK("rm \(part)/b && ln -s \(outside) \(part)/b") }),
            ("a directory replaced by a symlink", "sub/deep", { try self.shellOK("rm -r \(part)/sub/deep && ln -s \(self.dir)/outside-dir \(part)/sub/deep") }),
            ("an extra file", "sub/extra", { try self.shellOK("echo x > \(part)/sub/extra") }),
            ("an extra directory", "new", { try self.shellOK("mkdir \(part)/new") }),
            ("a FIFO for a file", "sub/c", { try self.shellOK("rm \(part)/sub/c && mkfifo \(part)/sub/c") }),
            ("a mode changed", "h", { try self.shellOK("chmod 600 \(part)/h") }),
            ("an mtime changed", "sub/deep/e", { try self.shellOK("touch \(part)/sub/deep/e") }),
            ("a symlink retargeted", "sub/s", { try self.shellOK("ln -sfn d \(part)/sub/s") }),
            ("a symlink for a directory's file", "sub/deep/e", { try self.shellOK("rm \(part)/sub/deep/e && ln -s ../c \(part)/sub/deep/e") }),
        ]
        for (what, member, change) in changes + [("nothing", "", {})] {
            let first = try UntarSink(directory: out)
            try feed(first, bytes[..<bigData])
            let state = try roundTrip(first.snapshot())
            XCTAssertEqual(state.current.map { String(decoding: $0.path.bytes, as: UTF8.self) }, "big", what)
            try change()
            let second = try UntarSink(directory: out, restoring: state)
            try feed(second, bytes[bigData...])
            if member.isEmpty {
                try second.finish()
                XCTAssertEqual(treeDifferences(expected, treeSnapshot(out)), [])
                try FileManager.default.removeItem(atPath: out)
                continue
            }
            XCTAssertThrowsError(try second.finish(), what) { error in
                guard case .unsafePath(let path, let reason) = error as? SluiceError else { return XCTFail("\(what): \(error)") }
                XCTAssertEqual(path, part, what)
                XCTAssertTrue(reason.hasPrefix("'\(member)' "), "\(what): \(reason)")
                XCTAssertTrue(reason.contains("--restart"), "\(what): \(reason)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), what)
            XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "keep", what)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir + "/outside-dir"), [], what)
            UntarSink.discard(directory: out)
        }
    }

    private func flipByte(_ path: String, at offset: UInt64) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: offset)
        let byte = try XCTUnwrap(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: offset)
        try handle.write(contentsOf: Data([~byte]))
    }

    private func shellOK(_ command: String) throws {
        let result = try shell(command)
        XCTAssertEqual(result.status, 0, "\(command): \(result.output)")
    }

    /// The ledger keeps one entry per name (the last made), in the order made; restoring
    /// marks every entry unverified; bytes untar could not have written are refused.
    func testLedgerKeepsTheFinalStateAndRefusesForeignBytes() throws {
        var ledger = TreeLedger()
        ledger.record(Array("a".utf8), kind: .file, hash: 1)
        ledger.record(Array("d".utf8), kind: .directory, hash: TreeLedger.directoryHash)
        ledger.record(Array("a".utf8), kind: .symlink, hash: 2)
        ledger.forget(Array("d".utf8))
        ledger.record(Array("d/x".utf8), kind: .file, hash: 3)
        XCTAssertEqual(ledger.live.map { String(decoding: $0.name, as: UTF8.self) }, ["a", "d/x"])
        XCTAssertEqual(ledger.entry(Array("a".utf8))?.hash, 2)
        XCTAssertNil(ledger.entry(Array("d".utf8)))
        let packed = ledger.snapshot()
        var restored = try XCTUnwrap(TreeLedger(restoring: packed))
        XCTAssertEqual(restored.live.map(\.unverified), [true, true])
        XCTAssertEqual(restored.snapshot(), packed, "a checkpoint never carries the in-memory mark")
        XCTAssertEqual(packed.count, (5 + 1 + 8) + (5 + 3 + 8), "'d/x' shares nothing with 'a'")
        restored.record(Array("a".utf8), kind: .file, hash: 4)
        XCTAssertEqual(restored.live.map(\.unverified), [true, false])
        // Many replacements of one name stay one entry.
        for i in 0..<5000 { restored.record(Array("a".utf8), kind: .file, hash: UInt64(i)) }
        XCTAssertEqual(restored.live.count, 2)
        XCTAssertLessThan(restored.snapshot().count, 64)
        // Cuts encode only what was made since the last one, until an entry dies: each
        // snapshot reads back as the ledger it was taken from.
        var random = SeededRandom(seed: 12)
        var growing = TreeLedger()
        for step in 0..<400 {
            let name = Array("d\(random.next() % 6)/f\(random.next() % 60)".utf8)
            if random.next() % 5 == 0 {
                growing.forget(name)
            } else {
                growing.record(name, kind: .file, hash: UInt64(step))
            }
            if random.next() % 7 == 0 {
                let cut = growing.snapshot()
                let reread = try XCTUnwrap(TreeLedger(restoring: cut), "step \(step)")
                XCTAssertEqual(reread.live.map(\.name), growing.live.map(\.name), "step \(step)")
                XCTAssertEqual(reread.live.map(\.hash), growing.live.map(\.hash), "step \(step)")
            }
        }

        // Front-coded: kind, bytes shared with the previous name, the rest's length, the rest, the hash.
        func entry(_ kind: UInt8, _ name: String, shared: Int = 0, hash: UInt64 = 7) -> [UInt8] {
            let n = Array(name.utf8)
            return [kind, UInt8(shared), 0, UInt8(n.count & 0xff), UInt8(n.count >> 8)] + n
                + withUnsafeBytes(of: hash.littleEndian) { Array($0) }
        }
        // Forged: 14 bytes per entry spelling a 4 KiB name each; more names than `maxBytes`
        // holds are refused before they are spelled out, not decoded into gigabytes.
        let long = String(repeating: "n", count: MemberPath.maxLength - 1)
        var forged = entry(1, long)
        let fits = TreeLedger.maxBytes / (MemberPath.maxLength + 11)
        for i in 0..<(fits + 100) {
            let last = UInt8(truncatingIfNeeded: i)
            forged +=
                [1, UInt8((MemberPath.maxLength - 2) & 0xff), UInt8((MemberPath.maxLength - 2) >> 8), 1, 0, last]
                + withUnsafeBytes(of: UInt64(7).littleEndian) { Array($0) }
        }
        XCTAssertLessThan(forged.count, 1 << 20)
        XCTAssertTrue(TreeLedger.decode(forged) == nil, "names spelling more than maxBytes")
        XCTAssertNotNil(TreeLedger.decode(Array(forged.prefix(4108 + 14 * (fits - 2)))), "fewer names decode")
        let two = try XCTUnwrap(TreeLedger(restoring: entry(2, "dir") + entry(1, "/a", shared: 3)))
        XCTAssertEqual(two.live.map { String(decoding: $0.name, as: UTF8.self) }, ["dir", "dir/a"])
        for (what, bytes) in [
            ("a name twice", entry(1, "a") + entry(3, "a")),
            ("a name twice, front-coded", entry(1, "ab") + entry(3, "", shared: 2)),
            ("more shared than the previous name has", entry(1, "a") + entry(1, "b", shared: 2)),
            ("a dead entry", entry(0, "a")),
            ("the in-memory mark", entry(0x81, "a")),
            ("an unknown kind", entry(5, "a")),
            ("a name leaving the tree", entry(1, "../a")),
            ("a name not in normal form", entry(1, "a//b")),
            ("an empty name", entry(1, "")),
            ("cut short", Array(entry(1, "a").dropLast())),
        ] {
            XCTAssertNil(TreeLedger(restoring: bytes), what)
        }
    }
}
