import Foundation

/// The gzip decoder's state at a cut: where in which member it stands.
public struct GzipState: StageStateValue {
    public static let stage = "gunzip"
    public enum Phase: String, Codable, Sendable {
        /// Between members (or before the first): the next byte must start a member.
        case between
        case header, deflate, trailer
        /// Zero bytes after the last member (tape padding); gzip accepts them, so do we.
        case padding
    }
    public var engine: InflateEngineKind
    public var phase: Phase
    /// Compressed bytes consumed, and decompressed bytes delivered, over the whole stream.
    public var compressedOffset: UInt64
    public var outputOffset: UInt64
    public var membersDone: Int
    /// The current member's running CRC-32 and length (ISIZE is this mod 2^32).
    public var memberCrc: UInt32
    public var memberLength: UInt64
    public var header: GzipHeaderParser?
    public var trailer: [UInt8]?
    public var deflate: DeflateState?

    public var position: StagePosition { StagePosition(input: compressedOffset, output: outputOffset) }
}

/// `gunzip`: decompresses gzip (RFC 1952) — multi-member streams, every header field,
/// members over 4 GiB — checking each member's CRC-32 and ISIZE. The header and trailer
/// are parsed here; the deflate data goes to a `DeflateEngine`.
public final class GzipDecoder: ByteSink {
    public let engineKind: InflateEngineKind
    private let next: ByteSink
    private let output: DecoderOutput
    private let tracksState: Bool
    private var phase: GzipState.Phase = .between
    private var compressedOffset: UInt64 = 0
    private var outputOffset: UInt64 = 0
    private var membersDone = 0
    private var memberCRC: UInt32 = 0
    private var memberLength: UInt64 = 0
    private var header = GzipHeaderParser()
    private var trailer: [UInt8] = []
    private var engine: DeflateEngine?
    /// Bytes the engine read past its stream's end in an earlier call; parsed next.
    private var carry: [UInt8] = []

    /// - Parameter resumable: false when no checkpoint will ever be asked for; lets the
    ///   zlib engine skip tracking its restart points.
    public init(engine: InflateEngineKind = .fastest, next: ByteSink,
                resumable: Bool = true, restoring state: GzipState? = nil) throws {
        self.engineKind = engine
        self.next = next
        self.output = DecoderOutput(next: next)
        self.tracksState = resumable || state != nil
        if let state { try restore(state) }
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        var rest = bytes
        while !rest.isEmpty {
            let used: Int
            do {
                used = try step(rest)
            } catch let error as GzipFormatError {
                throw SluiceError.corruptData(format: "gzip", offset: compressedOffset, reason: error.reason)
            }
            compressedOffset &+= UInt64(used)
            rest = UnsafeRawBufferPointer(rebasing: rest[used...])
            if !carry.isEmpty {
                let bytes = carry
                carry = []
                compressedOffset &-= UInt64(bytes.count)
                try bytes.withUnsafeBytes { try write($0) }
            }
        }
    }

    /// Advances through one phase; returns the bytes of `input` it consumed.
    private func step(_ input: UnsafeRawBufferPointer) throws -> Int {
        switch phase {
        case .between:
            if input[0] == 0 && membersDone > 0 {
                phase = .padding
                return 0
            }
            guard input[0] == 0x1f || membersDone == 0 else {
                throw GzipFormatError("trailing garbage after gzip member \(membersDone)")
            }
            header = GzipHeaderParser()
            phase = .header
            return 0
        case .header:
            let used = try header.consume(input)
            if header.isDone { try startMember() }
            return used
        case .deflate:
            output.engine = engine
            output.memberCRC = memberCRC
            defer {
                output.giveBack()
                memberCRC = output.memberCRC
                memberLength &+= output.produced
                outputOffset &+= output.produced
                output.produced = 0
            }
            let result = try engine!.inflate(input, into: output)
            if result.finished {
                carry = engine!.overread
                engine = nil
                trailer.removeAll(keepingCapacity: true)
                phase = .trailer
            }
            return result.consumed
        case .padding:
            guard let nonzero = input.firstIndex(where: { $0 != 0 }) else { return input.count }
            guard nonzero == 0 else { return nonzero }
            throw GzipFormatError("trailing garbage after the zero padding that follows gzip member \(membersDone)")
        case .trailer:
            let used = min(8 - trailer.count, input.count)
            trailer.append(contentsOf: input[0..<used])
            if trailer.count == 8 { try checkTrailer() }
            return used
        }
    }

    private func startMember() throws {
        engine = try makeEngine(restoring: nil)
        memberCRC = 0
        memberLength = 0
        phase = .deflate
    }

    private func checkTrailer() throws {
        let storedCRC = littleEndian32(trailer, at: 0)
        let storedSize = littleEndian32(trailer, at: 4)
        guard storedCRC == memberCRC else {
            throw GzipFormatError("CRC-32 mismatch in member \(membersDone + 1) (stored \(hex32(storedCRC)), computed \(hex32(memberCRC)))")
        }
        guard storedSize == UInt32(truncatingIfNeeded: memberLength) else {
            throw GzipFormatError("length mismatch in member \(membersDone + 1) (ISIZE \(storedSize), decoded \(memberLength) bytes)")
        }
        membersDone += 1
        phase = .between
    }

