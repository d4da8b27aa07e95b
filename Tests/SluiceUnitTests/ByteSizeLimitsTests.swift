import XCTest
@testable import Sluice

/// The edges of size parsing that `ByteSizeTests` (in StageRegistryTests) leaves out: every
/// unit, the largest size, every way to overflow 64 bits, and near-misses of the syntax.
final class ByteSizeLimitsTests: XCTestCase {
    func testEveryUnit() {
        let cases: [(String, UInt64)] = [
            ("1B", 1), ("512K", 512 << 10), ("512KiB", 512 << 10), ("1kib", 1 << 10), ("8M", 8 << 20), ("1GiB", 1 << 30),
            ("2T", 2 << 40), ("2TiB", 2 << 40), ("1KB", 1_000), ("3MB", 3_000_000), ("1TB", 1_000_000_000_000),
            ("007", 7), ("18446744073709551615", .max), ("15TiB", 15 << 40),
        ]
        for (text, expected) in cases {
            XCTAssertEqual(ByteSize.parse(text), expected, text)
        }
    }

    func testOverflowIsRefused() {
        for text in [
            "99999999999999999999GiB", "18446744073709551616", "18446744073709551616B", "18446744073709552KB",
            "17592186044416MiB", "99999999999999999999999999999999999999",
        ] {
            XCTAssertNil(ByteSize.parse(text), text)
        }
    }

    func testNearMissesAreRefused() {
        for text in ["K", " 8MiB", "8MiB ", "8 MiB", "8Mi", "8PiB", "0x10", "１２", "8MiBMiB", "MiB8", "8_000", "1e6"] {
            XCTAssertNil(ByteSize.parse(text), "'\(text)'")
        }
    }
}
