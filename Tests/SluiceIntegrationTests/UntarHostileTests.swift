import Foundation
import XCTest
@testable import SluiceTestSupport

/// Hostile archives, written at test time with Python's tarfile (which writes whatever it
/// is told): each safety rule alone and combined. Each must end with exit 5, nothing
/// created or changed outside DIR (a snapshot of the whole test directory before and
/// after), and neither DIR nor DIR.sluice-part left.
final class UntarHostileTests: XCTestCase {
    /// name → Python statements adding members to the open TarFile `t` (helpers below).
    static let hostile: [(String, String)] = [
        ("absolute name", "reg(ABS + '/abs-file')"),
        ("dotdot escape", "reg('../escape')"),
        ("dotdot escape after a name", "reg('a/../../escape')"),
        ("deep dotdot escape", "d('a'); d('a/b'); reg('a/b/../../../escape')"),
        ("symlink to ..", "sym('up', '..')"),
        ("symlink to ../ then a file through it", "sym('up', '../'); reg('up/escape')"),
        ("symlink to an absolute directory", "sym('abs', ABS)"),
        ("symlink with .. after a name", "d('a'); sym('x', 'a/../..')"),
        ("nested symlink climbing too far", "d('a'); d('a/b'); sym('a/b/up', '../../..')"),
        ("symlink inside, then a file written through it", "d('d'); sym('s', 'd'); reg('s/f')"),
        ("symlink to . then a file through it", "sym('here', '.'); reg('here/f')"),
        ("directory, then symlink over it to .., then a file through it", "d('s'); sym('s', '..'); reg('s/escape')"),
        ("symlink replaced by a directory, then an escape", "d('d'); sym('s', 'd'); d('s'); reg('s/../../escape')"),
        ("hard link to an absolute path", "hard('h', ABS + '/abs-file')"),
        ("hard link out with ..", "hard('h', '../outside')"),
        ("hard link to a member not yet extracted", "hard('h', 'later'); reg('later')"),
        ("hard link chain through a symlink", "d('d'); reg('d/f'); sym('s', 'd'); hard('h', 's/f')"),
        ("hard link chain ending outside", "reg('a'); hard('b', 'a'); hard('c', 'b'); hard('d', '../c')"),
        ("hard link to DIR itself", "hard('h', '.')"),
        ("hard link to a directory", "d('d'); hard('h', 'd')"),
        ("file named .", "reg('.')"),
        ("file named ./.", "reg('./.')"),
        ("symlink named .", "sym('.', 'x')"),
        ("symlink named ./ to ..", "sym('./', '..')"),
        ("file replacing DIR via a/..", "d('a'); reg('a/..')"),
        ("NUL in a pax name", "reg('a\\x00b', pax=True)"),
        ("newline in a name", "reg('evil\\nname')"),
        ("NUL in a symlink target", "sym('s', 'a\\x00b', pax=True)"),
        ("empty name", "reg('')"),
        ("name longer than 4096 bytes", "reg('n/' * 2100 + 'f', pax=True)"),
        ("pax header over the limit", "reg('f', extra={'comment': 'x' * (2 << 20)})"),
        ("GNU sparse member", "sparse_gnu('holes')"),
        (
            "pax sparse member",
            "reg('holes', extra={'GNU.sparse.major': '1', 'GNU.sparse.minor': '0', 'GNU.sparse.name': 'holes', 'GNU.sparse.realsize': '100'})"
        ),
        ("directory replaced by a file while not empty", "d('d'); reg('d/f'); reg('d')"),
        // A hard link to a symlink is that symlink at another depth: `../..` from `d/e` is DIR, from `h` outside it.
        // Names need not be UTF-8: the partial tree holding them must still be removed.
        ("names that are not UTF-8, then an escape", "reg('d\\udcff/x\\udcfe'); reg('../escape')"),
        ("hard link moving a nested symlink up and out", "d('d'); d('d/e'); sym('d/e/l', '../..'); hard('h', 'd/e/l')"),
    ]

    /// Corrupt archives (damaged after writing): (name, Python that writes `raw` bytes of `path`).
    static let corrupt: [(String, String)] = [
        ("header checksum failure", "reg('a', data=b'x' * 100); done(); b = bytearray(open(path,'rb').read()); b[0] ^= 1; open(path,'wb').write(b)"),
        ("truncated member", "reg('a', data=b'x' * 5000); done(); b = open(path,'rb').read()[:512 + 3000]; open(path,'wb').write(b)"),
        ("no end-of-archive marker", "reg('a', data=b'x' * 100); done(); b = open(path,'rb').read()[:1024]; open(path,'wb').write(b)"),
        (
            "non-zero block where the second end block should be",
            "reg('a', data=b'x' * 100); done(); b = bytearray(open(path,'rb').read()); b[1024 + 512] = 7; open(path,'wb').write(b)"
        ),
        ("garbage after the end", "reg('a', data=b'x' * 100); done(); b = bytearray(open(path,'rb').read()); b[-1] = 1; open(path,'wb').write(b)"),
        ("not a tar at all", "done(); open(path,'wb').write(b'hello world, this is not a tar archive' * 40)"),
        (
            "bad octal in the size field",
            "reg('a', data=b'x' * 100); done(); b = bytearray(open(path,'rb').read()); b[124:136] = b'00000000z00\\x00'; s = sum(b[:148]) + 256 + sum(b[156:512]); b[148:156] = b'%06o\\x00 ' % s; open(path,'wb').write(b)"
        ),
    ]

