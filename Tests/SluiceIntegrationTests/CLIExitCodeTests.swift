import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// Every exit status of the README's table, through the real binary: the status, the one
/// `sluice:` line that explains it, and exactly what is left on disk afterwards.
final class CLIExitCodeTests: XCTestCase {

    // MARK: fixtures

    /// ~7 MB of mixed data (incompressible runs and number text) and its ~4.6 MB gzip.
    private static func medium() throws -> MixedGzipFixture {
        try MixedGzipFixture.shared("medium", chunks: 3)
    }

    /// ~177 MB of mixed data and its ≥ 100 MB gzip (shared with KillResumeTests): a run
    /// lasts long enough to be interrupted after its first checkpoint.
    private static func big() throws -> MixedGzipFixture {
        try MixedGzipFixture.big()
    }

    /// The artefacts a run for `out` may leave, by name.
    private func artefacts(of out: String) -> [String] {
        [out, out + ".sluice-part", out + ".sluice", out + ".sluice.lock", out + ".sluice.tmp"]
    }

    private func assertNothingLeft(for out: String, in dir: String, file: StaticString = #filePath, line: UInt = #line) {
        for name in artefacts(of: out) {
            XCTAssertFalse(
                FileManager.default.fileExists(atPath: dir + "/" + name),
                "\(name) was left on disk", file: file, line: line)
        }
    }

    /// Asserts the run reported its failure as exactly one `sluice:` line that contains
    /// every word of `mentions` (case-insensitive); returns that line.
    @discardableResult
    private func assertOneErrorLine(
        _ outcome: SluiceOutcome, mentions: [String],
        file: StaticString = #filePath, line: UInt = #line
    ) -> String {
        let messages = outcome.messages
        XCTAssertEqual(messages.count, 1, "expected exactly one stderr message line, got:\n\(outcome.stderr)", file: file, line: line)
        guard let message = messages.last else { return "" }
        XCTAssertTrue(message.hasPrefix("sluice: "), "stderr line does not start with 'sluice: ': \(message)", file: file, line: line)
        for word in mentions where !word.isEmpty {
            XCTAssertTrue(
                message.lowercased().contains(word.lowercased()),
                "stderr does not mention '\(word)': \(message)", file: file, line: line)
        }
        return message
    }

    // MARK: 2 — usage and spec errors: refused before anything is touched

    /// Runs `arguments` in a directory holding `small.gz`, expects exit 2 with one
    /// `sluice:` line mentioning `mentions`, and the directory exactly as it was.
    private func assertRefusedUntouched(
        _ arguments: [String], mentions: [String], column: Int? = nil, stdin: Data? = nil,
        prepare: ((String) throws -> Void)? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let dir = try makeTemporaryDirectory(self)
        try Data(gzipped: "hello sluice\n").write(to: URL(fileURLWithPath: dir + "/small.gz"))
        try prepare?(dir)
        let before = try DirectorySnapshot(dir)
        let outcome = try runSluiceBounded(arguments, in: dir, stdin: stdin, file: file, line: line)
        XCTAssertEqual(outcome.status, 2, "exit status of \(arguments); stderr: \(outcome.stderr)", file: file, line: line)
        XCTAssertFalse(outcome.signalled, file: file, line: line)
        let message = assertOneErrorLine(outcome, mentions: mentions, file: file, line: line)
        if let column {
            XCTAssertNotNil(
                message.range(of: "column \(column)(?![0-9])", options: .regularExpression),
                "the message does not point at column \(column): \(message)", file: file, line: line)
        }
        XCTAssertTrue(outcome.stdout.isEmpty, "a refused run wrote to stdout", file: file, line: line)
        let after = try DirectorySnapshot(dir)
        XCTAssertTrue(after == before, "a refused run changed the directory: \(after.differences(from: before))", file: file, line: line)
        assertNothingLeft(for: "out", in: dir, file: file, line: line)
    }

    /// A malformed spec: refused, the message quoting `word` and pointing at its column
    /// (of its `occurrence`-th appearance in `spec`).
    private func assertSpecRefused(
        _ spec: String, word: String, occurrence: Int = 1, also: [String] = [],
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        var from = spec.startIndex
        var found: Range<String.Index>?
        for _ in 0..<occurrence {
            found = spec.range(of: word, range: from..<spec.endIndex)
            guard let hit = found else { return XCTFail("'\(word)' not in '\(spec)'", file: file, line: line) }
            from = hit.upperBound
        }
        let column = spec.distance(from: spec.startIndex, to: found!.lowerBound) + 1
        try assertRefusedUntouched([spec], mentions: [word] + also, column: column, file: file, line: line)
    }

    func testUnknownStageIsRefusedNamingTheWordAndColumn() throws {
        try assertSpecRefused("read small.gz | bogus | file out", word: "bogus")
        try assertSpecRefused("read small.gz | gunzip | fiel out", word: "fiel")
    }

    func testMissingArgumentIsRefused() throws {
        try assertSpecRefused("read small.gz | gunzip | file", word: "file")
        try assertSpecRefused("read | gunzip | file out", word: "read")
        try assertSpecRefused("read small.gz | verify | gunzip | file out", word: "verify")
    }

