import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// A stream that needs more memory than its stage allows is not damaged data: it is
/// `SluiceError.limitExceeded`, naming what is needed, the limit and the option that sets
/// it — with the exit status of damaged data (5), and its partial output removed.
final class DecoderLimitTests: XCTestCase {
    func testAnXzDictionaryOverMemlimitSaysWhatItNeeds() throws {
        let dir = try makeTemporaryDirectory(self)
        let plain = makeTestData(count: 10_000, seed: 7)
        let xz = try XzTool.compress(plain, options: "--lzma2=dict=64MiB", dir: dir)
        for stage in ["unxz memlimit=32MiB", "decompress memlimit=32MiB"] {
            let error = try run(xz, through: stage, dir: dir)
            XCTAssertEqual(
                error, .limitExceeded(format: "xz", offset: 13, what: "dictionary", needed: 64 << 20, limit: 32 << 20, option: "memlimit"),
                stage)
            XCTAssertEqual(
                error?.description,
                "xz data at byte 13 of the xz stream needs a dictionary of 64 MiB, over the limit of 32 MiB (memlimit=SIZE raises it)")
            XCTAssertEqual(error?.exitCode, 5)
            XCTAssertEqual(error?.discardsPartialOutput, true)
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/out"), stage)
        }
        XCTAssertNil(try run(xz, through: "unxz memlimit=64MiB", dir: dir), "the limit raised, the same stream decodes")
    }

    func testAZstdWindowOverMemlimitSaysWhatItNeeds() throws {
        let dir = try makeTemporaryDirectory(self)
        let zst = try zstdCompress(makeTestData(count: 300_000, seed: 4), "-9", in: dir)
        for stage in ["unzstd memlimit=64KiB", "decompress memlimit=64KiB"] {
            let error = try run(zst, through: stage, dir: dir)
            guard case .limitExceeded("zstd", 4, "window", let needed, 64 << 10, "memlimit")? = error else {
                XCTFail("\(stage): \(String(describing: error))")
                continue
            }
            XCTAssertGreaterThan(needed, 64 << 10)
            XCTAssertEqual(error?.exitCode, 5)
            XCTAssertEqual(
                error?.description,
                "zstd data at byte 4 of the zstd stream needs a window of \(ByteSize.text(needed)), over the limit of 64 KiB"
                    + " (memlimit=SIZE raises it)")
        }
        // A header that asks for a 2 TiB window, against the default limit (128 MiB).
        let huge: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xf8, 0x01, 0x00, 0x00]
        XCTAssertEqual(
            try run(huge, through: "unzstd", dir: dir),
            .limitExceeded(format: "zstd", offset: 4, what: "window", needed: 2 << 40, limit: 128 << 20, option: "memlimit"))
    }

    func testSizesAreWrittenAsAUserWouldWriteThem() {
        let table: [(UInt64, String)] = [
            (1, "1 byte"), (1000, "1000 bytes"), (1 << 10, "1 KiB"), (65 << 10, "65 KiB"), (64 << 20, "64 MiB"),
            (3 << 30, "3 GiB"), (2 << 40, "2 TiB"), ((1 << 20) + 1, "1048577 bytes"), (UInt64.max, "18446744073709551615 bytes"),
        ]
        for (bytes, text) in table {
            XCTAssertEqual(ByteSize.text(bytes), text)
            XCTAssertEqual(
                ByteSize.parse(
                    text.replacingOccurrences(of: " ", with: "").replacingOccurrences(of: "bytes", with: "").replacingOccurrences(of: "byte", with: "")), bytes)
        }
    }

    /// Runs `read IN | STAGE | file out` in-process; the error it ends with, if any.
    private func run(_ input: [UInt8], through stage: String, dir: String) throws -> SluiceError? {
        try Data(input).write(to: URL(fileURLWithPath: dir + "/in"))
        unlink(dir + "/out")
        let pipeline = try Pipeline("read \(dir)/in | \(stage) | file \(dir)/out")
        do {
            try pipeline.run()
            return nil
        } catch {
            return error
        }
    }
}
