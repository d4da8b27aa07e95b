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

    /// The whole > 8 GiB member, extracted and compared (needs ~9 GB of free disk).
    func testExtractMemberOver8GiB() throws {
        try requireSlowTests()
        let dir = try makeTemporaryDirectory(self)
        XCTAssertEqual(try shell("cd \(dir) && truncate -s 8600000000 big && echo tail >> big").status, 0)
        let run = try shell("cd \(dir) && tar --format=gnu -cf - big | \(SluiceBinary.path) -q 'stdin | untar out2'")
        XCTAssertEqual(run.status, 0)
        XCTAssertEqual(try shell("cmp \(dir)/big \(dir)/out2/big").status, 0)
    }
}
