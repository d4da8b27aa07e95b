import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The kill loop every resumable stage is tested with: the real binary runs `arguments`,
/// is SIGKILLed right after a checkpoint event at or past a chosen source offset, and the
/// same command is rerun; after the last kill one run completes. Each rerun must resume at
/// the offset its predecessor's checkpoint recorded, and none may start over.
///
/// Kills are placed by checkpoint events, not by time, and runs wait at the debug build's
/// SOURCE_END gate once their source is read, so no kill can land after a run completed
/// however fast or busy the machine is.
struct KillLoop {
    /// Names the loop in failure messages, e.g. "zlib" or "multi-block".
    var label: String
    /// `--progress json` must be among them: the loop acts on checkpoint events.
    var arguments: [String]
    var directory: String
    /// The checkpoint the runs write, relative to `directory`.
    var checkpoint: String
    /// What only a completed run creates (the file or DIR), relative to `directory`: it
    /// must not exist after a kill.
    var output: String
    var finalTimeout: TimeInterval = 300

    /// Runs `kills` killed runs, then the completing one, and returns the completing
    /// run's outcome (already checked for exit 0 and a resume), or nil when the loop
    /// failed the test. `target(k)` is the source offset kill k waits for a checkpoint at
    /// or past; it is raised past the stored checkpoint so every run makes progress.
    func run(_ test: XCTestCase, kills: Int, target: (Int) -> UInt64) throws -> SluiceOutcome? {
        let hold = try holdAtSourceEnd(test)
        let checkpointPath = directory + "/" + checkpoint
        var resumes = 0
        for kill in 0..<kills {
            let stored = CheckpointFacts(path: checkpointPath)?.sourceOffset
            let wanted = max(target(kill), (stored ?? 0) + 1)
            let run = try SluiceChild(arguments, in: directory, environment: hold)
            let reached = run.waitForEvent("checkpoint", timeout: 120) {
                (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) >= wanted
            }
            guard reached != nil else {
                run.send(SIGKILL)
                let outcome = run.waitForExit(timeout: 30)
                XCTFail("[\(label)] run \(kill + 1) reached no checkpoint at or past source byte \(wanted): \(outcome.stderr.suffix(2000))")
                return nil
            }
            run.send(SIGKILL)
            let outcome = run.waitForExit(timeout: 60)
            guard outcome.signalled, outcome.status == SIGKILL else {
                XCTFail("[\(label)] run \(kill + 1) was not killed (status \(outcome.status)): \(outcome.stderr.suffix(2000))")
                return nil
            }
            XCTAssertFalse(
                FileManager.default.fileExists(atPath: directory + "/" + output), "[\(label)] \(output) exists after kill \(kill + 1)")
            XCTAssertTrue(outcome.events(named: "restart").isEmpty, "[\(label)] run \(kill + 1) started over: \(outcome.messages)")
            if let stored {
                let resume = outcome.events(named: "resume").first
                XCTAssertEqual(
                    (resume?["source_offset"] as? NSNumber)?.uint64Value, stored,
                    "[\(label)] run \(kill + 1) did not resume at its checkpoint: \(outcome.messages)")
                if resume != nil { resumes += 1 }
            }
            XCTAssertGreaterThanOrEqual(CheckpointFacts(path: checkpointPath)?.sourceOffset ?? 0, wanted, "[\(label)] run \(kill + 1)")
        }
        let final = try runSluiceBounded(arguments, in: directory, timeout: finalTimeout)
        XCTAssertEqual(final.status, 0, "[\(label)] the final run failed: \(final.messages)")
        XCTAssertEqual(final.events(named: "resume").count, 1, "[\(label)] the final run did not resume: \(final.messages)")
        XCTAssertTrue(final.events(named: "restart").isEmpty, "[\(label)] the final run started over")
        XCTAssertEqual(resumes, kills - 1, "[\(label)] not every rerun resumed")
        return final.status == 0 ? final : nil
    }
}
