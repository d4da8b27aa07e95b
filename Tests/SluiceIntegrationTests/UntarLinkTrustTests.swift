import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A resumed untar over a partial tree whose hard links were changed between runs: the
/// contents, modes and mtimes all still match the checkpoint's ledger, only which names
/// share a file differs. Two members that are separate files in the archive linked
/// together, or a member linked to a file outside the tree (a later write to DIR's name
/// would change that file), is refused (exit 2) — never exit 0 with a tree that differs
/// from GNU tar's.
final class UntarLinkTrustTests: XCTestCase {
    private var fixture: UntarTrustFixture!
    private var dir: String { fixture.dir }
    private var spec: String { fixture.spec }
    private var part: String { fixture.part }

    override func setUpWithError() throws {
        fixture = try UntarTrustFixture(
            self,
            files: [.init(path: "sub/a", size: 3000, seed: 7), .init(path: "big", size: UntarTrustFixture.bigSize, seed: 8)],
            prepare: "printf same > sub/same1 && printf same > sub/same2 && touch -d 2020-01-01 sub/same1 sub/same2"
                + " && ln sub/a sub/link",
            tarOptions: "--sort=name", members: "sub big")
    }

    func testChangedHardLinksAreRefused() throws {
        let outsideFile = dir + "/outside-copy"
        let changes: [(what: String, member: String, command: String)] = [
            ("two identical files linked together", "sub/same", "rm \(part)/sub/same2 && ln \(part)/sub/same1 \(part)/sub/same2"),
            (
                "a file linked to an identical copy outside", "sub/same1",
                "cp -p \(part)/sub/same1 \(outsideFile) && rm \(part)/sub/same1 && ln \(outsideFile) \(part)/sub/same1"
            ),
            (
                "a linked pair moved onto a copy outside", "sub/",
                "cp -p \(part)/sub/a \(outsideFile) && rm \(part)/sub/a \(part)/sub/link && ln \(outsideFile) \(part)/sub/a"
                    + " && ln \(outsideFile) \(part)/sub/link"
            ),
            // The archive's link group split into identical copies: every name still has its
            // content, mode and mtime, but they no longer share one file as in GNU tar's tree.
            ("a linked pair split into copies", "sub/", "rm \(part)/sub/link && cp -p \(part)/sub/a \(part)/sub/link"),
        ]
        for change in changes {
            try fixture.interruptedRun()
            try? FileManager.default.removeItem(atPath: outsideFile)
            let edited = try shell(change.command)
            XCTAssertEqual(edited.status, 0, "\(change.what): \(edited.output)")
            let result = try SluiceBinary.run([spec])
            XCTAssertEqual(result.status, 2, "\(change.what): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("\(part): '\(change.member)"), "\(change.what): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("hard link"), "\(change.what): \(result.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.out), change.what)
            let restarted = try SluiceBinary.run(["-q", "--restart", spec])
            XCTAssertEqual(restarted.status, 0, "\(change.what): \(restarted.stderr)")
            fixture.assertTreeIsTheArchives(change.what)
        }
    }

    /// The archive's own hard links resume untouched (a link is not a difference).
    func testUntouchedLinksResume() throws {
        try fixture.interruptedRun()
        let result = try SluiceBinary.run(["-q", spec])
        XCTAssertEqual(result.status, 0, result.stderr)
        fixture.assertTreeIsTheArchives()
    }
}