    private static let prelude = """
        import io, sys, tarfile
        path, ABS, body = sys.argv[1], sys.argv[2], sys.argv[3]
        t = tarfile.open(path, 'w', format=tarfile.GNU_FORMAT)
        closed = False
        def info(name, kind, pax=False, extra=None):
            global t
            i = tarfile.TarInfo(name)
            i.type = kind
            i.mode = 0o644
            i.mtime = 1000000000
            if extra: i.pax_headers = dict(extra)
            if pax or extra:
                if t.format != tarfile.PAX_FORMAT:
                    t.close(); t = tarfile.open(path, 'a', format=tarfile.PAX_FORMAT)
                if pax: i.pax_headers['path'] = name
            return i
        def reg(name, data=b'data', pax=False, extra=None):
            i = info(name, tarfile.REGTYPE, pax, extra); i.size = len(data); t.addfile(i, io.BytesIO(data))
        def d(name):
            i = info(name, tarfile.DIRTYPE); i.mode = 0o755; t.addfile(i)
        def sym(name, target, pax=False):
            i = info(name, tarfile.SYMTYPE, pax); i.linkname = target
            if pax: i.pax_headers['linkpath'] = target
            t.addfile(i)
        def hard(name, target):
            i = info(name, tarfile.LNKTYPE); i.linkname = target; t.addfile(i)
        def sparse_gnu(name):
            i = info(name, tarfile.GNUTYPE_SPARSE); i.size = 0; t.addfile(i)
        def done():
            global closed
            if not closed: t.close(); closed = True
        exec(body)
        done()
        """

    private func makeArchive(_ body: String, at path: String, absolute: String) throws {
        let script = path + ".py"
        try Self.prelude.write(toFile: script, atomically: true, encoding: .utf8)
        let escaped = body.replacingOccurrences(of: "'", with: "'\\''")
        let result = try shell("python3 \(script) \(path) \(absolute) '\(escaped)' 2>&1", capture: true)
        XCTAssertEqual(result.status, 0, "python: \(result.output)")
        try FileManager.default.removeItem(atPath: script)
    }

    private func expectRefused(_ cases: [(String, String)], file: StaticString = #filePath, line: UInt = #line) throws {
        let dir = try makeTemporaryDirectory(self)
        try FileManager.default.createDirectory(atPath: dir + "/archives", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/top/work", withIntermediateDirectories: true)
        try "outside".write(toFile: dir + "/top/outside", atomically: true, encoding: .utf8)
        for (index, (name, body)) in cases.enumerated() {
            let archive = dir + "/archives/\(index).tar"
            try makeArchive(body, at: archive, absolute: dir + "/top")
            let before = treeSnapshot(dir, includeRoot: false, directoryMtimes: false)
            let result = try SluiceBinary.run(["-q", "read \(archive) | untar \(dir)/top/work/out"])
            XCTAssertEqual(result.status, 5, "\(name): exit \(result.status): \(result.stderr)", file: file, line: line)
            XCTAssertTrue(result.stderr.contains("corrupt tar data"), "\(name): \(result.stderr)", file: file, line: line)
            let after = treeSnapshot(dir, includeRoot: false, directoryMtimes: false)
            XCTAssertEqual(treeDifferences(before, after), [], "\(name): something changed outside DIR", file: file, line: line)
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/top/work/out"), "\(name): DIR left", file: file, line: line)
        }
    }

    func testEachHostileArchiveIsRefusedAndLeavesNothing() throws {
        try expectRefused(Self.hostile)
    }

    func testCorruptArchivesAreRefusedAndLeaveNothing() throws {
        try expectRefused(Self.corrupt)
    }

    /// Refusals name the member and the rule, escaped for a terminal.
    func testRefusalMessagesNameTheMember() throws {
        let dir = try makeTemporaryDirectory(self)
        let cases: [(String, String, String)] = [
            ("reg('../escape')", "'../escape'", "leaves the destination"),
            ("reg('evil\\nname')", "'evil\\nname'", "control character"),
            ("sym('up', '..')", "'up'", "symlink whose target leaves the destination"),
            ("d('d'); sym('s', 'd'); reg('s/f')", "'s/f'", "written through 's'"),
            ("sparse_gnu('holes')", "'holes'", "sparse"),
            ("hard('h', 'later')", "'h'", "has not been extracted"),
            ("hard('h', 'h')", "'h'", "has not been extracted"),
            ("d('x'); hard('x/h', './x/h')", "'x/h'", "has not been extracted"),
        ]
        for (index, (body, member, rule)) in cases.enumerated() {
            try makeArchive(body, at: dir + "/\(index).tar", absolute: dir)
            let result = try SluiceBinary.run(["-q", "read \(dir)/\(index).tar | untar \(dir)/out"])
            XCTAssertEqual(result.status, 5)
            XCTAssertTrue(result.stderr.contains(member) && result.stderr.contains(rule), "\(body): \(result.stderr)")
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, result.stderr)
        }
    }

