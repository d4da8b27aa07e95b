import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// `decompress` picks gunzip, unxz or unzstd by the magic number, refuses anything else naming
/// what it saw, and its checkpoint resumes as the codec it chose.
final class DecompressorTests: XCTestCase {
    private func inputs(in dir: String) throws -> [(String, [UInt8], [UInt8])] {
        let plain = makeTestData(count: 250_000, seed: 31)
        try Data(plain).write(to: URL(fileURLWithPath: dir + "/plain"))
        XCTAssertEqual(try shell("gzip -6 -c '\(dir)/plain' > '\(dir)/plain.gz'").status, 0)
        let gz = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/plain.gz")))
        let zst = try zstdCompress(plain, "-7", in: dir)
        XCTAssertEqual(try shell("xz -6 -c '\(dir)/plain' > '\(dir)/plain.xz'").status, 0)
        let xz = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/plain.xz")))
        return [
            ("gzip", gz, plain), ("xz", xz, plain), ("zstd", zst, plain),
            ("zstd after a skippable frame", zstdSkippableFrame([9, 9]) + zst, plain),
        ]
    }

    private func decode(_ bytes: [UInt8], chunk: Int) throws -> (Decompressor, [UInt8]) {
        let sink = MemorySink()
        let d = try Decompressor(next: sink)
        try write(bytes, to: d, chunk: chunk)
        try d.finish()
        return (d, sink.bytes)
    }

    func testEachCodec() throws {
        let dir = try makeTemporaryDirectory(self)
        for (name, compressed, plain) in try inputs(in: dir) {
            for chunk in [1, 3, 65536] where chunk > 1 || name == "zstd" {
                let (d, output) = try decode(compressed, chunk: chunk)
                XCTAssertTrue(output == plain, "\(name), \(chunk)-byte writes")
                XCTAssertEqual(d.codec, name.hasPrefix("gzip") ? .gzip : name == "xz" ? .xz : .zstd)
            }
        }
    }

    func testGarbageIsRefusedNamingWhatItSaw() {
        expectRefusal(Array("PK\u{3}\u{4}rest".utf8), #"50 4b 03 04 72 65 73 74 ("PK\x03\x04rest")"#)
        expectRefusal([0x1f, 0x00], #"1f 00 ("\x1f\x00")"#, chunk: 2)
        expectRefusal([0x28, 0xb5, 0x2f, 0x00], "28 b5 2f 00")
        expectRefusal(Array("\"q".utf8), #"22 71 ("\x22q")"#)
        expectRefusal([], "no data at all")
        expectRefusal([0x28, 0xb5], "too short to tell")
        // A zstd magic followed by garbage is the zstd decoder's to refuse.
        XCTAssertThrowsError(try decode([0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff], chunk: 10)) { error in
            guard case SluiceError.corruptData(let format, _, _)? = error as? SluiceError else { return XCTFail("\(error)") }
            XCTAssertEqual(format, "zstd")
        }
    }

    /// Cuts before, inside and after the magic number: the checkpoint names the codec once
    /// it is known, holds the bytes seen before, and resumes as that codec.
    func testCheckpointResumesAsTheChosenCodec() throws {
        let dir = try makeTemporaryDirectory(self)
        var rng = SeededRandom(seed: 4)
        for (name, compressed, plain) in try inputs(in: dir) {
            let points = [0, 1, 2, 3, 4, 5, 6, 9] + (0..<12).map { _ in Int.random(in: 0...compressed.count, using: &rng) }
            for cut in points {
                let sink = MemorySink()
                let first = try Decompressor(next: sink)
                try first.write(Array(compressed[0..<cut]))
                let checkpoint = try roundTripped(takeCut(first, offset: cut, spec: "read x | decompress | stdout"))
                let state = try XCTUnwrap(checkpoint.stages[0].as(DecompressState.self))
                XCTAssertEqual(state.position.input, UInt64(cut), "\(name) cut \(cut)")
                if state.codec == nil { XCTAssertEqual(state.seen, Data(compressed[0..<cut])) }
                let restoredSink = MemorySink(restoring: checkpoint.stages[1].as(StdoutSinkState.self), previous: sink.bytes)
                let second = try Decompressor(next: restoredSink, restoring: state)
                XCTAssertEqual(second.codec, state.codec)
                try second.write(Array(compressed[cut...]))
                try second.finish()
                XCTAssertTrue(restoredSink.bytes == plain, "\(name), cut at \(cut)")
            }
        }
    }

    func testEditedStatesAreRefused() throws {
        let refused: [DecompressState] = [
            DecompressState(codec: nil, seen: Data([0x50, 0x4b]), gunzip: nil, unzstd: nil),
            DecompressState(codec: nil, seen: Data([0x28, 0xb5, 0x2f, 0xfd]), gunzip: nil, unzstd: nil),
            DecompressState(codec: nil, seen: Data(repeating: 0x28, count: 9), gunzip: nil, unzstd: nil),
            DecompressState(codec: .zstd, seen: Data(), gunzip: nil, unzstd: nil),
            DecompressState(codec: .gzip, seen: Data([1]), gunzip: nil, unzstd: nil),
            DecompressState(codec: .xz, seen: Data(), gunzip: nil, unzstd: nil),
            DecompressState(codec: .gzip, seen: Data(), gunzip: nil, unxz: nil, unzstd: nil),
        ]
        for state in refused {
            XCTAssertThrowsError(try Decompressor(next: MemorySink(), restoring: state), "\(state)") { error in
                XCTAssertTrue(error is StateRejected, "\(error)")
            }
        }
    }

    private func expectRefusal(_ bytes: [UInt8], _ words: String, chunk: Int = 100, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try decode(bytes, chunk: chunk), file: file, line: line) { error in
            guard case SluiceError.corruptData(_, _, let reason)? = error as? SluiceError else {
                return XCTFail("\(error)", file: file, line: line)
            }
            XCTAssertTrue(reason.contains(words), "\(reason) — expected \(words)", file: file, line: line)
        }
    }
}