    func testSinkThatIsNotLastIsRefused() throws {
        try assertSpecRefused("read small.gz | file out | gunzip", word: "file", also: ["last"])
        try assertSpecRefused("read small.gz | stdout | file out", word: "stdout")
        // No sink at all.
        try assertRefusedUntouched(["read small.gz | gunzip"], mentions: ["sink"])
    }

    func testDigestOfWrongLengthIsRefused() throws {
        try assertSpecRefused("read small.gz | verify sha256:abc123 | gunzip | file out", word: "sha256:abc123", also: ["64"])
        let sixtyFive = String(repeating: "a", count: 65)
        try assertSpecRefused("read small.gz | verify sha256:\(sixtyFive) | gunzip | file out", word: "sha256:\(sixtyFive)")
        try assertSpecRefused("read small.gz | verify sha256: | gunzip | file out", word: "sha256:")
    }

    func testDigestWithNonHexDigitsIsRefused() throws {
        let bad = String(repeating: "0", count: 63) + "g"
        try assertSpecRefused("read small.gz | verify sha256:\(bad) | gunzip | file out", word: "sha256:\(bad)")
        let zs = String(repeating: "z", count: 64)
        try assertSpecRefused("read small.gz | verify sha256:\(zs) | gunzip | file out", word: "sha256:\(zs)")
        // Not a sha256: digest at all.
        try assertSpecRefused("read small.gz | verify md5:0123 | gunzip | file out", word: "md5:0123")
    }

    func testTwoSourcesAreRefused() throws {
        try assertSpecRefused("read small.gz | read other.gz | file out", word: "read", occurrence: 2, also: ["source"])
        try assertSpecRefused("read small.gz | gunzip | stdin | file out", word: "stdin")
        // A transform in the source's place.
        try assertSpecRefused("gunzip | file out", word: "gunzip")
    }

    func testEmptySpecIsRefused() throws {
        try assertRefusedUntouched([""], mentions: ["empty"])
        try assertRefusedUntouched(["   "], mentions: ["empty"])
        try assertRefusedUntouched(["  # only a comment"], mentions: ["empty"])
        try assertSpecRefused("read small.gz | | file out", word: "|", occurrence: 2, also: ["missing"])
        try assertRefusedUntouched(["read small.gz | gunzip |"], mentions: ["missing"])
        // No spec at all.
        try assertRefusedUntouched([], mentions: ["pipeline"])
        // A spec file with nothing but comments.
        try assertRefusedUntouched(["-f", "empty.spec"], mentions: ["empty.spec", "empty"]) { dir in
            try "# nothing here\n\n   # still nothing\n".write(toFile: dir + "/empty.spec", atomically: true, encoding: .utf8)
        }
    }

    func testSpecFileErrorNamesFileLineAndColumn() throws {
        try assertRefusedUntouched(["-f", "bad.spec"], mentions: ["bad.spec", "line 3", "bogus"], column: 5) { dir in
            try "# a spec\nread small.gz\n  | bogus\n  | file out\n".write(toFile: dir + "/bad.spec", atomically: true, encoding: .utf8)
        }
        try assertRefusedUntouched(["-f", "missing.spec"], mentions: ["missing.spec"])
    }

    func testUnknownOptionIsRefused() throws {
        try assertRefusedUntouched(["--frobnicate", "read small.gz | gunzip | file out"], mentions: ["--frobnicate"])
        try assertRefusedUntouched(["read small.gz | gunzip | file out", "-Z"], mentions: ["-Z"])
        try assertRefusedUntouched(["--engine", "gzip", "read small.gz | gunzip | file out"], mentions: ["--engine", "gzip"])
        try assertRefusedUntouched(["--progress", "loud", "read small.gz | gunzip | file out"], mentions: ["--progress", "loud"])
        // Two positional specs.
        try assertRefusedUntouched(["read small.gz", "| gunzip | file out"], mentions: ["one"])
    }

    func testBadCheckpointIntervalIsRefused() throws {
        for value in ["8XB", "-1", "1.5MiB", "MiB", "", "8 MiB", "99999999999999999999"] {
            try assertRefusedUntouched(
                ["--checkpoint-interval", value, "read small.gz | gunzip | file out"],
                mentions: ["--checkpoint-interval", value])
        }
        try assertRefusedUntouched(
            ["--checkpoint-interval=12parsecs", "read small.gz | gunzip | file out"],
            mentions: ["--checkpoint-interval", "12parsecs"])
        // The option with its value missing.
        try assertRefusedUntouched(
            ["read small.gz | gunzip | file out", "--checkpoint-interval"],
            mentions: ["--checkpoint-interval"])
    }

    func testStdinWithCheckpointIsRefused() throws {
        let input = Data(gzipped: "from stdin\n")
        try assertRefusedUntouched(
            ["--checkpoint", "cp.sluice", "stdin | gunzip | file out"],
            mentions: ["stdin", "checkpoint"], stdin: input)
        try assertRefusedUntouched(
            ["--checkpoint", "cp.sluice", "stdin | gunzip | stdout"],
            mentions: ["stdin", "checkpoint"], stdin: input)
    }

