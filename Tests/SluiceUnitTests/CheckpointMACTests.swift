import CCrypto
import Foundation
import XCTest

@testable import Sluice

/// The checkpoint MAC is HMAC-SHA256 written on the low-level SHA-256 calls (OpenSSL's own
/// HMAC costs a run its provider machinery): the same digests as RFC 4231 and as OpenSSL.
final class CheckpointMACTests: XCTestCase {
    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }

    func testRFC4231Vectors() {
        let cases: [(key: [UInt8], data: String, mac: String)] = [
            ([UInt8](repeating: 0x0B, count: 20), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (Array("Jefe".utf8), "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            // A key longer than SHA-256's 64-byte block is hashed first.
            (
                [UInt8](repeating: 0xAA, count: 131), "Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
            ),
        ]
        for (key, data, mac) in cases {
            XCTAssertEqual(hex(CheckpointKey(bytes: key).mac(Array(data.utf8))), mac, data)
        }
    }

    func testPartsGiveOpenSSLsDigestOfTheWhole() {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<50 {
            let key = (0..<(round % 3 == 0 ? 32 : Int.random(in: 0...100, using: &generator))).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            let parts = (0..<Int.random(in: 0...5, using: &generator)).map { _ in
                Data((0..<Int.random(in: 0...3000, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            }
            let whole = parts.flatMap { Array($0) }
            var expected = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
            var length: UInt32 = 0
            _ = HMAC(EVP_sha256(), key, Int32(key.count), whole, whole.count, &expected, &length)
            XCTAssertEqual(CheckpointKey(bytes: key).mac(parts: parts), Array(expected.prefix(Int(length))), "round \(round)")
        }
    }
}
