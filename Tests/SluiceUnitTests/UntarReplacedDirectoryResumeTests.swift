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
}
