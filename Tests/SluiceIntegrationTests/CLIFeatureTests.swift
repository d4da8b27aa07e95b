import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The CLI as people and scripts meet it: help, version, inspect, progress, spec files,
/// and the README's library example.
final class CLIFeatureTests: XCTestCase {
    static var repository: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
    }
    static let sampleDigest = "538d7a874d8dbb65826d48cface36867987d9ca375a236c76d8fc103027f09ff"

    func testHelpListsEveryStageOptionAndExitCode() throws {
        let result = try SluiceBinary.run(["--help"])
        XCTAssertEqual(result.status, 0)
        let help = String(decoding: result.stdout, as: UTF8.self)
        for word in StageRegistry.words + [
            "-f", "--checkpoint", "--checkpoint-interval", "--restart", "--retries",
            "--stall-timeout", "-H", "--cacert", "--insecure", "--engine", "--progress", "-q",
            "inspect", "--version",
        ] {
            XCTAssertTrue(help.contains(word), "help lacks \(word)")
        }
        for code in ["0", "2", "3", "4", "5", "6", "7", "130"] {
            XCTAssertTrue(help.contains("\n  \(code) "), "help lacks exit status \(code)")
        }
        let version = try SluiceBinary.run(["--version"])
        let lines = String(decoding: version.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, "sluice \(Sluice.version) (checkpoint format \(Checkpoint.currentVersion))")
        for (library, pattern) in [
            ("libcurl", #"^  libcurl \d+\.\d+\.\d+$"#), ("OpenSSL", #"^  OpenSSL \d+\.\d+\.\d+$"#),
            ("zlib", #"^  zlib \d+\.\d+"#), ("ISA-L", #"^  ISA-L \d+\.\d+\.\d+"#),
        ] {
            XCTAssertTrue(
                lines.contains { $0.range(of: pattern, options: .regularExpression) != nil },
                "--version does not name \(library)'s version: \(lines)")
        }
    }

    func testSpecFileErrorsNameFileLineAndColumn() throws {
        let dir = try makeTemporaryDirectory(self)
        let good = dir + "/good.spec", bad = dir + "/bad.spec"
        try """
        # decompress the sample
        read \(Self.repository)/Fixtures/sample.tar.gz
          | verify sha256:\(Self.sampleDigest)   # of the .gz
          | gunzip
          | file \(dir)/out.tar
        """.write(toFile: good, atomically: true, encoding: .utf8)
        let ok = try SluiceBinary.run(["-q", "-f", good])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out.tar"))

        try "read x\n  | gunzip\n  | verify sha256:1234\n  | stdout\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let failed = try SluiceBinary.run(["-f", bad])
        XCTAssertEqual(failed.status, 2)
        XCTAssertTrue(failed.stderr.hasPrefix("sluice: \(bad): spec error at line 3, column 12:"), failed.stderr)
    }

    func testInspectShowsAnInterruptedRun() throws {
        let dir = try makeTemporaryDirectory(self)
        let (gz, digest) = try makeGzip(in: dir, megabytes: 40)
        let process = try StreamingProcess(
            SluiceBinary.path,
            [
                "--progress", "json", "--checkpoint-interval", "1MiB",
                "read \(gz) | verify sha256:\(digest) | gunzip | file \(dir)/out",
            ])
        XCTAssertTrue(process.waitForLine(where: isLaterCheckpoint))
        process.signal(SIGTERM)
        let (status, _) = process.wait()
        XCTAssertEqual(status, 130)

        let human = try SluiceBinary.run(["inspect", dir + "/out.sluice"])
        XCTAssertEqual(human.status, 0, human.stderr)
        let text = String(decoding: human.stdout, as: UTF8.self)
        for word in ["spec", "read \(gz)", "written", "offset", "verify", "gunzip", "file", "rerun       resume"] {
            XCTAssertTrue(text.contains(word), "inspect output lacks '\(word)':\n\(text)")
        }

        let json = try SluiceBinary.run(["inspect", dir + "/out.sluice", "--json"])
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])
        XCTAssertEqual((object["rerun"] as? [String: Any])?["action"] as? String, "resume")
        let stages = try XCTUnwrap(object["stages"] as? [[String: Any]])
        XCTAssertEqual(stages.compactMap { $0["stage"] as? String }, ["read", "verify", "gunzip", "file"])
        let source = try XCTUnwrap(object["source"] as? [String: Any])
        XCTAssertGreaterThan(source["offset"] as? Int ?? 0, 0)

        // Touching the source makes a rerun restart, and inspect says so.
        XCTAssertEqual(try shell("touch -d '2001-01-01' '\(gz)'").status, 0)
        let changed = try SluiceBinary.run(["inspect", dir + "/out.sluice", "--json"])
        let verdict = (try JSONSerialization.jsonObject(with: changed.stdout) as? [String: Any])?["rerun"] as? [String: Any]
        XCTAssertEqual(verdict?["action"] as? String, "restart")

        let missing = try SluiceBinary.run(["inspect", dir + "/nothing.sluice"])
        XCTAssertEqual(missing.status, 2)
        XCTAssertTrue(missing.stderr.hasPrefix("sluice: "), missing.stderr)
    }

    /// A file that is not a checkpoint: `inspect` says so in its own terms (it has no
    /// `--checkpoint` to name another); a run says what it will not do and what to do instead.
    func testNotACheckpointIsToldInTheTermsOfTheCommand() throws {
        let dir = try makeTemporaryDirectory(self)
        try Data("my notes\n".utf8).write(to: URL(fileURLWithPath: dir + "/notes"))
        try Data("data".utf8).write(to: URL(fileURLWithPath: dir + "/in"))

        let inspect = try SluiceBinary.run(["inspect", dir + "/notes"])
        XCTAssertEqual(inspect.status, 2, inspect.stderr)
        XCTAssertEqual(inspect.stderr, "sluice: cannot inspect \(dir)/notes: it is not a sluice checkpoint\n")

        let run = try SluiceBinary.run(["--checkpoint", dir + "/notes", "read \(dir)/in | file \(dir)/out"])
        XCTAssertEqual(run.status, 2, run.stderr)
        XCTAssertTrue(run.stderr.contains("\(dir)/notes is not a sluice checkpoint"), run.stderr)
        XCTAssertTrue(run.stderr.contains("name another --checkpoint"), run.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/notes", encoding: .utf8), "my notes\n")
    }

    /// Every JSON line of a run that retries, is interrupted, and resumes.
    func testProgressJSONThroughRetryAndResume() throws {
        let body = makeTestData(count: 3_000_000, seed: 21)
        try withFaultServer(
            body: body,
            fault: {
                $0.dropAfterBodyBytes = 1_200_000
                $0.bytesPerSecond = 6_000_000
            }
        ) { server in
            let dir = try makeTemporaryDirectory(self)
            let args = ["--progress", "json", "--checkpoint-interval", "256KiB", "fetch \(server.url()) | file \(dir)/out"]

            let first = try StreamingProcess(SluiceBinary.path, args)
            XCTAssertTrue(first.waitForLine(where: isLaterCheckpoint))
            first.signal(SIGINT)
            let (status1, lines1) = first.wait()
            XCTAssertEqual(status1, 130)
            let events1 = progressEvents(lines1)
            XCTAssertEqual(events1.first?["event"] as? String, "start")
            XCTAssertEqual(events1.first?["attempt"] as? Int, 1, "start events number the attempts")
            XCTAssertEqual(events1.last?["event"] as? String, "error")
            XCTAssertEqual(events1.last?["exit_code"] as? Int, 130)

            let second = try StreamingProcess(SluiceBinary.path, args)
            let (status2, lines2) = second.wait()
            XCTAssertEqual(status2, 0, lines2.joined(separator: "\n"))
            let events2 = progressEvents(lines2)
            let names = events2.compactMap { $0["event"] as? String }
            XCTAssertEqual(names.first, "resume")
            XCTAssertEqual(names.dropFirst().first, "start")
            XCTAssertEqual(names.last, "done")
            XCTAssertTrue(names.contains("retry"), "the server drops every connection, so the run must retry: \(names)")
            let allowed: Set = ["start", "progress", "retry", "checkpoint", "resume", "restart", "done", "error"]
            XCTAssertTrue(Set(names).isSubset(of: allowed), "\(names)")

            // Offsets never go backwards within a run (retries continue at the current offset).
            var last = 0
            for event in events1 + [["event": "boundary"]] + events2 {
                if event["event"] as? String == "boundary" {
                    last = 0
                    continue
                }
                guard let offset = event["source_offset"] as? Int else { continue }
                XCTAssertGreaterThanOrEqual(offset, last, "offset went backwards: \(event)")
                last = offset
            }
            XCTAssertEqual(try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/out"))), body)
        }
    }

    /// Under a pseudo-terminal the bar appears, updates, and is cleared at the end.
    func testProgressBarOnATerminal() throws {
        let body = makeTestData(count: 2_000_000, seed: 8)
        try withFaultServer(body: body, fault: { $0.bytesPerSecond = 2_000_000 }) { server in
            let dir = try makeTemporaryDirectory(self)
            let command = "'\(SluiceBinary.path)' 'fetch \(server.url()) | file \(dir)/out'"
            let result = try shell("script -qfec \(shellQuote(command)) /dev/null", capture: true)
            XCTAssertEqual(result.status, 0, result.output)
            let redraws = result.output.components(separatedBy: "\r\u{1b}[2K[").count - 1
            XCTAssertGreaterThanOrEqual(redraws, 3, "the bar should redraw while the transfer runs: \(result.output.debugDescription)")
            XCTAssertTrue(result.output.contains("%"))
            XCTAssertTrue(result.output.hasSuffix("\r\u{1b}[2K"), "the bar is cleared on exit: \(result.output.suffix(80).debugDescription)")
        }
    }

    func testNoBarWhenStderrIsNotATerminal() throws {
        let dir = try makeTemporaryDirectory(self)
        let result = try SluiceBinary.run(["read \(Self.repository)/Fixtures/sample.tar.gz | gunzip | file \(dir)/out"])
        XCTAssertEqual(result.status, 0)
        XCTAssertEqual(result.stderr, "", "nothing on a non-terminal stderr by default")
    }

    func testShortFlagsCombine() throws {
        let dir = try makeTemporaryDirectory(self)
        let spec = "read \(Self.repository)/Fixtures/sample.tar.gz | gunzip | file \(dir)/out"
        let combined = try SluiceBinary.run(["-qk", spec])
        XCTAssertEqual(combined.status, 0, combined.stderr)
        XCTAssertEqual(combined.stderr, "", "-q silences the --insecure warning of -k")
        try spec.write(toFile: dir + "/spec", atomically: true, encoding: .utf8)
        try FileManager.default.removeItem(atPath: dir + "/out")
        XCTAssertEqual(try SluiceBinary.run(["-qf", dir + "/spec"]).status, 0, "a short option with a value may end a cluster")
        let unknown = try SluiceBinary.run(["-qz", spec])
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.stderr.contains("unknown option '-qz'"), unknown.stderr)
        let typo = try SluiceBinary.run(["--checkpoint-intervl", "1MiB", spec])
        XCTAssertEqual(typo.status, 2)
        XCTAssertTrue(typo.stderr.contains("unknown option '--checkpoint-intervl'; did you mean --checkpoint-interval?"), typo.stderr)
        let valueInside = try SluiceBinary.run(["-fq", dir + "/spec"])
        XCTAssertEqual(valueInside.status, 2, "-f takes a value, so it cannot stand inside a cluster")
    }

    /// The README's library example, compiled as the SluiceExample target, runs.
    func testReadmeExampleCompilesAndRuns() throws {
        let example = try String(contentsOfFile: Self.repository + "/Examples/SluiceExample/main.swift", encoding: .utf8)
        let readme = try String(contentsOfFile: Self.repository + "/README.md", encoding: .utf8)
        XCTAssertTrue(
            readme.contains(example.trimmingCharacters(in: .whitespacesAndNewlines)),
            "README.md must show Examples/SluiceExample/main.swift verbatim")
        let binary = URL(fileURLWithPath: SluiceBinary.path).deletingLastPathComponent().appendingPathComponent("SluiceExample").path
        let dir = try makeTemporaryDirectory(self)
        let url = "file://\(Self.repository)/Fixtures/sample.tar.gz"
        let run = try shell("'\(binary)' '\(url)' \(Self.sampleDigest) '\(dir)/sample.tar'", capture: true)
        XCTAssertEqual(run.status, 0, run.output)
        XCTAssertTrue(run.output.contains("done: 389120 bytes written"), run.output)
        let mismatch = try shell("'\(binary)' '\(url)' \(String(repeating: "0", count: 64)) '\(dir)/bad.tar'", capture: true)
        XCTAssertEqual(mismatch.status, 4, mismatch.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/bad.tar"))
    }

    // MARK: helpers

    private func makeGzip(in dir: String, megabytes: Int) throws -> (path: String, digest: String) {
        let plain = dir + "/plain", gz = dir + "/data.gz"
        try Data(makeTestData(count: megabytes << 20, seed: 77)).write(to: URL(fileURLWithPath: plain))
        XCTAssertEqual(try shell("gzip -6 -c '\(plain)' > '\(gz)'").status, 0)
        return (gz, try sha256Hex(ofFile: gz))
    }
}

func shellQuote(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
}