    func testCheckpointThatDoesNotParseIsRefusedUntilRestart() throws {
        let dir = try makeTemporaryDirectory(self)
        let fixture = try Self.medium()
        let spec = "read \(fixture.gz) | gunzip | file out"
        // Only a file that says it is a sluice checkpoint gets the --restart advice (and
        // is removed by it); anything else is never advised away (FilesystemHostilityTests).
        let notCheckpoints: Set = ["this is not json\n", ""]
        for garbage in ["this is not json\n", "{\"format\": \"sluice-checkpoint\", \"version\": 1, \"spec\": 42}", ""] {
            try garbage.write(toFile: dir + "/out.sluice", atomically: true, encoding: .utf8)
            try "stale partial".write(toFile: dir + "/out.sluice-part", atomically: true, encoding: .utf8)
            let before = try DirectorySnapshot(dir)
            let refused = try runSluiceBounded([spec], in: dir)
            XCTAssertEqual(refused.status, 2, "checkpoint \(garbage.debugDescription): \(refused.stderr)")
            let advice = notCheckpoints.contains(garbage) ? "not a sluice checkpoint" : "--restart"
            let message = assertOneErrorLine(refused, mentions: ["out.sluice", advice])
            if notCheckpoints.contains(garbage) { XCTAssertFalse(message.contains("--restart"), message) }
            let after = try DirectorySnapshot(dir)
            XCTAssertTrue(after == before, "refusing a damaged checkpoint changed the directory: \(after.differences(from: before))")
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"))
        }

        // --restart discards a damaged sluice checkpoint (and the partial output).
        try "{\"format\": \"sluice-checkpoint\", \"version\": 1, \"spec\": 42}".write(toFile: dir + "/out.sluice", atomically: true, encoding: .utf8)
        let restarted = try runSluiceBounded(["--restart", spec], in: dir, timeout: 60)
        XCTAssertEqual(restarted.status, 0, restarted.stderr)
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"), "output differs from the original data")
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["out"], "--restart left more than the output")
    }

    func testCheckpointWithAnotherFormatVersionIsRefused() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let spec = "read \(fixture.gz) | gunzip | file out"
        let args = ["--checkpoint-interval", "1MiB", spec]
        let killed = try killAfterFirstCheckpoint(args, in: dir)
        guard var json = killed else { return }
        let original = try Data(contentsOf: URL(fileURLWithPath: dir + "/out.sluice"))

        for version in [1, 2, 4, 0, 1000] {
            json["version"] = version
            try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: dir + "/out.sluice"))
            let before = try DirectorySnapshot(dir)
            let refused = try runSluiceBounded(args, in: dir)
            XCTAssertEqual(refused.status, 2, "checkpoint version \(version): \(refused.stderr)")
            assertOneErrorLine(refused, mentions: ["out.sluice", "version", "\(version)", "--restart"])
            let after = try DirectorySnapshot(dir)
            XCTAssertTrue(after == before, "refusing checkpoint version \(version) changed the directory: \(after.differences(from: before))")
        }

        // The genuine checkpoint still resumes: nothing was damaged by the refusals.
        try original.write(to: URL(fileURLWithPath: dir + "/out.sluice"))
        try assertResumesToCompletion(args, in: dir, expected: fixture.raw)
    }

    func testCheckpointWrittenForAnotherSpecIsRefused() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let specA = "read \(fixture.gz) | gunzip | file out"
        let argsA = ["--checkpoint-interval", "1MiB", specA]
        guard try killAfterFirstCheckpoint(argsA, in: dir) != nil else { return }
        let before = try DirectorySnapshot(dir)

        let others = [
            "read \(fixture.gz) | file out",
            "read \(fixture.gz) | gunzip | verify sha256:\(String(repeating: "ab", count: 32)) | file out",
            "read \(fixture.raw) | file out",
        ]
        for specB in others {
            try assertRefused(["--checkpoint-interval", "1MiB", specB], in: dir, mentions: ["out.sluice", "--restart"], leaving: before)
        }
        // The right spec still resumes from it.
        try assertResumesToCompletion(argsA, in: dir, expected: fixture.raw)
    }

    func testSecondRunWhileTheLockIsHeldIsRefusedAndTouchesNothing() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let args = ["--checkpoint-interval", "1MiB", "read \(fixture.gz) | gunzip | file out"]
        guard let fd = try killedRunWithItsLockHeld(args, in: dir) else { return }
        let before = try DirectorySnapshot(dir)
        let spec = args.last!
        for second in [args, ["--restart"] + args, ["--checkpoint-interval", "0", spec], ["--progress", "json", "-q", spec]] {
            try assertRefused(second, in: dir, mentions: ["another sluice run holds", "out.sluice"], leaving: before)
        }
        flock(fd, LOCK_UN)
        close(fd)

        // Once the lock is free the same command resumes and completes.
        try assertResumesToCompletion(args, in: dir, expected: fixture.raw)
    }

    /// An output named like the files of a job writing `out` (its partial output, checkpoint,
    /// lock or checkpoint's temporary file) is refused with exit 2 before anything is touched,
    /// while that job runs and while it waits to be resumed; the job then still completes.
    func testOutputNamedLikeAnotherJobsFilesIsRefusedAndTouchesNothing() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let args = ["--checkpoint-interval", "1MiB", "read \(fixture.gz) | gunzip | file out"]
        guard let fd = try killedRunWithItsLockHeld(args, in: dir) else { return }
        let before = try DirectorySnapshot(dir)
        for name in ["out.sluice-part", "out.sluice", "out.sluice.lock", "out.sluice.tmp"] {
            try assertRefused(["read \(fixture.gz) | file \(name)"], in: dir, mentions: [name, "a running sluice job"], leaving: before)
        }
        flock(fd, LOCK_UN)
        close(fd)
        // A killed job holds no lock, yet its files are still its own.
        let idle = try runSluiceBounded(["read \(fixture.gz) | file out.sluice-part"], in: dir)
        XCTAssertEqual(idle.status, 2, idle.stderr)
        XCTAssertTrue(try DirectorySnapshot(dir) == before)
        try assertResumesToCompletion(args, in: dir, expected: fixture.raw)
    }

    /// Runs `arguments` in `dir`, which a killed run left as `before`: expects exit 2 with one
    /// `sluice:` line mentioning `mentions`, and the directory still as it was.
    private func assertRefused(
        _ arguments: [String], in dir: String, mentions: [String], leaving before: DirectorySnapshot,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let refused = try runSluiceBounded(arguments, in: dir, file: file, line: line)
        XCTAssertEqual(refused.status, 2, "\(arguments): \(refused.stderr)", file: file, line: line)
        assertOneErrorLine(refused, mentions: mentions, file: file, line: line)
        let after = try DirectorySnapshot(dir)
        XCTAssertTrue(after == before, "\(arguments) changed the directory: \(after.differences(from: before))", file: file, line: line)
    }

    /// Runs `args` (writing `out`) until its first checkpoint, kills it, and holds its lock the
    /// way a live run does: the lock's descriptor (unlock and close it), or nil when it failed.
    private func killedRunWithItsLockHeld(_ args: [String], in dir: String) throws -> Int32? {
        guard try killAfterFirstCheckpoint(args, in: dir) != nil else { return nil }
        let lockPath = dir + "/out.sluice.lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0, "cannot open \(lockPath)")
        guard fd >= 0 else { return nil }
        XCTAssertEqual(flock(fd, LOCK_EX | LOCK_NB), 0, "the killed run still holds its lock?")
        return fd
    }

    // MARK: 4 — checksum mismatch: no PATH, partial data and checkpoint removed

    func testChecksumMismatchBeforeGunzipLeavesNothing() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        let wrong = String(repeating: "0123456789abcdef", count: 4)
        let outcome = try runSluiceBounded(
            [
                "--checkpoint-interval", "256KiB",
                "read \(fixture.gz) | verify sha256:\(wrong) | gunzip | file out",
            ], in: dir)
        XCTAssertEqual(outcome.status, 4, outcome.stderr)
        assertOneErrorLine(outcome, mentions: [wrong, fixture.gzDigest, "nothing was written"])
        assertNothingLeft(for: "out", in: dir)
        XCTAssertEqual(try DirectorySnapshot(dir).names, [])
    }

    func testChecksumMismatchAfterAResumeRemovesPartialAndCheckpoint() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let wrong = String(repeating: "fe", count: 32)
        let args = ["--checkpoint-interval", "1MiB", "read \(fixture.gz) | verify sha256:\(wrong) | gunzip | file out"]
        guard try killAfterFirstCheckpoint(args, in: dir) != nil else { return }
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/out.sluice-part"))

        let outcome = try runSluiceBounded(["--progress", "json"] + args, in: dir, timeout: 60)
        XCTAssertEqual(outcome.status, 4, outcome.stderr)
        XCTAssertFalse(outcome.events(named: "resume").isEmpty, "the rerun did not resume from the checkpoint")
        assertOneErrorLine(outcome, mentions: [wrong, fixture.gzDigest, "nothing was written"])
        assertNothingLeft(for: "out", in: dir)
        XCTAssertEqual(try DirectorySnapshot(dir).names, [])
    }

    func testVerifyAfterGunzipChecksTheDecompressedBytes() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        // Upper case digits are accepted too.
        let ok = try runSluiceBounded(
            [
                "--checkpoint-interval", "256KiB",
                "read \(fixture.gz) | gunzip | verify sha256:\(fixture.rawDigest.uppercased()) | file out",
            ], in: dir)
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"))
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["out"])
        try FileManager.default.removeItem(atPath: dir + "/out")

        // The digest of the compressed file is the wrong one after gunzip.
        let mismatch = try runSluiceBounded(
            [
                "--checkpoint-interval", "256KiB",
                "read \(fixture.gz) | gunzip | verify sha256:\(fixture.gzDigest) | file out",
            ], in: dir)
        XCTAssertEqual(mismatch.status, 4, mismatch.stderr)
        assertOneErrorLine(mismatch, mentions: [fixture.gzDigest, fixture.rawDigest, "nothing was written"])
        assertNothingLeft(for: "out", in: dir)
        XCTAssertEqual(try DirectorySnapshot(dir).names, [])
    }

    // MARK: 5 — corrupt gzip: no PATH, partial data and checkpoint removed, both engines

    /// Corrupts the medium fixture's gzip with `damage`, runs it through each engine, and
    /// expects exit 5, one line naming the gzip problem, and nothing left but the input.
    private func assertCorruptionRefused(
        mentionsAnyOf keywords: [String], file: StaticString = #filePath, line: UInt = #line,
        damage: (inout Data) -> Void
    ) throws {
        let fixture = try Self.medium()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: fixture.gz))
        damage(&bytes)
        for engine in ["zlib", "isal"] {
            let dir = try makeTemporaryDirectory(self)
            try bytes.write(to: URL(fileURLWithPath: dir + "/bad.gz"))
            let before = try DirectorySnapshot(dir)
            let outcome = try runSluiceBounded(
                [
                    "--engine", engine, "--checkpoint-interval", "256KiB",
                    "read bad.gz | gunzip | file out",
                ], in: dir, file: file, line: line)
            XCTAssertEqual(outcome.status, 5, "engine \(engine): \(outcome.stderr)", file: file, line: line)
            let message = assertOneErrorLine(outcome, mentions: ["gzip"], file: file, line: line)
            XCTAssertTrue(
                keywords.contains { message.lowercased().contains($0.lowercased()) },
                "engine \(engine): the message names none of \(keywords): \(message)", file: file, line: line)
            assertNothingLeft(for: "out", in: dir, file: file, line: line)
            let after = try DirectorySnapshot(dir)
            XCTAssertTrue(after == before, "engine \(engine) left: \(after.differences(from: before))", file: file, line: line)
        }
    }

    func testTruncatedMemberIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["truncated", "unexpected end"]) { bytes in
            bytes = bytes.prefix(bytes.count * 3 / 5)
        }
    }

    func testTruncatedTrailerIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["trailer", "truncated", "unexpected end"]) { bytes in
            bytes = bytes.dropLast(3)
        }
    }

    func testFlippedCRCByteInTrailerIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["crc"]) { bytes in
            bytes[bytes.count - 8] ^= 0xff
        }
    }

    func testWrongISIZEIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["isize", "length"]) { bytes in
            bytes[bytes.count - 4] ^= 0x01
        }
        try assertCorruptionRefused(mentionsAnyOf: ["isize", "length"]) { bytes in
            bytes[bytes.count - 1] ^= 0x80
        }
    }

    func testBadMagicIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["not in gzip format", "magic"]) { bytes in
            bytes[0] = 0x50  // "PK": a zip file, not gzip
            bytes[1] = 0x4b
        }
        try assertCorruptionRefused(mentionsAnyOf: ["not in gzip format", "magic"]) { bytes in
            bytes[1] = 0x8c
        }
    }

    func testGarbageAfterMemberIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["garbage", "trailing"]) { bytes in
            bytes.append(contentsOf: Array("this is not a gzip member\n".utf8))
        }
    }

    func testBitFlipInDeflateDataIsCorrupt() throws {
        try assertCorruptionRefused(mentionsAnyOf: ["crc", "invalid", "distance", "block", "symbol", "corrupt"]) { bytes in
            bytes[bytes.count / 2] ^= 0x04
        }
        try assertCorruptionRefused(mentionsAnyOf: ["crc", "invalid", "distance", "block", "symbol", "corrupt"]) { bytes in
            bytes[40] ^= 0x10  // early in the first block
        }
    }

    func testCorruptTrailerFoundAfterAResumeRemovesPartialAndCheckpoint() throws {
        let fixture = try Self.big()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: fixture.gz))
        bytes[bytes.count - 7] ^= 0x20
        for engine in ["zlib", "isal"] {
            let dir = try makeTemporaryDirectory(self)
            try bytes.write(to: URL(fileURLWithPath: dir + "/bad.gz"))
            let args = ["--engine", engine, "--checkpoint-interval", "1MiB", "read bad.gz | gunzip | file out"]
            guard try killAfterFirstCheckpoint(args, in: dir) != nil else { continue }
            let outcome = try runSluiceBounded(["--progress", "json"] + args, in: dir, timeout: 60)
            XCTAssertEqual(outcome.status, 5, "engine \(engine): \(outcome.stderr)")
            XCTAssertFalse(outcome.events(named: "resume").isEmpty, "engine \(engine): the rerun did not resume")
            assertOneErrorLine(outcome, mentions: ["gzip", "crc"])
            assertNothingLeft(for: "out", in: dir)
            XCTAssertEqual(try DirectorySnapshot(dir).names, ["bad.gz"], "engine \(engine)")
        }
    }

    // MARK: 6 — local I/O errors

    func testOutputUnderARegularFileIsAnIOError() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        try "I am a file, not a directory\n".write(toFile: dir + "/notadir", atomically: true, encoding: .utf8)
        let before = try DirectorySnapshot(dir)
        for interval in ["8MiB", "0"] {
            let outcome = try runSluiceBounded(["--checkpoint-interval", interval, "read \(fixture.gz) | gunzip | file notadir/out"], in: dir)
            XCTAssertEqual(outcome.status, 6, "interval \(interval): \(outcome.stderr)")
            assertOneErrorLine(outcome, mentions: ["notadir/out", "Not a directory"])
            let after = try DirectorySnapshot(dir)
            XCTAssertTrue(after == before, after.differences(from: before))
        }
    }

    func testReadOnlyFileSystemIsAnIOError() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        let mountPoint = dir + "/ro"
        guard mountTmpfs(at: mountPoint, options: "ro,size=1m") else { return }
        let outcome = try runSluiceBounded(["read \(fixture.gz) | gunzip | file ro/out"], in: dir)
        XCTAssertEqual(outcome.status, 6, outcome.stderr)
        assertOneErrorLine(outcome, mentions: ["ro/out", "Read-only file system"])
        XCTAssertEqual(try DirectorySnapshot(mountPoint).names, [])
    }

    func testMissingSourceIsAnIOErrorAndWritesNoOutput() throws {
        let dir = try makeTemporaryDirectory(self)
        let outcome = try runSluiceBounded(["read does-not-exist.gz | gunzip | file out"], in: dir)
        XCTAssertEqual(outcome.status, 6, outcome.stderr)
        assertOneErrorLine(outcome, mentions: ["does-not-exist.gz", "No such file"])
        for name in ["out", "out.sluice-part", "out.sluice"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/" + name), "\(name) exists")
        }
    }

    /// Over the file-size limit (`ulimit -f`, here `prlimit --fsize`) the write fails and the
    /// run exits 6 naming the partial file; it died of SIGXFSZ (status 153) before.
    func testFileSizeLimitIsAnIOErrorNotADeathBySignal() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        process.arguments = ["--fsize=1048576", SluiceBinary.path, "-q", "read \(fixture.gz) | gunzip | file out"]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationReason, .exit, "killed by signal \(process.terminationStatus): \(stderr)")
        XCTAssertEqual(process.terminationStatus, 6, stderr)
        XCTAssertTrue(stderr.contains("out.sluice-part") && stderr.contains("File too large"), stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"), "PATH exists after a failed run")
    }

    /// Fills a tmpfs while a run writes into it (after its first checkpoint, so one good
    /// checkpoint surely exists), expects exit 6 with that checkpoint intact, then frees
    /// the space (and grows the file system) and expects the same command to resume.
    func testDiskFullKeepsLastGoodCheckpointAndRerunResumes() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let mountPoint = dir + "/disk"
        let rawSize = try fileSize(fixture.raw)
        let initialMiB = rawSize / (1 << 20) + 16
        guard mountTmpfs(at: mountPoint, options: "size=\(initialMiB)m") else { return }
        let args = ["--progress", "json", "--checkpoint-interval", "64KiB", "read \(fixture.gz) | gunzip | file disk/out"]

        let run = try SluiceChild(args, in: dir)
        let first = run.waitForEvent("checkpoint", timeout: 60, where: { (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) > 0 })
        XCTAssertNotNil(first, "no checkpoint event before the run ended: \(run.stderrSoFar)")
        // Another process takes all the space that is left.
        let filler = mountPoint + "/filler"
        let filled = fillFileSystem(holding: filler)
        XCTAssertTrue(filled, "could not fill \(mountPoint)")
        let outcome = run.waitForExit(timeout: 60)
        XCTAssertFalse(outcome.timedOut, "sluice hung after the disk filled: \(outcome.stderr)")
        XCTAssertEqual(outcome.status, 6, outcome.stderr)
        assertOneErrorLine(outcome, mentions: ["No space left"])
        XCTAssertEqual(outcome.events(named: "error").first?["exit_code"] as? Int, 6)
        XCTAssertFalse(FileManager.default.fileExists(atPath: mountPoint + "/out"), "PATH exists after a failed run")

        // The last good checkpoint remains, and the partial file holds at least what it covers.
        let checkpointPath = mountPoint + "/out.sluice"
        let facts = CheckpointFacts(path: checkpointPath)
        XCTAssertNotNil(facts, "no parseable checkpoint left at \(checkpointPath)")
        let partialSize = try? fileSize(mountPoint + "/out.sluice-part")
        XCTAssertNotNil(partialSize, "the partial file is gone")
        if let facts, let partialSize {
            XCTAssertNotNil(facts.fileBytes, "the checkpoint records no file length: \(facts.json)")
            XCTAssertLessThanOrEqual(facts.fileBytes ?? .max, partialSize, "the checkpoint covers more than the partial file holds")
            XCTAssertGreaterThan(facts.sourceOffset ?? 0, 0)
            if let seen = first?["checkpoint_offset"] as? NSNumber {
                XCTAssertGreaterThanOrEqual(facts.sourceOffset ?? 0, seen.uint64Value, "the checkpoint went backwards")
            }
        }

        // Free the space, grow the file system, and run the same command again.
        try FileManager.default.removeItem(atPath: filler)
        let remount = try shell("mount -o remount,size=\(initialMiB + 48)m '\(mountPoint)' 2>&1", capture: true)
        XCTAssertEqual(remount.status, 0, "remount failed: \(remount.output)")
        let rerun = try runSluiceBounded(args, in: dir, timeout: 60)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        let resumes = rerun.events(named: "resume")
        XCTAssertEqual(resumes.count, 1, "the rerun did not resume: \(rerun.stderr.suffix(2000))")
        if let offset = resumes.first?["source_offset"] as? NSNumber, let facts {
            XCTAssertEqual(offset.uint64Value, facts.sourceOffset, "resumed somewhere else than the checkpoint")
        }
        XCTAssertTrue(rerun.events(named: "restart").isEmpty, "the rerun started over")
        XCTAssertTrue(try filesEqual(fixture.raw, mountPoint + "/out"), "output differs after the resume")
        XCTAssertEqual(try DirectorySnapshot(mountPoint).names, ["out"])
    }

    /// stdout cannot take back what it wrote, so when the checkpoint before the first byte
    /// cannot be stored (its disk is full) the run stops with exit 6 and nothing on stdout:
    /// the bytes queued behind that checkpoint used to go out before the stop.
    func testStdoutGetsNothingWhenTheFirstCheckpointCannotBeStored() throws {
        let dir = try makeTemporaryDirectory(self)
        let mountPoint = dir + "/disk"
        guard mountTmpfs(at: mountPoint, options: "size=1m") else { return }
        // Every last byte taken (head stops at ENOSPC).
        _ = try shell("head -c 2M /dev/zero > '\(mountPoint)/filler' 2>/dev/null")
        try Data(makeTestData(count: 2 << 20, seed: 61)).write(to: URL(fileURLWithPath: dir + "/input"))

        let run = try shell(
            "cd '\(dir)' && '\(SluiceBinary.path)' -q --checkpoint disk/ck 'read input | stdout' > stdout 2> stderr; echo $?",
            capture: true)
        let stderr = (try? String(contentsOfFile: dir + "/stderr", encoding: .utf8)) ?? ""
        XCTAssertEqual(run.output.trimmingCharacters(in: .whitespacesAndNewlines), "6", stderr)
        XCTAssertTrue(stderr.contains("No space left"), stderr)
        XCTAssertEqual(try fileSize(dir + "/stdout"), 0, "bytes reached stdout that no checkpoint covers")
    }

    // MARK: 130 — interrupted: checkpoint saved where it stopped, rerun resumes

    private func assertInterruptSavesCheckpoint(_ signal: Int32) throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let args = [
            "--progress", "json", "--checkpoint-interval", "1MiB",
            "read \(fixture.gz) | verify sha256:\(fixture.gzDigest) | gunzip | file out",
        ]
        let run = try SluiceChild(args, in: dir)
        let first = run.waitForEvent("checkpoint", timeout: 60, where: { (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) > 0 })
        XCTAssertNotNil(first, "no checkpoint event: \(run.stderrSoFar)")
        run.send(signal)
        let outcome = run.waitForExit(timeout: 30)
        XCTAssertFalse(outcome.timedOut, "sluice did not stop within 30 s of signal \(signal)")
        XCTAssertFalse(outcome.signalled, "sluice died of the signal instead of exiting 130")
        XCTAssertEqual(outcome.status, 130, outcome.stderr)
        assertOneErrorLine(outcome, mentions: ["interrupted"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"), "PATH exists after an interrupted run")

        let facts = CheckpointFacts(path: dir + "/out.sluice")
        XCTAssertNotNil(facts, "no parseable checkpoint after the interrupt")
        guard let facts else { return }
        XCTAssertEqual(facts.mode & 0o777, 0o600, "checkpoint mode is \(String(facts.mode & 0o777, radix: 8))")
        XCTAssertEqual(facts.json["format"] as? String, "sluice-checkpoint")
        if let seen = first?["checkpoint_offset"] as? NSNumber {
            XCTAssertGreaterThanOrEqual(facts.sourceOffset ?? 0, seen.uint64Value, "the saved checkpoint is older than one already reported")
        }
        let partial = try fileSize(dir + "/out.sluice-part")
        XCTAssertLessThanOrEqual(facts.fileBytes ?? .max, partial)

        let rerun = try runSluiceBounded(args, in: dir, timeout: 60)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        let resumes = rerun.events(named: "resume")
        XCTAssertEqual(resumes.count, 1, "the rerun did not resume")
        XCTAssertEqual((resumes.first?["source_offset"] as? NSNumber)?.uint64Value, facts.sourceOffset)
        XCTAssertTrue(rerun.events(named: "restart").isEmpty, "the rerun started over")
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"), "output differs after the resume")
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["out"])
    }

    func testSIGTERMSavesCheckpointAndRerunResumes() throws {
        try assertInterruptSavesCheckpoint(SIGTERM)
    }

    func testSIGINTSavesCheckpointAndRerunResumes() throws {
        try assertInterruptSavesCheckpoint(SIGINT)
    }

    // MARK: 0 — success leaves only PATH

    func testSuccessLeavesOnlyTheOutput() throws {
        let fixture = try Self.big()
        let dir = try makeTemporaryDirectory(self)
        let outcome = try runSluiceBounded(
            [
                "--progress", "json", "--checkpoint-interval", "1MiB",
                "read \(fixture.gz) | verify sha256:\(fixture.gzDigest) | gunzip | file out",
            ],
            in: dir, timeout: 60)
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        XCTAssertFalse(outcome.events(named: "checkpoint").isEmpty, "no checkpoint was written during the run")
        XCTAssertEqual(outcome.events(named: "done").count, 1)
        XCTAssertEqual(outcome.messages, [], "a successful run printed messages")
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["out"])
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out"))
    }

    func testQuietSuccessFromASpecFilePrintsNothing() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        try """
        # decompress the medium fixture
        read \(fixture.gz)   # the source
          | verify sha256:\(fixture.gzDigest)
          | gunzip

          | verify sha256:\(fixture.rawDigest)   # of the data
          | file 'out put'
        """.write(toFile: dir + "/job.spec", atomically: true, encoding: .utf8)
        let outcome = try runSluiceBounded(["-q", "--checkpoint-interval", "256KiB", "-f", "job.spec"], in: dir)
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        XCTAssertEqual(outcome.stderr, "")
        XCTAssertTrue(outcome.stdout.isEmpty)
        XCTAssertEqual(try DirectorySnapshot(dir).names, ["job.spec", "out put"])
        XCTAssertTrue(try filesEqual(fixture.raw, dir + "/out put"))
    }

    func testStdinToStdoutSucceedsAndCreatesNothing() throws {
        let fixture = try Self.medium()
        let dir = try makeTemporaryDirectory(self)
        let input = try Data(contentsOf: URL(fileURLWithPath: fixture.gz))
        let outcome = try runSluiceBounded(["stdin | verify sha256:\(fixture.gzDigest) | gunzip | stdout"], in: dir, stdin: input)
        XCTAssertEqual(outcome.status, 0, outcome.stderr)
        XCTAssertEqual(outcome.stdout, try Data(contentsOf: URL(fileURLWithPath: fixture.raw)))
        XCTAssertEqual(try DirectorySnapshot(dir).names, [])
    }

    // MARK: helpers

    /// Starts `arguments` (plus `--progress json`), SIGKILLs it as soon as it reports its
    /// first checkpoint, and returns that checkpoint as stored (nil after an XCTFail).
    private func killAfterFirstCheckpoint(
        _ arguments: [String], in dir: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> [String: Any]? {
        let run = try SluiceChild(["--progress", "json"] + arguments, in: dir)
        let event = run.waitForEvent("checkpoint", timeout: 60, where: { (($0["checkpoint_offset"] as? NSNumber)?.uint64Value ?? 0) > 0 })
        run.send(SIGKILL)
        let outcome = run.waitForExit(timeout: 30)
        guard event != nil, outcome.signalled, outcome.status == SIGKILL else {
            XCTFail(
                "could not kill \(arguments) after its first checkpoint (status \(outcome.status)): \(outcome.stderr.suffix(2000))",
                file: file, line: line)
            return nil
        }
        guard let facts = CheckpointFacts(path: dir + "/" + checkpointName(in: arguments)) else {
            XCTFail("no parseable checkpoint after a reported checkpoint event", file: file, line: line)
            return nil
        }
        return facts.json
    }

    private func checkpointName(in arguments: [String]) -> String {
        guard let spec = arguments.last, let range = spec.range(of: "| file ", options: .backwards) else { return "out.sluice" }
        return spec[range.upperBound...].trimmingCharacters(in: .whitespaces) + ".sluice"
    }

    /// Runs `arguments` again (with `--progress json`): it must resume, finish, equal `expected`.
    private func assertResumesToCompletion(
        _ arguments: [String], in dir: String, expected: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let offset = CheckpointFacts(path: dir + "/out.sluice")?.sourceOffset
        let outcome = try runSluiceBounded(["--progress", "json"] + arguments, in: dir, timeout: 60, file: file, line: line)
        XCTAssertEqual(outcome.status, 0, outcome.stderr, file: file, line: line)
        let resumes = outcome.events(named: "resume")
        XCTAssertEqual(resumes.count, 1, "the run did not resume", file: file, line: line)
        XCTAssertEqual((resumes.first?["source_offset"] as? NSNumber)?.uint64Value, offset, file: file, line: line)
        XCTAssertTrue(try filesEqual(expected, dir + "/out"), "output differs after the resume", file: file, line: line)
        for name in ["out.sluice-part", "out.sluice", "out.sluice.lock"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/" + name), "\(name) left after success", file: file, line: line)
        }
    }

    /// Mounts a tmpfs at `path` (created) for this test; false after an XCTFail.
    private func mountTmpfs(at path: String, options: String, file: StaticString = #filePath, line: UInt = #line) -> Bool {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let result = try shell("mount -t tmpfs -o '\(options)' tmpfs '\(path)' 2>&1", capture: true)
            guard result.status == 0 else {
                XCTFail(
                    "mount -t tmpfs -o \(options) failed (this test needs root / CAP_SYS_ADMIN): \(result.output)",
                    file: file, line: line)
                return false
            }
        } catch {
            XCTFail("cannot mount a tmpfs at \(path): \(error)", file: file, line: line)
            return false
        }
        addTeardownBlock { _ = try? shell("umount '\(path)' 2>/dev/null || umount -l '\(path)'") }
        return true
    }

    /// Allocates nearly all the free space of the file system holding `path` to `path`.
    private func fillFileSystem(holding path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        for _ in 0..<200 {
            var fs = statvfs()
            guard statvfs(path, &fs) == 0 else { return false }
            let free = Int64(fs.f_bavail) * Int64(fs.f_frsize)
            let keep: Int64 = 128 << 10
            guard free > keep else { return true }
            let current = Int64((try? fileSize(path)) ?? 0)
            if posix_fallocate(fd, 0, off_t(current + free - keep)) == 0 { return true }
        }
        return false
    }
}
