import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The ground the untar trust tests share: an archive GNU tar made of generated files, GNU
/// tar's own tree of it (`ref`), and `read TAR | untar OUT` stopped in-process inside the
/// archive's one big member, so a test can change the partial tree or the checkpoint and
/// then run the real binary over them.
struct UntarTrustFixture {
    /// A generated file: its path under the source directory, size and seed.
    struct File {
        var path: String
        var size: Int
        var seed: UInt64
    }

    /// The size of the member the run stops inside.
    static let bigSize = 3 << 20

    let dir: String
    var tar: String { dir + "/a.tar" }
    var out: String { dir + "/out" }
    var ref: String { dir + "/ref" }
    var part: String { out + ".sluice-part" }
    var checkpointPath: String { out + ".sluice" }
    var spec: String { "read \(tar) | untar \(out)" }

    /// Writes `files` under DIR/src, runs `prepare` there (links, mtimes), archives
    /// `members` in that order with `tarOptions`, and extracts GNU tar's reference tree.
    init(_ testCase: XCTestCase, files: [File], prepare: String = "", tarOptions: String = "", members: String) throws {
        dir = try makeMemoryTemporaryDirectory(testCase)
        setenv("SLUICE_STATE_DIR", dir + "/state", 1)
        testCase.addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
        let src = dir + "/src"
        for file in files {
            let url = URL(fileURLWithPath: src + "/" + file.path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(makeTestData(count: file.size, seed: file.seed)).write(to: url)
        }
        let steps = [prepare, "tar \(tarOptions) -cf \(tar) \(members)", "mkdir \(ref)", "tar -xf \(tar) -C \(ref)"]
        let made = try shell("cd \(src) && " + steps.filter { !$0.isEmpty }.joined(separator: " && "))
        XCTAssertEqual(made.status, 0, made.output)
    }

    /// Removes what an earlier run left and stops a new one at its first progress event,
    /// which falls inside the big member's data: the checkpoint and its untar state.
    @discardableResult
    func interruptedRun(file: StaticString = #filePath, line: UInt = #line) throws -> (Checkpoint, UntarState) {
        for path in [out, checkpointPath, part] { TreeRemover.remove(path) }
        let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: checkpointPath, file: file, line: line)
        let state = try XCTUnwrap(
            checkpoint.stages.lazy.compactMap { $0.as(UntarState.self) }.first, file: file, line: line)
        let current = try XCTUnwrap(state.current, "the run stopped outside big's data", file: file, line: line)
        XCTAssertEqual(current.size, UInt64(Self.bigSize), file: file, line: line)
        XCTAssertGreaterThan(current.written, 0, file: file, line: line)
        return (checkpoint, state)
    }

    /// OUT is exactly GNU tar's tree of the archive.
    func assertTreeIsTheArchives(_ what: String = "", file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(treeDifferences(treeSnapshot(ref), treeSnapshot(out)), [], what, file: file, line: line)
    }
}
