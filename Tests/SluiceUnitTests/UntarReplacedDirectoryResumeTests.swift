import Foundation
import XCTest

@testable import Sluice
@testable import SluiceTestSupport

/// A name that is a directory, then a file, then a directory with a file in it (GNU tar and a
/// fresh run extract it): a run killed after `d/f`, with its checkpoint before the file `d`,
/// leaves `d/f` — a member past the cut — where the resumed run must replace `d` again.
final class UntarReplacedDirectoryResumeTests: XCTestCase {
    private func feed(_ sink: UntarSink, _ bytes: ArraySlice<UInt8>) throws {
        try bytes.withUnsafeBytes { try sink.write($0) }
    }

    /// It failed with exit 2 "'d/f' is not something the archive made", on every rerun: a good
    /// archive and an untouched tree that only `--restart` could finish.
    func testADirectoryReplacedAfterTheCutIsReplacedAgainOnResume() throws {
        let dir = try makeMemoryTemporaryDirectory(self)
        let tar = dir + "/a.tar"
        XCTAssertEqual(
            try shell(
                """
                cd \(dir) && mkdir d && tar -cf \(tar) d && rmdir d && echo file > d && tar -rf \(tar) d \
                && rm d && mkdir d && echo inside > d/f && tar -rf \(tar) d d/f && mkdir ref && tar -xf \(tar) -C ref
                """
            ).status, 0)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: tar)))
        let out = dir + "/out"
        let first = try UntarSink(directory: out)
        try feed(first, bytes[..<512])  // the cut: after the first `d/`
        let state = try JSONDecoder().decode(StageState.self, from: try JSONEncoder().encode(StageState(first.snapshot())))
        try feed(first, bytes[512...])  // the killed run went on to the end
        let second = try UntarSink(directory: out, restoring: try XCTUnwrap(state.as(UntarState.self)))
        try feed(second, bytes[512...])
        try second.finish()
        XCTAssertEqual(treeDifferences(treeSnapshot(dir + "/ref"), treeSnapshot(out)), [])
    }

    /// `d/pad`, a hard link `h` to it, then (`replaced`) a later `d/pad`: the archive, its bytes
    /// and a sink restored from a cut after the old `d/pad`, the killed run having gone on to the end.
    private func resumeAtTheLink(replaced: Bool) throws -> (sink: UntarSink, rest: ArraySlice<UInt8>, dir: String) {
        let dir = try makeMemoryTemporaryDirectory(self)
        let tar = dir + "/a.tar"
        let append = replaced ? " && rm d/pad && echo replaced > d/pad && tar -rf \(tar) d/pad" : ""
        XCTAssertEqual(
            try shell(
                "cd \(dir) && mkdir d && echo old > d/pad && ln d/pad h && tar -cf \(tar) --no-recursion d d/pad h\(append)"
                    + " && mkdir ref && tar -xf \(tar) -C ref"
            ).status, 0)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: tar)))
        let cut = 3 * 512  // after `d/` and the old `d/pad` with its one block of data
        let first = try UntarSink(directory: dir + "/out")
        try feed(first, bytes[..<cut])
        let state = try JSONDecoder().decode(StageState.self, from: try JSONEncoder().encode(StageState(first.snapshot())))
        try feed(first, bytes[cut...])
        return (try UntarSink(directory: dir + "/out", restoring: try XCTUnwrap(state.as(UntarState.self))), bytes[cut...], dir)
    }

    /// The resumed run linked `h` to the new `d/pad` (the old content is gone) and was refused
    /// only at the end, "'h' changed since the checkpoint", as if someone had edited the tree.
    func testALinkTargetReplacedAfterTheCutIsRefusedWhenLinked() throws {
        let (sink, rest, _) = try resumeAtTheLink(replaced: true)
        XCTAssertThrowsError(try feed(sink, rest)) { error in
            guard case SluiceError.unsafePath(_, let reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("'d/pad', which the hard link 'h' names"), reason)
        }
    }

    /// The same cut with the link target as recorded resumes and links as usual.
    func testALinkTargetAsRecordedResumes() throws {
        let (sink, rest, dir) = try resumeAtTheLink(replaced: false)
        try feed(sink, rest)
        try sink.finish()
        XCTAssertEqual(treeDifferences(treeSnapshot(dir + "/ref"), treeSnapshot(dir + "/out")), [])
    }
}
