import CCrypto

/// The SHA-256 midstate, field by field (never raw struct memory), so a checkpoint
/// means the same thing to any build that links a compatible libcrypto.
public struct SHA256State: Codable, Sendable, Equatable {
    public var bytesHashed: UInt64
    /// The eight chaining words h0…h7.
    public var words: [UInt32]
    /// The bytes of the pending partial block (fewer than 64).
    public var partialBlock: [UInt8]
}

/// `verify sha256:HEX`: passes bytes through unchanged; at the end of the stream the
/// digest must equal the expected one, or the stream fails with `checksumMismatch`.
public final class SHA256Verifier: ByteSink {
    public let expected: String
    private var context = SHA256_CTX()
    private var bytesHashed: UInt64 = 0
    private let next: ByteSink

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

    public func barrier(_ cut: Cut) throws {
        cut.record(.verify(snapshot()))
        try next.barrier(cut)
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
        var ctx = context
        let words = withUnsafeBytes(of: &ctx.h) { Array($0.bindMemory(to: UInt32.self)) }
        let pending = Int(ctx.num)
        let partial = withUnsafeBytes(of: &ctx.data) { Array($0.prefix(pending)) }
        return SHA256State(bytesHashed: bytesHashed, words: words, partialBlock: partial)
    }

    private func restore(_ state: SHA256State) throws {
        guard state.words.count == 8, state.partialBlock.count < 64,
              UInt64(state.partialBlock.count) == state.bytesHashed % 64 else {
            throw SluiceError.checkpointRefused(path: "(verify stage)", reason: "the SHA-256 state is malformed")
        }
        withUnsafeMutableBytes(of: &context.h) { raw in
            for (i, w) in state.words.enumerated() { raw.storeBytes(of: w, toByteOffset: i * 4, as: UInt32.self) }
        }
        withUnsafeMutableBytes(of: &context.data) { raw in
            for (i, b) in state.partialBlock.enumerated() { raw[i] = b }
        }
        let bits = state.bytesHashed &* 8
        context.Nl = UInt32(truncatingIfNeeded: bits)
        context.Nh = UInt32(truncatingIfNeeded: bits >> 32)
        context.num = UInt32(state.partialBlock.count)
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