    /// What looks odd but is safe extracts: a symlink replaced by a directory (the new
    /// directory is real, the old target untouched), a link to `.`, links that stay inside,
    /// FIFOs and devices skipped with a notice, setuid/sticky/group-write bits dropped.
    func testSafeOddArchivesExtract() throws {
        let dir = try makeTemporaryDirectory(self)
        let body = """
            d('d'); reg('d/keep', data=b'keep'); sym('s', 'd'); d('s'); reg('s/f', data=b'in s')
            sym('here', '.'); d('x'); d('x/y'); sym('x/y/up', '../../d/keep')
            i = info('fifo', tarfile.FIFOTYPE); t.addfile(i)
            i = info('dev', tarfile.CHRTYPE); i.devmajor = 1; i.devminor = 3; t.addfile(i)
            i = info('suid', tarfile.REGTYPE); i.mode = 0o7777; i.size = 1; t.addfile(i, io.BytesIO(b'x'))
            d('./'); reg('dup', data=b'one'); hard('h', 'dup'); hard('h', 'h'); reg('dup', data=b'two, longer')
            """
        try makeArchive(body, at: dir + "/a.tar", absolute: dir)
        let result = try SluiceBinary.run(["read \(dir)/a.tar | untar \(dir)/out"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let tree = treeSnapshot(dir + "/out")
        XCTAssertEqual(tree["s"]?.type, "d")
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/s/f", encoding: .utf8), "in s")
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/d/keep", encoding: .utf8), "keep")
        XCTAssertNil(tree["d/f"])
        XCTAssertEqual(tree["here"]?.linkTarget, ".")
        XCTAssertEqual(tree["x/y/up"]?.linkTarget, "../../d/keep")
        XCTAssertNil(tree["fifo"])
        XCTAssertNil(tree["dev"])
        XCTAssertTrue(result.stderr.contains("'fifo'") && result.stderr.contains("'dev'"), result.stderr)
        XCTAssertEqual(tree["suid"]?.permissions, 0o755 & ~currentUmask())
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/dup", encoding: .utf8), "two, longer")
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/h", encoding: .utf8), "one")
    }

    /// A later member replaces an empty directory of the same name inside another directory
    /// (GNU tar does the same): the removal must not close the parent the new member is made in.
    /// A hard link to a symlink is fine where the symlink's target stays inside from its new name.
    func testEmptyNestedDirectoryIsReplacedByAFileSymlinkOrHardLink() throws {
        let dir = try makeTemporaryDirectory(self)
        let body = """
            d('a'); d('a/b'); reg('a/x', data=b'x'); reg('a/b', data=b'now a file')
            d('c'); d('c/b'); reg('c/x'); sym('c/b', 'x')
            d('e'); d('e/b'); reg('e/x', data=b'linked'); hard('e/b', 'e/x')
            d('f'); d('f/g'); sym('f/g/in', '../x'); hard('f/h', 'f/g/in')
            """
        try makeArchive(body, at: dir + "/a.tar", absolute: dir)
        let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/out"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/a/b", encoding: .utf8), "now a file")
        let tree = treeSnapshot(dir + "/out")
        XCTAssertEqual(tree["c/b"]?.linkTarget, "x")
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/e/b", encoding: .utf8), "linked")
        XCTAssertEqual(tree["f/h"]?.linkTarget, "../x")
    }

    /// A regular-typed member whose name ends in `/` is a directory (GNU tar and bsdtar read
    /// it so; Python's tarfile writes them), typeflag `0` and `7` as well as v7's NUL; any
    /// data it claims is skipped by its size.
    func testTrailingSlashRegularMembersAreDirectories() throws {
        let dir = try makeTemporaryDirectory(self)
        let body = """
            reg('slash/', data=b''); reg('slash/f', data=b'in')
            i = info('contiguous/', b'7'); t.addfile(i)
            reg('withdata/', data=b'q' * 600); reg('after', data=b'abc')
            """
        try makeArchive(body, at: dir + "/a.tar", absolute: dir)
        let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/out"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let tree = treeSnapshot(dir + "/out")
        for name in ["slash", "contiguous", "withdata"] { XCTAssertEqual(tree[name]?.type, "d", name) }
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/slash/f", encoding: .utf8), "in")
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/after", encoding: .utf8), "abc")
    }

