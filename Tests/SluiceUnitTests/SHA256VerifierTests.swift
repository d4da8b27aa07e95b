import CCrypto
import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

final class SHA256VerifierTests: XCTestCase {
    /// FIPS 180-2 / NIST example vectors.
    func testNISTVectors() throws {
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        let vectors: [([UInt8], String)] = [
            ([], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            (Array("abc".utf8), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (
                Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8),
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
            ),
            (million, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        ]
        for (message, expected) in vectors {
            let sink = MemorySink()
            let verifier = try SHA256Verifier(expectedHex: expected.uppercased(), next: sink)
            // Odd-sized writes, to cross block boundaries everywhere.
            var i = 0
            while i < message.count {
                let end = min(message.count, i + 997)
                try verifier.write(Array(message[i..<end]))
                i = end
            }
            XCTAssertNoThrow(try verifier.finish(), "digest of \(message.count) bytes")
            XCTAssertEqual(sink.bytes, message, "passes bytes through unchanged")
        }
    }

    func testMismatchCarriesBothDigests() throws {
        let verifier = try SHA256Verifier(expectedHex: String(repeating: "0", count: 64), next: MemorySink())
        try verifier.write(Array("abc".utf8))
        XCTAssertThrowsError(try verifier.finish()) { error in
            XCTAssertEqual(
                error as? SluiceError,
                .checksumMismatch(
                    expected: String(repeating: "0", count: 64),
                    actual: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        }
    }

    func testMatchesOpenSSLCommandOnRandomData() throws {
        let dir = try makeTemporaryDirectory(self)
        let path = dir + "/random.bin"
        try shell("head -c 3000001 /dev/urandom > '\(path)'")
        let expected = try shell("openssl dgst -sha256 -r '\(path)' | cut -d' ' -f1", capture: true)
            .output.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(expected.count, 64)
        let data = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let verifier = try SHA256Verifier(expectedHex: expected, next: MemorySink())
        try verifier.write(data)
        XCTAssertNoThrow(try verifier.finish())
    }

    /// The midstate survives encode/decode at every awkward length (partial blocks pending).
    func testMidstateRestoresAtAnyLength() throws {
        let data = makeTestData(count: 400_000, seed: 3)
        let expected = sha256(data)
        for n in [0, 1, 55, 56, 63, 64, 65, 99, 12345, 300_001, 399_999] {
            let first = try SHA256Verifier(expectedHex: expected, next: MemorySink())
            try first.write(Array(data[0..<n]))
            let encoded = try JSONEncoder().encode(first.snapshot())
            let state = try JSONDecoder().decode(SHA256State.self, from: encoded)
            XCTAssertEqual(state.partialBlock.count, n % 64)
            let second = try SHA256Verifier(expectedHex: expected, next: MemorySink(), restoring: state)
            try second.write(Array(data[n...]))
            XCTAssertNoThrow(try second.finish(), "restored after \(n) bytes")
        }
    }

    func testMalformedMidstateIsRefused() throws {
        let bad = SHA256State(bytesHashed: 10, words: [1, 2, 3], partialBlock: [])
        XCTAssertThrowsError(try SHA256Verifier(expectedHex: String(repeating: "a", count: 64), next: MemorySink(), restoring: bad))
    }
}
