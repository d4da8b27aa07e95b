import CCrypto

/// The SHA-256 midstate, field by field (never raw struct memory), so a checkpoint
/// means the same thing to any build that links a compatible libcrypto.
public struct SHA256State: StageStateValue {
    public static let stage = "verify"
    public var bytesHashed: UInt64
    /// The eight chaining words h0…h7.
    public var words: [UInt32]
    /// The bytes of the pending partial block (fewer than 64).
    public var partialBlock: [UInt8]

    public var position: StagePosition { StagePosition(input: bytesHashed, output: bytesHashed) }
}

/// `verify sha256:HEX`: passes bytes through unchanged; at the end of the stream the
/// digest must equal the expected one, or the stream fails with `checksumMismatch`.
public final class SHA256Verifier: ForwardingSink {
    public let expected: String
    private var context = SHA256_CTX()
    private var bytesHashed: UInt64 = 0
    public let next: ByteSink

    /// `expectedHex`: 64 hex digits, any case.
    public init(expectedHex: String, next: ByteSink, restoring state: SHA256State? = nil) throws {
        self.expected = expectedHex.lowercased()
        self.next = next
        SHA256_Init(&context)
        if let state { try restore(state) }
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        if bytes.count > 0 { SHA256_Update(&context, bytes.baseAddress, bytes.count) }
        bytesHashed &+= UInt64(bytes.count)
        try next.write(bytes)
    }

    public func finish() throws {
        var copy = context
        let actual = Self.finalHex(&copy)
        guard actual == expected else {
            throw SluiceError.checksumMismatch(expected: expected, actual: actual)
        }
        try next.finish()
    }

    /// The midstate after every byte written so far.
    public func snapshot() -> SHA256State {
        SHA256State(context: context, bytesHashed: bytesHashed)
    }

    private func restore(_ state: SHA256State) throws {
        guard let restored = SHA256_CTX(restoring: state) else {
            throw StateRejected("the SHA-256 state is malformed")
        }
        context = restored
        bytesHashed = state.bytesHashed
    }

    static func finalHex(_ ctx: inout SHA256_CTX) -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        SHA256_Final(&digest, &ctx)
        return hex(digest)
    }
}

/// Lowercase hex of `bytes`.
func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for b in bytes {
        out.append(digits[Int(b >> 4)])
        out.append(digits[Int(b & 15)])
    }
    return String(decoding: out, as: UTF8.self)
}

extension StageKind {
    static let verify = StageKind.transform(
        "verify",
        arguments: [
            StageArgument("sha256:HEX", "a digest, sha256:HEX") { text throws(StageWordError) in
                try "sha256:" + SHA256Verifier.parseDigest(text)
            }
        ],
        summary: "transform: passes bytes through; at the end the SHA-256 must equal HEX",
        cost: { _ in StageCost(nsPerByte: 1.0) }, state: SHA256State.self
    ) { spec, next, _, saved in
        try SHA256Verifier(expectedHex: String(spec.arguments[0].dropFirst("sha256:".count)), next: next, restoring: saved)
    }
}

extension SHA256Verifier {
    /// The 64 lowercase hex digits of `sha256:HEX` (any case). Only ASCII hex is a digest:
    /// `Character.isHexDigit` also accepts fullwidth digits.
    static func parseDigest(_ text: String) throws(StageWordError) -> String {
        guard text.lowercased().hasPrefix("sha256:") else {
            throw StageWordError("'\(text)' is not a digest; expected sha256:HEX (64 hex digits)")
        }
        let digits = text.utf8.dropFirst("sha256:".utf8.count)
        let isHex: (UInt8) -> Bool = { (0x30...0x39).contains($0) || (0x41...0x46).contains($0) || (0x61...0x66).contains($0) }
        guard digits.count == 64, digits.allSatisfy(isHex) else {
            let count = String(decoding: digits, as: UTF8.self).count
            throw StageWordError(
                "'\(text)' is not a SHA-256 digest: expected 64 hex digits, got \(count) characters\(digits.allSatisfy(isHex) ? "" : " with non-hex ones")")
        }
        return String(decoding: digits, as: UTF8.self).lowercased()
    }
}

extension SHA256State {
    /// The midstate of `context`, which has hashed `bytesHashed` bytes.
    init(context: SHA256_CTX, bytesHashed: UInt64) {
        var ctx = context
        words = withUnsafeBytes(of: &ctx.h) { Array($0.bindMemory(to: UInt32.self)) }
        let pending = Int(ctx.num)
        partialBlock = withUnsafeBytes(of: &ctx.data) { Array($0.prefix(pending)) }
        self.bytesHashed = bytesHashed
    }
}

extension SHA256_CTX {
    /// A context continuing from a saved midstate; nil when the state is malformed.
    init?(restoring state: SHA256State) {
        guard state.words.count == 8, state.partialBlock.count < 64,
            UInt64(state.partialBlock.count) == state.bytesHashed % 64
        else { return nil }
        self.init()
        SHA256_Init(&self)
        withUnsafeMutableBytes(of: &h) { raw in
            for (i, w) in state.words.enumerated() { raw.storeBytes(of: w, toByteOffset: i * 4, as: UInt32.self) }
        }
        withUnsafeMutableBytes(of: &data) { raw in
            for (i, b) in state.partialBlock.enumerated() { raw[i] = b }
        }
        let bits = state.bytesHashed &* 8
        Nl = UInt32(truncatingIfNeeded: bits)
        Nh = UInt32(truncatingIfNeeded: bits >> 32)
        num = UInt32(state.partialBlock.count)
    }
}
