import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// The registry is the one list every part reads: its entries must be well-formed, the
/// parser must apply each kind's grammar, and the checkpoint coder must find each state.
final class StageRegistryTests: XCTestCase {
    let digest = String(repeating: "ab", count: 32)

    func testEveryKindIsWellFormed() {
        var seen = Set<String>()
        for kind in StageRegistry.all {
            XCTAssertTrue(seen.insert(kind.word).inserted, "\(kind.word) is registered twice")
            XCTAssertTrue(kind.synopsis.hasPrefix(kind.word), kind.synopsis)
            XCTAssertFalse(kind.summary.isEmpty, kind.word)
            switch kind.role {
            case .source:
                XCTAssertNil(kind.stateType, "\(kind.word): a source records a SourceState")
                XCTAssertEqual(kind.resumable, kind.word != "stdin", "\(kind.word): only stdin cannot be resumed")
            case .transform, .sink:
                XCTAssertEqual(kind.stateType?.stage, kind.word, "\(kind.word)'s state names another stage")
            }
        }
    }

    /// A source says which of its arguments is a local input file (the run checks it is not
    /// the output or the checkpoint); the engine no longer knows the word `read`.
    func testASourceNamesItsInputFile() throws {
        let table: [(String, String?)] = [
            ("read data.gz | gunzip | file out", "data.gz"),
            ("fetch http://example.org/data.gz | file out", nil),
            ("stdin | file out", nil),
        ]
        for (text, expected) in table {
            let spec = try PipelineSpec(parsing: text)
            XCTAssertEqual(spec.source.kind?.input(spec.source), expected, text)
            XCTAssertNil(spec.sink.kind?.input(spec.sink), "\(text): only a source reads an input")
        }
    }

    /// A transform with options, to check the grammar the parser applies to every kind.
    private let probe = StageKind.transform(
        "probe", options: [.integer("n", "a count", in: 1...32), .size("limit", "a size", in: 1...(1 << 40))],
        summary: "test stage", cost: { _ in StageCost(nsPerByte: 1) }, state: SHA256State.self
    ) { _, next, _, _ in next }

    private var kinds: [StageKind] { StageRegistry.all + [probe] }

    func testOptionsAreParsedCheckedAndPrintedCanonically() throws {
        let table: [(String, [String: String], String)] = [
            ("read x | probe | stdout", [:], "read x | probe | stdout"),
            ("read x | probe n=4 | stdout", ["n": "4"], "read x | probe n=4 | stdout"),
            ("read x | probe limit=1KiB n=32 | stdout", ["n": "32", "limit": "1024"], "read x | probe limit=1024 n=32 | stdout"),
        ]
        for (text, options, canonical) in table {
            let spec = try PipelineSpec(parsing: text, kinds: kinds)
            XCTAssertEqual(spec.stages[1].options, options, text)
            XCTAssertEqual(spec.description, canonical, text)
        }
    }

    func testBadOptionsPointAtTheWord() {
        let table: [(String, Int, String)] = [
            ("read x | probe n=0 | stdout", 16, "n=0: expected a whole number from 1 to 32"),
            ("read x | probe n=+4 | stdout", 16, "whole number"),
            ("read x | probe n=４ | stdout", 16, "whole number"),
            ("read x | probe n=99999999999999999999 | stdout", 16, "whole number"),
            ("read x | probe n=1 n=2 | stdout", 20, "given n= twice"),
            ("read x | probe m=1 | stdout", 16, "does not take 'm=1' (its options: n=N, limit=SIZE)"),
            ("read x | probe limit=99999999999999999999GiB | stdout", 16, "expected a size"),
            ("read x | probe 5 | stdout", 16, "does not take '5'"),
        ]
        for (text, column, words) in table {
            XCTAssertThrowsError(try PipelineSpec(parsing: text, kinds: kinds), text) { error in
                guard let e = error as? SpecError else { return XCTFail("\(text): \(error)") }
                XCTAssertEqual(e.column, column, "\(text): \(e)")
                XCTAssertTrue(e.message.contains(words), "\(text): \(e)")
            }
        }
    }

    func testDigestsAreASCIIHexOnly() {
        let fullwidth = String(repeating: "\u{FF10}", count: 64)
        for text in [
            "read x | verify sha256:\(fullwidth) | stdout",
            "read x | verify sha256:\(String(repeating: "g", count: 64)) | stdout",
            "read x | verify sha256:\(digest)0 | stdout",
        ] {
            XCTAssertThrowsError(try PipelineSpec(parsing: text), text)
        }
        XCTAssertEqual(
            try PipelineSpec(parsing: "read x | verify SHA256:\(digest.uppercased()) | stdout").stages[1],
            .verify(sha256: digest))
    }

    func testStageCountIsBounded() throws {
        let verify = " | verify sha256:\(digest)"
        let most = "read x" + String(repeating: verify, count: StageRegistry.maximumStages - 2) + " | stdout"
        XCTAssertEqual(try PipelineSpec(parsing: most).stages.count, StageRegistry.maximumStages)
        let tooMany = "read x" + String(repeating: verify, count: StageRegistry.maximumStages - 1) + " | stdout"
        XCTAssertThrowsError(try PipelineSpec(parsing: tooMany)) { error in
            XCTAssertTrue("\(error)".contains("at most \(StageRegistry.maximumStages)"), "\(error)")
        }
    }

