import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The second external audit's untar cases: the partial tree changed between an interrupted
/// run and its resume. Each must end in the archive's exact tree or a refusal that blames the
/// partial tree — never exit 0 with another tree, never "corrupt data" for a good archive.
/// A tar of a symlink, a 3 MiB file and a directory, a run of `read | untar` stopped
/// in-process inside the big file's data, and the archive's tree extracted by GNU tar.
struct TamperFixture {
    let dir: String
    var tar: String { dir + "/a.tar" }
    var out: String { dir + "/out" }
    var ref: String { dir + "/ref" }
    var spec: String { "read \(tar) | untar \(out)" }
    var partial: String { out + ".sluice-part" }

    init(_ test: XCTestCase) throws {
        dir = try makeMemoryTemporaryDirectory(test)
        setenv("SLUICE_STATE_DIR", dir + "/state", 1)
        test.addTeardownBlock { unsetenv("SLUICE_STATE_DIR") }
        try FileManager.default.createDirectory(atPath: dir + "/src/sub", withIntermediateDirectories: true)
        // A symlink first, then the big file the run is stopped in, then a directory.
        XCTAssertEqual(try shell("ln -s big \(dir)/src/alink && touch -h -d @1600000000 \(dir)/src/alink").status, 0)
        try Data(makeTestData(count: 3 << 20, seed: 41)).write(to: URL(fileURLWithPath: dir + "/src/big"))
        try Data(makeTestData(count: 5000, seed: 42)).write(to: URL(fileURLWithPath: dir + "/src/sub/small"))
        XCTAssertEqual(
            try shell("tar -cf \(tar) -C \(dir)/src alink big sub && mkdir \(ref) && tar -xf \(tar) -C \(ref)").status, 0)
    }

    /// Stops the run in-process inside `big`'s data (the file being written at the cut).
    func interruptedInsideBig() throws {
        let checkpoint = try runCancelledAtFirstProgress(spec, checkpoint: out + ".sluice")
        let state = try XCTUnwrap(checkpoint.stages.lazy.compactMap { $0.as(UntarState.self) }.first)
        XCTAssertEqual(try XCTUnwrap(state.current, "the run stopped outside big's data").path.bytes, Array("big".utf8))
    }

    /// Exit 0 only with the archive's tree; otherwise exit 2 (the partial tree is blamed) and no DIR.
    func assertExactTreeOrRefused(_ result: SluiceBinary.Result, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(result.signalled, result.stderr, file: file, line: line)
        if result.status == 0 {
            XCTAssertEqual(treeDifferences(treeSnapshot(ref), treeSnapshot(out)), [], file: file, line: line)
        } else {
            XCTAssertEqual(result.status, 2, result.stderr, file: file, line: line)
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), file: file, line: line)
        }
    }
}

/// The second external audit's untar cases: the partial tree changed between an interrupted
/// run and its resume. Each must end in the archive's exact tree or a refusal that blames the
/// partial tree — never exit 0 with another tree.
final class UntarTamperAuditTests: XCTestCase {
    /// The file being written at the cut had its mode changed before the resume: the resumed
    /// run continued in it and kept the changed mode (exit 0, `big` mode 000 in DIR).
    func testModeOfTheFileBeingWrittenIsRestored() throws {
        let fixture = try TamperFixture(self)
        try fixture.interruptedInsideBig()
        XCTAssertEqual(chmod(fixture.partial + "/big", 0), 0)
        let result = try SluiceBinary.run(["-q", fixture.spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        fixture.assertExactTreeOrRefused(result)
    }

    /// The same with the mode widened (an executable bit the archive never set).
    func testWidenedModeOfTheFileBeingWrittenIsRestored() throws {
        let fixture = try TamperFixture(self)
        try fixture.interruptedInsideBig()
        XCTAssertEqual(chmod(fixture.partial + "/big", 0o755), 0)
        let result = try SluiceBinary.run(["-q", fixture.spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        fixture.assertExactTreeOrRefused(result)
    }
}
