import Foundation
import XCTest
@testable import SluiceTestSupport

/// `untar` against the references: GNU tar and bsdtar each archive a generated tree in
/// every format they write; GNU tar's extraction of each archive is the expected tree
/// (names, types, contents, permission bits, mtimes, link targets, link counts).
final class UntarDifferentialTests: XCTestCase {
    private func compare(
        format: String, writer: String, longNames: Bool, files: Int = 400, strip: Int = 0,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let dir = try makeTemporaryDirectory(self)
        try makeSourceTree(at: dir + "/src", files: files, seed: UInt64(format.utf8.count * 31 + writer.utf8.count), longNames: longNames)
        let create: String
        switch writer {
        case "gnu": create = "tar --format=\(format) -cf \(dir)/a.tar -C \(dir)/src ."
        default: create = "bsdtar --format \(format) -cf \(dir)/a.tar -C \(dir)/src ."
        }
        XCTAssertEqual(try shell(create).status, 0, "creating the \(writer) \(format) archive", file: file, line: line)
        let stripWord = strip > 0 ? " strip=\(strip)" : ""
        try FileManager.default.createDirectory(atPath: dir + "/ref", withIntermediateDirectories: true)
        let stripOption = strip > 0 ? " --strip-components=\(strip)" : ""
        XCTAssertEqual(try shell("tar -xf \(dir)/a.tar -C \(dir)/ref\(stripOption)").status, 0, file: file, line: line)
        try FileManager.default.createDirectory(atPath: dir + "/bsdref", withIntermediateDirectories: true)
        XCTAssertEqual(try shell("bsdtar -xpf \(dir)/a.tar -C \(dir)/bsdref\(stripOption)").status, 0, file: file, line: line)
        let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/out\(stripWord)"])
        XCTAssertEqual(result.status, 0, "sluice failed: \(result.stderr)", file: file, line: line)
        // GNU tar (1.34) leaves the directories of bsdtar's archives with the time of extraction;
        // bsdtar's own extraction restores them as untar does, so they are compared there.
        let directoryMtimes = writer == "gnu"
        let expected = treeSnapshot(dir + "/ref", includeRoot: strip == 0, directoryMtimes: directoryMtimes)
        let actual = treeSnapshot(dir + "/out", includeRoot: strip == 0, directoryMtimes: directoryMtimes)
        XCTAssertGreaterThan(expected.count, files / 2, file: file, line: line)
        let differences = treeDifferences(expected, actual)
        // bsdtar leaves the destination directory's own mtime alone: the root is not compared.
        let bsdDifferences = treeDifferences(treeSnapshot(dir + "/bsdref"), treeSnapshot(dir + "/out"))
        XCTAssertEqual(bsdDifferences, [], "against bsdtar's extraction: \(writer) \(format): \(bsdDifferences.count) differences", file: file, line: line)
        XCTAssertEqual(differences, [], "\(writer) \(format): \(differences.count) differences", file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"), file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out.sluice"), file: file, line: line)
    }

    func testGNUTarPax() throws { try compare(format: "pax", writer: "gnu", longNames: true) }
    func testGNUTarGnu() throws { try compare(format: "gnu", writer: "gnu", longNames: true) }
    func testGNUTarUstar() throws { try compare(format: "ustar", writer: "gnu", longNames: false) }
    func testGNUTarV7() throws { try compare(format: "v7", writer: "gnu", longNames: false) }
    func testGNUTarOldGnu() throws { try compare(format: "oldgnu", writer: "gnu", longNames: true) }
    func testBsdtarPax() throws { try compare(format: "pax", writer: "bsd", longNames: true) }
    func testBsdtarGnutar() throws { try compare(format: "gnutar", writer: "bsd", longNames: true) }
    func testBsdtarUstar() throws { try compare(format: "ustar", writer: "bsd", longNames: false) }
    func testBsdtarV7() throws { try compare(format: "v7tar", writer: "bsd", longNames: false) }
    func testStripComponents() throws { try compare(format: "pax", writer: "gnu", longNames: true, strip: 2) }

    /// Later members with the same name replace earlier ones (file over file, file over
    /// symlink, directory over file), as GNU tar's extraction does.
    func testDuplicateNamesReplace() throws {
        let dir = try makeTemporaryDirectory(self)
        try shell(
            """
            set -e; cd \(dir); mkdir -p one two three
            echo old > one/name; ln -s elsewhere one/sym; echo file > one/becomes-dir
            echo new-and-longer > two/name; echo over-the-link > two/sym
            mkdir three/becomes-dir; echo inside > three/becomes-dir/f
            tar -cf a.tar -C one . ; tar -rf a.tar -C two . ; tar -rf a.tar -C three .
            mkdir ref; tar -xf a.tar -C ref
            """)
        let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/out"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(treeDifferences(treeSnapshot(dir + "/ref"), treeSnapshot(dir + "/out")), [])
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/sym", encoding: .utf8), "over-the-link\n")
    }

    /// A member over 8 GiB (base-256 size in GNU format, a pax `size` record in pax): the
    /// header and the first megabytes of such archives, made by GNU tar from a sparse file.
    func testMembersOver8GiBAreSizedFromBase256AndPax() throws {
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(try shell("cd \(dir) && truncate -s 9000000000 big && echo tail >> big").status, 0)
        for format in ["gnu", "pax"] {
            // Only the beginning: the stage must be at the start of a 9 GB member when the stream ends.
            try shell("cd \(dir) && tar --format=\(format) -cf - big | head -c 3000000 > \(format).head; true")
            let result = try SluiceBinary.run(["-q", "read \(dir)/\(format).head | untar \(dir)/out-\(format)"])
            XCTAssertEqual(result.status, 5, "\(format): \(result.stderr)")
            // The big file's 9,000,000,005 bytes minus what the head holds are missing.
            XCTAssertTrue(result.stderr.contains("truncated inside member 1 of it (89970"), "\(format): \(result.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out-\(format).sluice-part"))
        }
    }

    /// Whole members over 8 GiB, as GNU tar writes them: a base-256 size field (gnu) and a
    /// pax `size` record (pax), each followed by a small member (the reader's offsets past
    /// 8 GiB). The source is a sparse file with marked bytes at the start, across the 8 GiB
    /// line and at the end, so it costs no space; the extraction goes to tmpfs (8 GiB of
    /// memory for a few seconds, removed before the next format) instead of a slow disk.
    func testExtractMemberOver8GiB() throws {
        try requireSlowTests()
        let dir = try makeMemoryTemporaryDirectory(self)
        let size: UInt64 = (8 << 30) + 1_000_003
        let mask = umask(0o022)
        umask(mask)
        try shell(
            """
            set -e; mkdir -p \(dir)/src; cd \(dir)/src; truncate -s \(size) big
            for at in 0 \(4 << 30) \((8 << 30) - 3) \(size - 7); do printf 'mark%07d' $at | dd of=big bs=1 seek=$at conv=notrunc status=none; done
            truncate -s \(size) big; echo after > small; touch -d @1500000000.5 big small; chmod 640 big
            """)
        for format in ["gnu", "pax"] {
            let archive = "tar --format=\(format) -cf - -C \(dir)/src big small"
            // The writer's encoding of the size: base-256 (top bit of the size field) or a pax record.
            let head = try shell("\(archive) | head -c 2048 | od -An -tx1 -v | tr -d ' \\n'", capture: true).output
            let headBytes = stride(from: 0, to: head.count - 1, by: 2).compactMap { i -> UInt8? in
                let start = head.index(head.startIndex, offsetBy: i)
                return UInt8(head[start..<head.index(start, offsetBy: 2)], radix: 16)
            }
            XCTAssertEqual(headBytes.count, 2048)
            if format == "gnu" {
                XCTAssertEqual(headBytes[124] & 0x80, 0x80, "GNU tar wrote no base-256 size")
            } else {
                XCTAssertEqual(headBytes[156], UInt8(ascii: "x"))
                XCTAssertTrue(String(decoding: headBytes[512..<1024], as: UTF8.self).contains("size=\(size)\n"))
            }
            let out = dir + "/out-" + format
            let run = try shell("set -o pipefail; \(archive) | \(SluiceBinary.path) -q 'stdin | untar \(out)'")
            XCTAssertEqual(run.status, 0, format)
            XCTAssertEqual(try shell("cmp \(dir)/src/big \(out)/big && cmp \(dir)/src/small \(out)/small").status, 0, format)
            for name in ["big", "small"] {
                var want = stat(), got = stat()
                XCTAssertEqual(stat(dir + "/src/" + name, &want), 0)
                XCTAssertEqual(stat(out + "/" + name, &got), 0)
                XCTAssertEqual(got.st_size, want.st_size, "\(format) \(name)")
                XCTAssertEqual(got.st_mode & 0o777, want.st_mode & 0o777 & ~mask, "\(format) \(name)")
                XCTAssertEqual(got.st_mtim.tv_sec, want.st_mtim.tv_sec, "\(format) \(name)")
                // Only pax carries the fraction of a second.
                XCTAssertEqual(got.st_mtim.tv_nsec, format == "pax" ? want.st_mtim.tv_nsec : 0, "\(format) \(name)")
            }
            XCTAssertEqual(try shell("rm -rf \(out)").status, 0)
        }
    }
}
