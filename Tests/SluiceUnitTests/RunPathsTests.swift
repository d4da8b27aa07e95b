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
        RunPaths.Probe(
            lstat: { names[$0] },
            stat: { path in names[path]?.kind == .symlink ? targets[path] : names[path] },
            canonical: { $0.hasPrefix("./") ? String($0.dropFirst(2)) : $0 })
    }

    private static func target(_ path: String?) -> OutputTarget? { path.map { FileSink.output(path: $0) } }

    func testWhatMayStandAtAFileOutput() {
        let rows: [(facts: FileFacts, target: FileFacts?, refused: Bool, line: UInt)] = [
            (Self.facts(.regular, inode: 50), nil, false, #line),
            (Self.facts(.fifo, inode: 1), nil, true, #line),
            (Self.facts(.characterDevice, inode: 1), nil, true, #line),
            (Self.facts(.blockDevice, inode: 1), nil, true, #line),
            (Self.facts(.socket, inode: 1), nil, true, #line),
            (Self.facts(.directory, inode: 1), nil, true, #line),
            // A link at the output is replaced by the final rename, unless it leads to a non-file.
            (Self.facts(.symlink, inode: 1), Self.facts(.regular, inode: 50), false, #line),
            (Self.facts(.symlink, inode: 1), nil, false, #line),
            (Self.facts(.symlink, inode: 1), Self.facts(.fifo, inode: 2), true, #line),
            (Self.facts(.symlink, inode: 1), Self.facts(.directory, inode: 2), true, #line),
        ]
        for row in rows {
            let probe = Self.probe(["out": row.facts], targets: row.target.map { ["out": $0] } ?? [:])
            let problem = RunPaths.fileOutputProblem("out", probe: probe)
            XCTAssertEqual(problem != nil, row.refused, "\(row.facts.kind): \(problem.map { "\($0)" } ?? "accepted")", line: row.line)
            if let problem { XCTAssertEqual(problem.exitCode, 2, line: row.line) }
        }
    }

    /// Names sluice writes (the partial file, the checkpoint, its temporary file, the locks):
    /// a regular file or nothing, never a link even to a regular file.
    func testWhatMayStandAtANameSluiceWrites() {
        let regular = Self.facts(.regular, inode: 50)
        let hostile: [FileFacts] = [
            Self.facts(.symlink, inode: 1), Self.facts(.fifo, inode: 1), Self.facts(.directory, inode: 1),
            Self.facts(.characterDevice, inode: 1), Self.facts(.socket, inode: 1),
        ]
        for name in ["out.sluice.lock", "c", "c.tmp", "c.lock"] {
            let paths = RunPaths(output: Self.target("out"), checkpoint: "c", input: "in", stdout: nil)
            XCTAssertNil(paths.problem(probe: Self.probe([name: regular])), name)
            XCTAssertNil(paths.problem(probe: Self.probe([:])), name)
            for facts in hostile {
                let problem = paths.problem(probe: Self.probe([name: facts], targets: [name: regular]))
                XCTAssertEqual(problem?.exitCode, 2, "\(name) as \(facts.kind) was accepted")
            }
        }
        for facts in hostile {
            XCTAssertNotNil(
                RunPaths.writtenFileProblem("out.sluice-part", probe: Self.probe(["out.sluice-part": facts], targets: ["out.sluice-part": regular])))
        }
        XCTAssertNil(RunPaths.writtenFileProblem("out.sluice-part", probe: Self.probe(["out.sluice-part": regular])))
        // The input is the source's business.
        let paths = RunPaths(output: Self.target("out"), checkpoint: "c", input: "in", stdout: nil)
        XCTAssertNil(paths.problem(probe: Self.probe(["in": Self.facts(.fifo, inode: 1)])))
    }

    /// The suffixes sluice adds can make a name too long for the file system: refused by name
    /// before anything is touched, not an I/O error from the first file created.
    func testNamesTooLongWithTheirSuffixAreRefusedUpFront() {
        let rows: [(output: String, checkpoint: String?, refused: String?, line: UInt)] = [
            ("dir/" + String(repeating: "a", count: 243), nil, nil, #line),  // + ".sluice-part" = 255
            ("dir/" + String(repeating: "a", count: 244), nil, "the partial output", #line),
            (String(repeating: "a", count: 256), nil, "the output", #line),
            ("out", String(repeating: "c", count: 250), nil, #line),  // + ".lock" = 255
            ("out", "d/" + String(repeating: "c", count: 251), "a lock file", #line),
        ]
        for row in rows {
            let message = usageRefusal(output: row.output, checkpoint: row.checkpoint, line: row.line)
            guard let expected = row.refused else {
                XCTAssertNil(message, line: row.line)
                continue
            }
            XCTAssertTrue(message?.contains("the name of \(expected) would be") == true, message ?? "not refused", line: row.line)
            XCTAssertTrue(message?.contains("255 bytes") == true, message ?? "not refused", line: row.line)
        }
    }

    /// `file out/` and `--checkpoint c/` name directories: refused as such up front (found by
    /// the second external audit: exit 6, "cannot create lock file out/.sluice.lock").
    func testNamesEndingInASlashAreRefusedUpFront() {
        let rows: [(output: String, checkpoint: String?, refused: String?, line: UInt)] = [
            ("out/", nil, "the output 'out/'", #line),
            ("out", "c/", "the checkpoint 'c/'", #line),
            ("dir/out", "dir/c", nil, #line),
        ]
        for row in rows {
            let message = usageRefusal(output: row.output, checkpoint: row.checkpoint, line: row.line)
            XCTAssertEqual(message.map { $0.hasPrefix("\(row.refused ?? "") ends in '/'") }, row.refused.map { _ in true }, message ?? "", line: row.line)
        }
    }

    /// The usage refusal's message for these names on an empty file system; nil when nothing
    /// is refused (any other refusal fails the test).
    private func usageRefusal(output: String, checkpoint: String?, line: UInt) -> String? {
        let paths = RunPaths(output: Self.target(output), checkpoint: checkpoint, input: nil, stdout: nil)
        let problem = paths.problem(probe: Self.probe([:]))
        if case .usage(let message)? = problem { return message }
        if let problem { XCTFail("\(problem)", line: line) }
        return nil
    }

    /// `--checkpoint o.sluice.tmp` would be taken for the leftover of a job writing `o` and
    /// removed by it (and `o.sluice-part`, `o.sluice.lock` replaced): refused. `o.sluice` is
    /// that job's own checkpoint name, which a user may spell out.
    func testACheckpointNamedLikeAnotherJobsOwnFilesIsRefused() {
        let rows: [(checkpoint: String, refused: String?, line: UInt)] = [
            ("o.sluice.tmp", "the checkpoint's temporary file of a sluice job writing 'o'; sluice never writes a checkpoint over", #line),
            ("o.sluice-part", "the partial output of a sluice job writing 'o'; sluice never writes a checkpoint over", #line),
            ("d/o.sluice.lock", "the lock file of a sluice job writing 'd/o'; sluice never writes a checkpoint over", #line),
            ("out.sluice", nil, #line),
            ("o.sluice", nil, #line),
            ("c.tmp", nil, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: Self.target("out"), checkpoint: row.checkpoint, input: nil, stdout: nil)
            assertRefusal(of: paths, probe: Self.probe([:]), at: row.checkpoint, mentioning: row.refused, line: row.line)
        }
    }

    /// `file o.sluice-part` (or `o.sluice`, `o.sluice.lock`, `o.sluice.tmp`) would replace the
    /// files of a job writing `o`: refused always, naming the running job when its lock is held.
    func testAnOutputNamedLikeAnotherJobsOwnFilesIsRefused() {
        let rows: [(output: String, held: Bool, refused: String?, line: UInt)] = [
            ("o.sluice-part", true, "the partial output of a sluice job writing 'o': a running sluice job (pid 42) holds o.sluice.lock", #line),
            ("d/o.sluice", true, "the checkpoint of a sluice job writing 'd/o': a running sluice job (pid 42) holds d/o.sluice.lock", #line),
            ("o.sluice.lock", false, "the lock file of a sluice job writing 'o';", #line),
            ("o.sluice.tmp", false, "the checkpoint's temporary file of a sluice job writing 'o';", #line),
            ("tree.sluice-part", false, "the partial output of a sluice job writing 'tree';", #line),
            ("o.sluicex", true, nil, #line),
            ("o.sluice.txt", true, nil, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: Self.target(row.output), checkpoint: nil, input: nil, stdout: nil)
            var probe = Self.probe([:])
            probe.lockHolder = { [held = row.held] _ in held ? LockHolder(pid: 42) : nil }
            assertRefusal(of: paths, probe: probe, at: row.output, mentioning: row.refused, line: row.line)
        }
    }

    /// Inside an untar's partial tree (`d.sluice-part/`) everything is that job's: its final
    /// rename would take an output or checkpoint put there into `d`, a start from zero
    /// removes it with the tree. Refused as output and as checkpoint, however deep.
    func testANameInsideAnotherJobsPartialTreeIsRefused() {
        let rows: [(output: String, checkpoint: String?, refused: String?, line: UInt)] = [
            ("d.sluice-part/x", nil, "inside d.sluice-part, the partial tree of a sluice job writing 'd': a running", #line),
            ("top/d.sluice-part/sub/x", nil, "inside top/d.sluice-part, the partial tree of a sluice job writing 'top/d'", #line),
            ("out", "d.sluice-part/c", "inside d.sluice-part, the partial tree of a sluice job writing 'd'", #line),
            ("./d.sluice-part/x", nil, "inside d.sluice-part,", #line),
            ("x.sluice-partial/x", nil, nil, #line),
            ("out", ".sluice-part/c", nil, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: Self.target(row.output), checkpoint: row.checkpoint, input: nil, stdout: nil)
            var probe = Self.probe([:])
            probe.lockHolder = { $0 == "d.sluice.lock" ? LockHolder(pid: 42) : nil }
            assertRefusal(of: paths, probe: probe, at: row.checkpoint ?? row.output, mentioning: row.refused, line: row.line)
        }
    }

    /// `paths` refused before the run (exit 2) at `path` for a reason that mentions
    /// `refused`; with `refused` nil, not refused at all.
    private func assertRefusal(of paths: RunPaths, probe: RunPaths.Probe, at path: String, mentioning refused: String?, line: UInt) {
        let problem = paths.problem(probe: probe)
        guard let refused else { return XCTAssertNil(problem, path, line: line) }
        guard case .unsafePath(let refusedPath, let reason)? = problem else {
            return XCTFail("\(path): \(String(describing: problem))", line: line)
        }
        XCTAssertEqual(refusedPath, path, line: line)
        XCTAssertTrue(reason.contains(refused), reason, line: line)
        XCTAssertEqual(problem?.exitCode, 2, line: line)
    }

    func testNoTwoRolesMayBeOneFile() {
        let rows: [(output: String?, checkpoint: String?, input: String?, files: [String: FileFacts], refused: Bool, line: UInt)] = [
            ("out", "out.sluice", "in", [:], false, #line),  // the default: shares the lock only
            ("out", "elsewhere/c", "in", [:], false, #line),
            ("out", "out", "in", [:], true, #line),
            ("out", "./out", "in", [:], true, #line),
            ("out", "out.sluice-part", "in", [:], true, #line),
            ("out", "out.sluice.lock", "in", [:], true, #line),
            ("c.tmp", "c", "in", [:], true, #line),  // the checkpoint's temporary file is the output
            ("c.lock", "c", "in", [:], true, #line),
            ("out", "in", "in", [:], true, #line),  // the checkpoint would overwrite the input
            ("out", "c", "out.sluice-part", [:], true, #line),  // reading the file the run truncates
            ("out", "c", "out", [:], false, #line),  // reading the file the output replaces
            // Different names, one file (a hard link): device and inode decide.
            ("out", "hard", "in", ["out": Self.facts(.regular, inode: 7), "hard": Self.facts(.regular, inode: 7)], true, #line),
            ("out", "c", "in", ["in": Self.facts(.regular, inode: 7), "c": Self.facts(.regular, inode: 7)], true, #line),
            ("out", "c", "in", ["out": Self.facts(.regular, inode: 7), "c": Self.facts(.regular, inode: 8)], false, #line),
        ]
        for row in rows {
            let paths = RunPaths(output: Self.target(row.output), checkpoint: row.checkpoint, input: row.input, stdout: nil)
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
