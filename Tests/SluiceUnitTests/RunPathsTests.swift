import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Sluice
@testable import SluiceTestSupport

/// `RunPaths`: what may stand at each name, and which names may not be one file — by
/// table over a fake file system, and `canonicalName` on a real one.
final class RunPathsTests: XCTestCase {
    private static func facts(_ kind: FileKind, inode: UInt64) -> FileFacts {
        FileFacts(kind: kind, identity: FileIdentity(device: 1, inode: inode))
    }

    /// A fake file system: `names` maps a path to what `lstat` sees; `targets` to what a
    /// link there leads to.
    private static func probe(_ names: [String: FileFacts], targets: [String: FileFacts] = [:]) -> RunPaths.Probe {
        RunPaths.Probe(lstat: { names[$0] },
                       stat: { path in names[path]?.kind == .symlink ? targets[path] : names[path] },
                       canonical: { $0.hasPrefix("./") ? String($0.dropFirst(2)) : $0 })
    }

    func testWhatMayStandAtEachName() {
        let regular = Self.facts(.regular, inode: 50)
        let rows: [(name: String, facts: FileFacts, target: FileFacts?, refused: Bool, line: UInt)] = [
            ("out", regular, nil, false, #line),
            ("out", Self.facts(.fifo, inode: 1), nil, true, #line),
            ("out", Self.facts(.characterDevice, inode: 1), nil, true, #line),
            ("out", Self.facts(.socket, inode: 1), nil, true, #line),
            ("out", Self.facts(.directory, inode: 1), nil, true, #line),
            // A link at the output is replaced by the final rename, unless it leads to a non-file.
            ("out", Self.facts(.symlink, inode: 1), regular, false, #line),
            ("out", Self.facts(.symlink, inode: 1), nil, false, #line),
            ("out", Self.facts(.symlink, inode: 1), Self.facts(.fifo, inode: 2), true, #line),
            ("out", Self.facts(.symlink, inode: 1), Self.facts(.directory, inode: 2), true, #line),
            // Names sluice writes: a regular file or nothing.
            ("out.sluice-part", regular, nil, false, #line),
            ("out.sluice-part", Self.facts(.symlink, inode: 1), regular, true, #line),
            ("out.sluice-part", Self.facts(.symlink, inode: 1), nil, true, #line),
            ("out.sluice.lock", Self.facts(.symlink, inode: 1), nil, true, #line),
            ("out.sluice.lock", Self.facts(.fifo, inode: 1), nil, true, #line),
            ("c", Self.facts(.fifo, inode: 1), nil, true, #line),
            ("c", Self.facts(.symlink, inode: 1), regular, true, #line),
            ("c.tmp", Self.facts(.symlink, inode: 1), nil, true, #line),
            ("c.lock", Self.facts(.blockDevice, inode: 1), nil, true, #line),
            // The input is the source's business.
            ("in", Self.facts(.fifo, inode: 1), nil, false, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: "out", checkpoint: "c", input: "in", stdout: nil)
            let probe = Self.probe([row.name: row.facts], targets: row.target.map { [row.name: $0] } ?? [:])
            let problem = paths.problem(probe: probe)
            XCTAssertEqual(problem != nil, row.refused, "\(row.name) as \(row.facts.kind): \(problem.map { "\($0)" } ?? "accepted")", line: row.line)
            if let problem { XCTAssertEqual(problem.exitCode, 2, line: row.line) }
        }
    }

    func testNoTwoRolesMayBeOneFile() {
        let rows: [(output: String?, checkpoint: String?, input: String?, files: [String: FileFacts], refused: Bool, line: UInt)] = [
            ("out", "out.sluice", "in", [:], false, #line),          // the default: shares the lock only
            ("out", "elsewhere/c", "in", [:], false, #line),
            ("out", "out", "in", [:], true, #line),
            ("out", "./out", "in", [:], true, #line),
            ("out", "out.sluice-part", "in", [:], true, #line),
            ("out", "out.sluice.lock", "in", [:], true, #line),
            ("c.tmp", "c", "in", [:], true, #line),                  // the checkpoint's temporary file is the output
            ("c.lock", "c", "in", [:], true, #line),
            ("out", "in", "in", [:], true, #line),                   // the checkpoint would overwrite the input
            ("out", "c", "out.sluice-part", [:], true, #line),       // reading the file the run truncates
            ("out", "c", "out", [:], false, #line),                  // reading the file the output replaces
            // Different names, one file (a hard link): device and inode decide.
            ("out", "hard", "in", ["out": Self.facts(.regular, inode: 7), "hard": Self.facts(.regular, inode: 7)], true, #line),
            ("out", "c", "in", ["in": Self.facts(.regular, inode: 7), "c": Self.facts(.regular, inode: 7)], true, #line),
            ("out", "c", "in", ["out": Self.facts(.regular, inode: 7), "c": Self.facts(.regular, inode: 8)], false, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: row.output, checkpoint: row.checkpoint, input: row.input, stdout: nil)
            let problem = paths.problem(probe: Self.probe(row.files))
            XCTAssertEqual(problem != nil, row.refused, "\(row): \(problem.map { "\($0)" } ?? "accepted")", line: row.line)
        }
    }

    func testStdoutMayNotBeTheCheckpointOrTheInput() {
        let stdout = Self.facts(.regular, inode: 9)
        let rows: [(files: [String: FileFacts], refused: Bool, line: UInt)] = [
            ([:], false, #line),
            (["c": Self.facts(.regular, inode: 9)], true, #line),
            (["in": Self.facts(.regular, inode: 9)], true, #line),
            (["c": Self.facts(.regular, inode: 3)], false, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: nil, checkpoint: "c", input: "in", stdout: stdout)
            XCTAssertEqual(paths.problem(probe: Self.probe(row.files)) != nil, row.refused, line: row.line)
        }
    }

    func testCanonicalNamesResolveDotsAndLinkedDirectories() throws {
        let dir = try makeTemporaryDirectory(self)
        let resolved = try XCTUnwrap(realpath(dir, nil))
        let real = String(cString: resolved)
        free(resolved)
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: false)
        try HostileFile.symlink(at: dir + "/link", to: "sub")
        let expected = real + "/sub/x"
        for name in ["\(dir)/sub/x", "\(dir)/sub/./x", "\(dir)/link/x", "\(dir)/sub/../sub/x", "\(dir)//sub/x"] {
            XCTAssertEqual(RunPaths.canonicalName(name), expected, name)
        }
        XCTAssertEqual(RunPaths.canonicalName("/x"), "/x")
        XCTAssertEqual(RunPaths.canonicalName("\(dir)/missing/x"), "\(dir)/missing/x", "an unresolvable directory is compared as written")
    }
}