    public func barrier(_ cut: Cut) throws {
        cut.record(snapshot())
        try next.barrier(cut)
    }

    public func finish() throws {
        guard phase == .between || phase == .padding, membersDone > 0 else {
            let whereItStopped: String
            switch phase {
            case .between, .padding: whereItStopped = "no gzip data at all"
            case .header: whereItStopped = "the stream ends inside a member header"
            case .deflate: whereItStopped = "the stream ends inside compressed data (truncated member)"
            case .trailer: whereItStopped = "the stream ends inside a member trailer"
            }
            throw SluiceError.corruptData(format: "gzip", offset: compressedOffset, reason: "unexpected end of data: \(whereItStopped)")
        }
        try next.finish()
    }

    /// The decoder's exact state after every byte written so far.
    public func snapshot() -> GzipState {
        GzipState(engine: engineKind, phase: phase, compressedOffset: compressedOffset,
                  outputOffset: outputOffset, membersDone: membersDone,
                  memberCrc: memberCRC, memberLength: memberLength,
                  header: phase == .header ? header : nil,
                  trailer: phase == .trailer ? trailer : nil,
                  deflate: phase == .deflate ? engine?.snapshot() : nil)
    }

    private func restore(_ state: GzipState) throws {
        guard state.engine == engineKind else {
            throw SluiceError.checkpointRefused(
                path: "(gunzip stage)",
                reason: "it was made by the \(state.engine.rawValue) inflate engine, this run uses \(engineKind.rawValue) (pass --engine \(state.engine.rawValue) to resume it)")
        }
        phase = state.phase
        compressedOffset = state.compressedOffset
        outputOffset = state.outputOffset
        membersDone = state.membersDone
        memberCRC = state.memberCrc
        memberLength = state.memberLength
        switch phase {
        case .between, .padding: break
        case .header:
            guard let h = state.header, h.isPlausible else { throw malformed("header state missing or out of range") }
            header = h
        case .trailer:
            guard let t = state.trailer, t.count < 8 else { throw malformed("trailer state missing") }
            trailer = t
        case .deflate:
            guard let d = state.deflate else { throw malformed("inflate state missing") }
            do {
                engine = try makeEngine(restoring: d)
            } catch let error as GzipFormatError {
                throw malformed("its saved compressed bytes do not inflate: \(error.reason)")
            }
        }
    }

    private func makeEngine(restoring state: DeflateState?) throws -> DeflateEngine {
        switch engineKind {
        case .zlib:
            if let state { return try ZlibInflater(restoring: state) }
            return try ZlibInflater(tracksBoundaries: tracksState)
        case .isal:
            if let state { return try IsalInflater(restoring: state) }
            return try IsalInflater()
        }
    }

    private func malformed(_ what: String) -> SluiceError {
        .checkpointRefused(path: "(gunzip stage)", reason: "the gzip state is malformed: \(what)")
    }
}

private func littleEndian32(_ bytes: [UInt8], at i: Int) -> UInt32 {
    UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
}

private func hex32(_ value: UInt32) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 8 - digits.count) + digits
}

/// Hands an engine room to decode into — the next stage's own buffer when it lends one
/// (a relay), else a buffer of ours that is then written — and checks what it produced.
private final class DecoderOutput: InflateOutput {
    private let next: ByteSink
    private let lender: BufferLendingSink?
    private let own: UnsafeMutableRawBufferPointer?
    private var borrowed: UnsafeMutableRawBufferPointer?
    weak var engine: DeflateEngine?
    var memberCRC: UInt32 = 0
    var produced: UInt64 = 0

    init(next: ByteSink, size: Int = 256 * 1024) {
        self.next = next
        lender = next as? BufferLendingSink
        own = lender == nil ? .allocate(byteCount: size, alignment: 64) : nil
    }

    deinit { own?.deallocate() }

    func room() throws -> UnsafeMutableRawBufferPointer {
        if let own { return own }
        if let borrowed { return borrowed }
        let buffer = try lender!.borrowBuffer()
        borrowed = buffer
        return buffer
    }

    func filled(_ count: Int) throws {
        guard count > 0 else { return }
        let bytes = UnsafeRawBufferPointer(rebasing: (own ?? borrowed!)[0..<count])
        memberCRC = engine!.crc32(memberCRC, bytes)
        produced &+= UInt64(count)
        if let lender {
            borrowed = nil
            lender.commitBorrowed(count)
        } else {
            try next.write(bytes)
        }
    }

    /// Returns an unfilled borrowed buffer, so none is held between writes.
    func giveBack() {
        if borrowed != nil {
            borrowed = nil
            lender!.commitBorrowed(0)
        }
    }
}

extension StageKind {
    static let gunzip = StageKind.transform(
        "gunzip", summary: "transform: gzip decompression (multi-member, CRC-32 and ISIZE checked)",
        cost: { options in StageCost(nsPerByte: (options.engine == .isal ? 1.1 : 3.0) * 3, expansion: 3) },
        state: GzipState.self
    ) { _, next, context, saved in
        // Without checkpoints the zlib engine need not track its restart points.
        try GzipDecoder(engine: context.options.engine, next: next,
                        resumable: saved != nil || context.options.checkpointInterval > 0, restoring: saved)
    }
}