    func testThreadPlanNeverStartsMoreTransformThreadsThanCores() throws {
        let verify = " | verify sha256:\(digest)"
        let spec = try PipelineSpec(parsing: "read x" + String(repeating: verify, count: 60) + " | stdout")
        for cores in [1, 2, 8] {
            let plan = ThreadPlan(spec: spec, options: PipelineOptions(), cores: cores).ownThread
            XCTAssertEqual(plan.count, spec.stages.count)
            XCTAssertTrue(plan.first! && plan.last!, "the source and the sink always have a thread")
            XCTAssertEqual(plan.dropFirst().dropLast().filter { $0 }.count, cores, "cores: \(cores)")
        }
    }

    func testThreadPlanGivesTheHeaviestStageItsOwnCore() throws {
        let table: [(String, InflateEngineKind, [Bool])] = [
            ("read x | verify sha256:\(digest) | gunzip | file y", .isal, [true, false, true, true]),
            ("read x | verify sha256:\(digest) | gunzip | file y", .zlib, [true, false, true, true]),
            ("read x | gunzip | verify sha256:\(digest) | file y", .isal, [true, true, true, true]),
            ("read x | file y", .isal, [true, true]),
        ]
        for (text, engine, expected) in table {
            var options = PipelineOptions()
            options.engine = engine
            XCTAssertEqual(
                ThreadPlan(spec: try PipelineSpec(parsing: text), options: options, cores: 2).ownThread,
                expected, "\(text) on \(engine)")
        }
    }

    func testCheckpointStatesRoundTripWithSnakeCaseKeys() throws {
        let states: [StageState] = [
            StageState(SHA256State(bytesHashed: 3, words: Array(repeating: 7, count: 8), partialBlock: [1, 2, 3])),
            StageState(FileSinkState(path: "out", bytesWritten: 3)),
            StageState(StdoutSinkState(bytesWritten: 3, fileSize: 10, startFileSize: 7)),
        ]
        let checkpoint = Checkpoint(
            spec: "read x | verify sha256:\(digest) | file out", writtenAt: Date(timeIntervalSince1970: 0),
            source: SourceState(kind: "read", location: "x", offset: 3, totalLength: 9),
            stages: states)
        let data = try checkpoint.encoded(key: .test)
        let text = String(decoding: data, as: UTF8.self)
        for key in ["\"bytes_hashed\"", "\"partial_block\"", "\"bytes_written\"", "\"start_file_size\"", "\"total_length\"", "\"written_at\""] {
            XCTAssertTrue(text.contains(key), "\(key) missing in \(text)")
        }
        XCTAssertFalse(text.contains("bytesWritten"), text)
        let decoded = try Checkpoint.decode(data, path: "x.sluice", key: .test)
        XCTAssertEqual(decoded.stages, states)
        XCTAssertEqual(decoded.stages.map(\.stageName), ["verify", "file", "stdout"])
    }

    func testOlderCheckpointVersionIsRefusedClearly() {
        let old = Data(#"{"format":"sluice-checkpoint","version":1,"spec":"read x | stdout"}"#.utf8)
        XCTAssertThrowsError(try Checkpoint.decode(old, path: "x.sluice", key: .test)) { error in
            XCTAssertTrue("\(error)".contains("older sluice (format version 1"), "\(error)")
        }
    }

    func testUnknownStageInACheckpointIsRefused() throws {
        let checkpoint = Checkpoint(
            spec: "read x | stdout", source: SourceState(kind: "read", location: "x"),
            stages: [StageState(StdoutSinkState(bytesWritten: 0, fileSize: nil))])
        let text = String(decoding: try checkpoint.encoded(key: .test), as: UTF8.self)
            .replacingOccurrences(of: "\"stage\":\"stdout\"", with: "\"stage\":\"nonesuch\"")
        XCTAssertThrowsError(try Checkpoint.decode(Data(text.utf8), path: "x.sluice", key: .test)) { error in
            XCTAssertTrue("\(error)".contains("nonesuch") || "\(error)".contains("digest"), "\(error)")
        }
    }
}

final class ByteSizeTests: XCTestCase {
    func testSizesAsPeopleWriteThem() {
        let table: [(String, UInt64?)] = [
            ("0", 0), ("4096", 4096), ("8MiB", 8 << 20), ("8mib", 8 << 20), ("512k", 512 << 10), ("1G", 1 << 30),
            ("1GB", 1_000_000_000), ("3B", 3), ("16EiB", nil), ("17179869184GiB", nil), ("", nil), ("MiB", nil),
            ("+5", nil), ("-1", nil), ("1.5M", nil), ("５", nil), ("99999999999999999999", nil), ("16777216TiB", nil),
        ]
        for (text, expected) in table {
            XCTAssertEqual(ByteSize.parse(text), expected, text)
        }
    }
}

final class CheckpointIdentityTests: XCTestCase {
    /// The number of connections changes how bytes travel, not which: a rerun may change it.
    func testTransportOptionsAreNotPartOfACheckpointsIdentity() throws {
        let texts = [
            "fetch https://h/x.gz | gunzip | file out",
            "fetch https://h/x.gz connections=4 | gunzip | file out",
            "fetch https://h/x.gz connections=16 | gunzip | file out",
        ]
        let identities = Set(try texts.map { try PipelineSpec(parsing: $0).checkpointIdentity })
        XCTAssertEqual(identities, ["fetch https://h/x.gz | gunzip | file out"])
        XCTAssertEqual(try PipelineSpec(parsing: texts[1]).redactedDescription, texts[1], "progress still shows it")
        XCTAssertNotEqual(
            try PipelineSpec(parsing: "fetch https://h/y.gz | gunzip | file out").checkpointIdentity,
            identities.first, "the URL's path is part of the identity")
    }
}
