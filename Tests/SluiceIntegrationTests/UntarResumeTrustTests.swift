import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A checkpoint edited by hand and sealed again with the user's key (so it authenticates)
/// must not turn an untar resume into exit 0 with a wrong tree: the file being written
/// records the member's size, and a resume requires the bytes written plus the bytes the
/// reader still expects to make it (with the reader's block arithmetic) — else it refuses.
final class UntarResumeTrustTests: XCTestCase {
    private var fixture: UntarTrustFixture!
    private var spec: String { fixture.spec }
    private var out: String { fixture.out }

    override func setUpWithError() throws {
        // The big file first: the run is stopped in the middle of its data.
        fixture = try UntarTrustFixture(
            self,
            files: [.init(path: "big", size: UntarTrustFixture.bigSize, seed: 21), .init(path: "sub/small", size: 5000, seed: 22)],
            members: "big sub")
    }

    private func interruptedRun() throws -> Checkpoint {
        try fixture.interruptedRun().0
    }

    private func assertTreeIsComplete(file: StaticString = #filePath, line: UInt = #line) {
        fixture.assertTreeIsTheArchives(file: file, line: line)
    }

    /// The case: `written` set to 0 made the resume cut the file to nothing and
    /// append the rest — exit 0 with a short file.
    func testForgedWrittenZeroIsRefused() throws {
        var checkpoint = try interruptedRun()
        XCTAssertNotNil(CheckpointMutator.setUntarWritten(&checkpoint, to: 0))
        try CheckpointStore(path: out + ".sluice").save(checkpoint)
        let result = try SluiceBinary.run(["-q", spec])
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("do not make the member's size"), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
        // The untouched checkpoint still resumes (nothing was changed by the refusal).
        let pristine = try interruptedRun()
        try CheckpointStore(path: out + ".sluice").save(pristine)
        let resumed = try SluiceBinary.run(["-q", spec])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        assertTreeIsComplete()
    }

    /// Edits of the position fields, one at a time: refused, or the exact tree — never exit 0
    /// with another tree, never a crash.
    func testEditedPositionsNeverGiveAWrongTree() throws {
        var rng = SeededRandom(seed: 31)
        let pristine = try interruptedRun()
        let partial = fixture.dir + "/partial-copy"
        XCTAssertEqual(try shell("cp -a \(out).sluice-part \(partial)").status, 0)
        var refused = 0
        for _ in 0..<24 {
            var checkpoint = pristine
            let what = try XCTUnwrap(CheckpointMutator.mutateUntarPosition(&checkpoint, rng: &rng))
            XCTAssertEqual(try shell("rm -rf \(out) \(out).sluice-part && cp -a \(partial) \(out).sluice-part").status, 0)
            try CheckpointStore(path: out + ".sluice").save(checkpoint)
            let result = try SluiceBinary.run(["-q", spec])
            XCTAssertFalse(result.signalled, "\(what): killed by signal \(result.status)")
            XCTAssertTrue([0, 2, 5].contains(result.status), "\(what): exit \(result.status): \(result.stderr)")
            if result.status == 0 {
                assertTreeIsComplete()
            } else {
                refused += 1
            }
        }
        XCTAssertGreaterThan(refused, 12, "most position edits contradict the rest of the state")
    }
}
