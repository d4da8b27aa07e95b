import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// The kill loop: the real binary moves a ≥ 100 MB gzip through verify and gunzip into a
/// file, is SIGKILLed at random moments, and the same command is rerun each time. At the
/// end the output must be byte-identical to the original data, and the reruns must have
/// continued from checkpoints rather than from zero.
final class KillResumeTests: XCTestCase {
    /// ~177 MB of mixed data; its gzip is ≥ 100 MB (checked by the test).
    private static func fixture() throws -> MixedGzipFixture {
        try MixedGzipFixture.big()
    }

    func testKillLoopDefaultEngine() throws {
        try requireSlowTests()
        try killLoop(engine: nil)
    }

    func testKillLoopZlibEngine() throws {
        try requireSlowTests()
        try killLoop(engine: "zlib")
    }

    private struct Tally {
        var kills = 0
        var reruns = 0
        var resumes = 0
        var restarts = 0
        var killedBeforeAnyCheckpointOfItsRun = 0
        var moments: [String] = []
    }

    private func killLoop(engine: String?, wantedKills: Int = 8) throws {
        let fixture = try Self.fixture()
        let gzSize = try fileSize(fixture.gz)
        XCTAssertGreaterThanOrEqual(gzSize, 100_000_000, "the fixture must be at least 100 MB of gzip")
        let dir = try makeTemporaryDirectory(self)
        let label = engine ?? "default"
        var arguments = ["--progress", "json", "--checkpoint-interval", "1MiB"]
        if let engine { arguments += ["--engine", engine] }
        arguments.append("read \(fixture.gz) | verify sha256:\(fixture.gzDigest) | gunzip | file out")

        // Runs that are to be killed wait at a debug build's SOURCE_END gate (a FIFO nobody
        // opens) once the source is exhausted, so no kill can land after a run completed,
        // however fast the machine. The gate lives outside `dir`, which must end up holding
        // only the output.
        let gateDir = try makeTemporaryDirectory(self)
        XCTAssertEqual(mkfifo(gateDir + "/source-end", 0o600), 0)
        let holdAtTheEnd = ["SLUICE_TEST_GATE_SOURCE_END": gateDir + "/source-end"]

        let seed =
            ProcessInfo.processInfo.environment["SLUICE_KILL_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 0...UInt64.max)
        var random = SplitMix64(seed: seed)
        var tally = Tally()
        let started = Date()
        defer {
            print(
                "KillResumeTests[\(label)]: seed=\(seed) kills=\(tally.kills) reruns=\(tally.reruns) resumes=\(tally.resumes) "
                    + "restarts=\(tally.restarts) killed-before-own-checkpoint=\(tally.killedBeforeAnyCheckpointOfItsRun) "
                    + String(format: "time=%.1fs ", Date().timeIntervalSince(started))
                    + "moments=[\(tally.moments.joined(separator: ", "))]")
        }

        while tally.kills < wantedKills {
            let stored = CheckpointFacts(path: dir + "/out.sluice")
            let resumeFrom = stored?.sourceOffset
            let run = try SluiceChild(arguments, in: dir, environment: holdAtTheEnd)
            if tally.kills > 0 { tally.reruns += 1 }

            // Pick the moment. Kill k lands in the k-th of `wantedKills` equal slices of the
            // first 75% of the source (so no run reaches its end first): after the first
            // checkpoint at or past a random point of that slice, plus a random 0–10 ms.
            // Sometimes instead a random 0–20 ms after start, before this run has written
            // any checkpoint of its own — but only when a checkpoint is already on disk, so
            // every kill leaves one behind and every rerun must resume: whether one does
            // never depends on where a kill happened to land.
            let span = Double(gzSize) * 0.75
            let sliceStart = UInt64(span * Double(tally.kills) / Double(wantedKills))
            let sliceEnd = UInt64(span * Double(tally.kills + 1) / Double(wantedKills))
            let from = max(sliceStart, (resumeFrom ?? 0) + 1)
            let target = from + (sliceEnd > from ? random.next() % (sliceEnd - from) : 0)
            var moment: String
            var checkpointSeen: UInt64?
            let beforeOwnCheckpoint = random.next() % 5 == 0
            if beforeOwnCheckpoint && resumeFrom != nil {
                guard run.waitForEvent("start", timeout: 60) != nil else {
                    return fail(run, "run \(tally.kills + 1) never started", tally)
                }
                let delay = random.next() % 20_000
                usleep(useconds_t(delay))
                moment = "start+\(delay / 1000)ms"
            } else {
                guard
                    let event = run.waitForEvent(
                        "checkpoint", timeout: 120,
                        where: {
                            (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) >= target
                        })
                else {
                    return fail(run, "run \(tally.kills + 1) ended before a checkpoint at or past source byte \(target)", tally)
                }
                checkpointSeen = (event["checkpoint_offset"] as? NSNumber)?.uint64Value
                let delay = random.next() % 10_000
                if delay > 0 { usleep(useconds_t(delay)) }
                moment = "ckpt≥\(target >> 20)MiB+\(delay / 1000)ms"
            }
            run.send(SIGKILL)
            let outcome = run.waitForExit(timeout: 60)
            XCTAssertFalse(outcome.timedOut, "[\(label)] a killed run did not go away")
            guard outcome.signalled, outcome.status == SIGKILL else {
                return fail(run, "run \(tally.kills + 1) was not killed (status \(outcome.status)); it finished first", tally, outcome)
            }
            tally.kills += 1
            try checkRun(outcome, resumedFrom: resumeFrom, label: label, tally: &tally)
            if outcome.events(named: "checkpoint").isEmpty { tally.killedBeforeAnyCheckpointOfItsRun += 1 }

            guard !FileManager.default.fileExists(atPath: dir + "/out") else {
                return XCTFail("[\(label)] kill \(tally.kills) landed after the run had completed (PATH exists); the fixture is too small")
            }
            // What the kill left must be a usable checkpoint covering no more than the partial file.
            let after = CheckpointFacts(path: dir + "/out.sluice")
            let seenOffsets = outcome.events(named: "checkpoint").compactMap { ($0["checkpoint_offset"] as? NSNumber)?.uint64Value }
            if let newest = seenOffsets.max() ?? resumeFrom {
                guard let after else {
                    return XCTFail("[\(label)] kill \(tally.kills): no parseable checkpoint, though one at \(newest) was reported")
                }
                XCTAssertGreaterThanOrEqual(after.sourceOffset ?? 0, newest, "[\(label)] kill \(tally.kills): checkpoint went backwards")
                XCTAssertEqual(after.mode & 0o777, 0o600, "[\(label)] checkpoint mode")
                let partial = (try? fileSize(dir + "/out.sluice-part")) ?? 0
                XCTAssertLessThanOrEqual(
                    after.fileBytes ?? .max, partial,
                    "[\(label)] kill \(tally.kills): checkpoint records more than the partial file holds")
            }
            moment += " → @\(((after?.sourceOffset ?? 0) >> 20))MiB"
            if let checkpointSeen { moment += " (saw \(checkpointSeen >> 20))" }
            tally.moments.append(moment)
        }

        // The last rerun goes to the end.
        let resumeFrom = CheckpointFacts(path: dir + "/out.sluice")?.sourceOffset
        let final = try runSluiceBounded(arguments, in: dir, timeout: 120)
        tally.reruns += 1
        XCTAssertEqual(final.status, 0, "[\(label)] the final run failed: \(final.messages)")
        try checkRun(final, resumedFrom: resumeFrom, label: label, tally: &tally)
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"), "[\(label)] output differs from the original data (cmp)")
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["out"], "[\(label)] more than the output is left")

        XCTAssertEqual(tally.kills, wantedKills)
        XCTAssertEqual(tally.restarts, 0, "[\(label)] a rerun started over from zero")
        XCTAssertEqual(
            tally.resumes, tally.reruns,
            "[\(label)] only \(tally.resumes) of \(tally.reruns) reruns resumed from a checkpoint")
    }