    /// An unknown member type is a regular file (POSIX; GNU tar agrees): its data is not
    /// dropped, and a notice says so. A volume label holds no file and stays skipped.
    func testUnknownMemberTypesAreExtractedAsRegularFiles() throws {
        let dir = try makeTemporaryDirectory(self)
        let body = """
            i = info('vendor', b'Z'); i.size = 5; t.addfile(i, io.BytesIO(b'hello'))
            i = info('label', b'V'); t.addfile(i)
            """
        try makeArchive(body, at: dir + "/a.tar", absolute: dir)
        let result = try SluiceBinary.run(["read \(dir)/a.tar | untar \(dir)/out"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/vendor", encoding: .utf8), "hello")
        XCTAssertTrue(result.stderr.contains("'vendor' has an unknown member type"), result.stderr)
        XCTAssertNil(treeSnapshot(dir + "/out")["label"])
    }

    /// DIR existing and not empty (or not a directory): exit 2, nothing touched.
    func testExistingDestinationIsRefusedBeforeAnythingIsTouched() throws {
        let dir = try makeTemporaryDirectory(self)
        try makeArchive("reg('a')", at: dir + "/a.tar", absolute: dir)
        try FileManager.default.createDirectory(atPath: dir + "/full", withIntermediateDirectories: true)
        try "mine".write(toFile: dir + "/full/precious", atomically: true, encoding: .utf8)
        try "file".write(toFile: dir + "/plain", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: dir + "/link", withDestinationPath: dir + "/empty")
        try FileManager.default.createDirectory(atPath: dir + "/empty", withIntermediateDirectories: true)
        // A partial name that is not a directory of ours: a link, a file.
        try FileManager.default.createSymbolicLink(atPath: dir + "/p1.sluice-part", withDestinationPath: dir + "/empty")
        try "x".write(toFile: dir + "/p2.sluice-part", atomically: true, encoding: .utf8)
        for target in ["full", "plain", "link", "p1", "p2"] {
            let before = treeSnapshot(dir)
            let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/\(target)"])
            XCTAssertEqual(result.status, 2, "\(target): \(result.stderr)")
            XCTAssertEqual(treeDifferences(before, treeSnapshot(dir)), [], target)
        }
        // DIR must name a directory to create: not `.`, `..` or `/`; trailing slashes are dropped.
        for bad in [".", "..", "/", "sub/.."] {
            let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(bad)"], in: dir)
            XCTAssertEqual(result.status, 2, "\(bad): \(result.stderr)")
        }
        let slash = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/fresh//"])
        XCTAssertEqual(slash.status, 0, slash.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/fresh/a", encoding: .utf8), "data")
        // An empty directory is fine: it is replaced by the extracted tree.
        let result = try SluiceBinary.run(["-q", "read \(dir)/a.tar | untar \(dir)/empty"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/empty/a", encoding: .utf8), "data")
    }

    /// A stale DIR.sluice-part (no checkpoint) is removed before a fresh run, but never across
    /// a mount point: what is mounted inside stays, and the run says why it cannot go on.
    /// The mount lives in a private mount namespace (`unshare -m`), so it cannot outlive the test.
    func testStalePartialTreeIsRemovedWithoutCrossingAMountPoint() throws {
        let dir = try makeTemporaryDirectory(self)
        try makeArchive("reg('a')", at: dir + "/a.tar", absolute: dir)
        let part = dir + "/out.sluice-part"
        let script = """
            set -e; mkdir -p \(part)/mnt \(part)/old; echo stale > \(part)/old/f
            mount -t tmpfs tmpfs \(part)/mnt; echo keep > \(part)/mnt/keep; chmod 755 \(part)/mnt
            set +e; '\(SluiceBinary.path)' -q 'read \(dir)/a.tar | untar \(dir)/out' 2> \(dir)/stderr; echo "exit=$?"
            cat \(part)/mnt/keep; stat -c %a \(part)/mnt; ls \(part); test ! -e \(dir)/out && echo "no DIR"
            """
        let result = try shell("unshare -m bash -c \(shellQuote(script))", capture: true)
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertEqual(result.output, "exit=2\nkeep\n755\nmnt\nno DIR\n")
        let stderr = try String(contentsOfFile: dir + "/stderr", encoding: .utf8)
        XCTAssertTrue(stderr.contains("could not be removed"), stderr)
    }
}

func currentUmask() -> UInt32 {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix("Umask:") {
        return UInt32(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8) ?? 0o022
    }
    return 0o022
}