    /// Checks one run's events against the checkpoint it found, and counts it.
    private func checkRun(_ outcome: SluiceOutcome, resumedFrom offset: UInt64?, label: String, tally: inout Tally) throws {
        let resumes = outcome.events(named: "resume")
        let restarts = outcome.events(named: "restart")
        tally.restarts += restarts.count
        XCTAssertEqual(
            outcome.messages.filter { $0.hasPrefix("sluice: ") && !$0.contains("resuming") && !$0.contains("interrupted") }, [],
            "[\(label)] unexpected messages")
        if let offset {
            if let resume = resumes.first {
                tally.resumes += 1
                XCTAssertEqual(
                    (resume["source_offset"] as? NSNumber)?.uint64Value, offset,
                    "[\(label)] resumed somewhere else than the stored checkpoint")
            } else if outcome.lines.contains(where: { sluiceEvent($0)?["event"] as? String == "start" }) {
                XCTFail("[\(label)] a checkpoint at \(offset) existed but the run did not resume: \(outcome.stderr.prefix(1000))")
            }
        } else {
            XCTAssertTrue(resumes.isEmpty, "[\(label)] resumed without a checkpoint on disk")
        }
    }

    private func fail(
        _ run: SluiceChild, _ what: String, _ tally: Tally, _ outcome: SluiceOutcome? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let result =
            outcome
            ?? {
                run.send(SIGKILL)
                return run.waitForExit(timeout: 30)
            }()
        XCTFail(
            "\(what) after \(tally.kills) kills; \(result.lines.count) stderr lines (signalled \(result.signalled), timedOut \(result.timedOut)):\n\(result.lines.map { String($0.prefix(160)) }.joined(separator: "\n"))",
            file: file, line: line)
    }
}

/// A small seeded generator, so a failing kill sequence can be replayed (SLUICE_KILL_SEED).
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
