#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// The gzip decoder's state at a cut: where in which member it stands. Its fields are the
/// decoder's own; a checkpoint carries them as JSON (docs/ARCHITECTURE.md).
public struct GzipState: StageStateValue {
    public static let stage = "gunzip"
    enum Phase: String, Codable, Sendable {
        /// Between members (or before the first): the next byte must start a member.
        case between
        case header, deflate, trailer
        /// Zero bytes after the last member (tape padding); gzip accepts them, so do we.
        case padding
    }
    var engine: InflateEngineKind
    var phase: Phase
    /// Compressed bytes consumed, and decompressed bytes delivered, over the whole stream.
    var compressedOffset: UInt64
    var outputOffset: UInt64
    var membersDone: Int
    /// The current member's running CRC-32 and length (ISIZE is this mod 2^32).
    var memberCrc: UInt32
    var memberLength: UInt64
    var header: GzipHeaderParser?
    var trailer: [UInt8]?
    var deflate: DeflateState?

    public var position: StagePosition { StagePosition(input: compressedOffset, output: outputOffset) }
}

/// `gunzip`: decompresses gzip (RFC 1952) — multi-member streams, every header field,
/// members over 4 GiB — checking each member's CRC-32 and ISIZE. The header and trailer
/// are parsed here; the deflate data goes to a `DeflateEngine`.
///
/// The decoder is a small state machine: `phase` holds where it stands and what that
/// phase needs; `advance` consumes what the phase can take and decides the next one.
public final class GzipDecoder: ByteSink {
    public let engineKind: InflateEngineKind
    private let next: ByteSink
    private let output: MemberOutput
    private let tracksState: Bool
    private var phase: Phase = .between
    private var compressedOffset: UInt64 = 0
    private var membersDone = 0
    /// The ISA-L engine of the last member, reset for the next one instead of made anew:
    /// making one (allocating and zeroing its state and guard zone) cost ~20 µs, which a
    /// file of 500,000 empty members turned into 10 s.
    private var spareIsal: IsalInflater?

    /// Where the decoder stands, with each phase's own state.
    private enum Phase {
        /// Between members (or before the first): the next byte must start a member.
        case between
        case header(GzipHeaderParser)
        case deflate(DeflateEngine)
        /// The member trailer's bytes so far (CRC-32, ISIZE; 8 in all).
        case trailer([UInt8])
        /// Zero bytes after the last member (tape padding); gzip accepts them, so do we.
        case padding
    }

    /// - Parameter resumable: false when no checkpoint will ever be asked for; lets the
    ///   zlib engine skip tracking its restart points.
    public init(
        engine: InflateEngineKind = .fastest, next: ByteSink,
        resumable: Bool = true, restoring state: GzipState? = nil
    ) throws {
        self.engineKind = engine
        self.next = next
        let crc32: (UInt32, UnsafeRawBufferPointer) -> UInt32
        switch engine {
        case .isal: crc32 = IsalInflater.crc32
        case .zlib: crc32 = ZlibInflater.crc32
        }
        self.output = MemberOutput(next: next, crc32: crc32)
        self.tracksState = resumable || state != nil
        if let state { try restore(state) }
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        var rest = bytes
        while !rest.isEmpty {
            let used: Int
            do {
                used = try advance(rest)
            } catch let error as GzipFormatError {
                throw SluiceError.corruptData(format: "gzip", offset: compressedOffset, reason: error.reason)
            }
            compressedOffset &+= UInt64(used)
            rest = UnsafeRawBufferPointer(rebasing: rest[used...])
        }
    }

    /// What the byte after a member (or the stream's first byte) starts.
    enum MemberBoundary: Equatable {
        case member, padding, garbage

        static func decide(nextByte: UInt8, membersDone: Int) -> MemberBoundary {
            // The first member's header parser reports a bad magic itself.
            if membersDone == 0 || nextByte == 0x1f { return .member }
            return nextByte == 0 ? .padding : .garbage
        }
    }

    /// Consumes what the current phase takes from the front of `input` (which is not
    /// empty), moving to the next phase when this one is complete. Returns the bytes used.
    private func advance(_ input: UnsafeRawBufferPointer) throws -> Int {
        switch phase {
        case .between:
            switch MemberBoundary.decide(nextByte: input[0], membersDone: membersDone) {
            case .member: phase = .header(GzipHeaderParser())
            case .padding: phase = .padding
            case .garbage: throw GzipFormatError("trailing garbage after gzip member \(membersDone)")
            }
            return 0
        case .header(var header):
            let used = try header.consume(input)
            phase = header.isDone ? .deflate(try makeEngine()) : .header(header)
            if header.isDone { output.startMember() }
            return used
        case .deflate(let engine):
            defer { output.giveBack() }
            switch try engine.inflate(input, into: output) {
            case .needsInput(let consumed):
                guard consumed > 0 else { throw GzipFormatError("the inflate engine made no progress") }
                return consumed
            case .finished(let consumed, let overread):
                spareIsal = engine as? IsalInflater
                try takeTrailer(overread)
                return consumed
            }
        case .trailer(var trailer):
            let used = min(8 - trailer.count, input.count)
            trailer.append(contentsOf: input[0..<used])
            try takeTrailer(trailer)
            return used
        case .padding:
            guard let nonzero = input.firstIndex(where: { $0 != 0 }) else { return input.count }
            guard nonzero == 0 else { return nonzero }
            throw GzipFormatError("trailing garbage after the zero padding that follows gzip member \(membersDone)")
        }
    }

    /// Holds the trailer bytes seen so far; checks the member once all 8 are there.
    private func takeTrailer(_ trailer: [UInt8]) throws {
        guard trailer.count >= 8 else {
            phase = .trailer(trailer)
            return
        }
        let storedCRC = littleEndian32(trailer, at: 0)
        let storedSize = littleEndian32(trailer, at: 4)
        let member = membersDone.addingReportingOverflow(1)
        let number = member.overflow ? "after \(membersDone)" : "\(member.partialValue)"
        guard storedCRC == output.memberCRC else {
            throw GzipFormatError("CRC-32 mismatch in member \(number) (stored \(hex32(storedCRC)), computed \(hex32(output.memberCRC)))")
        }
        guard storedSize == UInt32(truncatingIfNeeded: output.memberLength) else {
            throw GzipFormatError("length mismatch in member \(number) (ISIZE \(storedSize), decoded \(Counted.bytes(output.memberLength)))")
        }
        guard !member.overflow else { throw GzipFormatError("too many gzip members") }
        membersDone = member.partialValue
        phase = .between
    }

    public func barrier(_ cut: Cut) throws {
        cut.record(snapshot())
        try next.barrier(cut)
    }

    public func finish() throws {
        let whereItStopped: String
        switch phase {
        case .between, .padding:
            guard membersDone == 0 else { return try next.finish() }
            whereItStopped = "no gzip data at all"
        case .header: whereItStopped = "the stream ends inside a member header"
        case .deflate: whereItStopped = "the stream ends inside compressed data (truncated member)"
        case .trailer: whereItStopped = "the stream ends inside a member trailer"
        }
        throw SluiceError.corruptData(format: "gzip", offset: compressedOffset, reason: "unexpected end of data: \(whereItStopped)")
    }

    /// The decoder's exact state after every byte written so far.
    public func snapshot() -> GzipState {
        var state = GzipState(
            engine: engineKind, phase: .between, compressedOffset: compressedOffset,
            outputOffset: output.total, membersDone: membersDone,
            memberCrc: output.memberCRC, memberLength: output.memberLength)
        switch phase {
        case .between: break
        case .padding: state.phase = .padding
        case .header(let header):
            state.phase = .header
            state.header = header
        case .deflate(let engine):
            state.phase = .deflate
            state.deflate = engine.snapshot()
        case .trailer(let trailer):
            state.phase = .trailer
            state.trailer = trailer
        }
        return state
    }

    /// Takes over a checkpoint's state, checking every field first: a checkpoint is input.
    private func restore(_ state: GzipState) throws {
        guard state.engine == engineKind else {
            throw StateRejected(
                "it was made by the \(state.engine.rawValue) inflate engine, this run uses \(engineKind.rawValue) (pass --engine \(state.engine.rawValue) to resume it)"
            )
        }
        // Counters that later arithmetic adds to: far beyond anything a real run reaches.
        let limit = UInt64(Int64.max)
        guard (0..<Int.max).contains(state.membersDone), state.compressedOffset <= limit, state.outputOffset <= limit,
            state.memberLength <= state.outputOffset
        else {
            throw malformed("a counter is out of range")
        }
        compressedOffset = state.compressedOffset
        membersDone = state.membersDone
        output.restore(crc: state.memberCrc, length: state.memberLength, total: state.outputOffset)
        switch state.phase {
        case .between: phase = .between
        case .padding: phase = .padding
        case .header:
            guard let h = state.header, h.isPlausible else { throw malformed("header state missing or out of range") }
            phase = .header(h)
        case .trailer:
            guard let t = state.trailer, t.count < 8 else { throw malformed("trailer state missing") }
            phase = .trailer(t)
        case .deflate:
            guard let d = state.deflate else { throw malformed("inflate state missing") }
            do {
                phase = .deflate(try makeEngine(restoring: d, memberLength: state.memberLength))
            } catch let error as GzipFormatError {
                throw malformed("its saved compressed bytes do not inflate: \(error.reason)")
            }
        }
    }

    private func makeEngine() throws -> DeflateEngine {
        switch engineKind {
        case .zlib: return try ZlibInflater(tracksBoundaries: tracksState)
        case .isal:
            if let spare = spareIsal {
                spareIsal = nil
                spare.reset()
                return spare
            }
            return try IsalInflater()
        }
    }

    private func makeEngine(restoring state: DeflateState, memberLength: UInt64) throws -> DeflateEngine {
        switch (engineKind, state) {
        case (.zlib, .zlib(let point)): return try ZlibInflater(restoring: point)
        case (.isal, .isal(let saved)): return try IsalInflater(restoring: saved, memberLength: memberLength)
        default: throw malformed("its inflate state belongs to the \(state.engine.rawValue) engine")
        }
    }

    private func malformed(_ what: String) -> StateRejected {
        StateRejected("the gzip state is malformed: \(what)")
    }
}

private func littleEndian32(_ bytes: [UInt8], at i: Int) -> UInt32 {
    UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
}

private func hex32(_ value: UInt32) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 8 - digits.count) + digits
}

/// Where a member's output goes: the next stage's own buffer when it lends one (a
/// relay), else a buffer of ours that is then written. Keeps the member's running CRC-32
/// and length, and the stream's total.
private final class MemberOutput: InflateOutput {
    private enum Destination {
        case own(UnsafeMutableRawBufferPointer, ByteSink)
        case lender(BufferLendingSink)
    }
    private let destination: Destination
    /// A buffer borrowed from the lender and not yet filled.
    private var borrowed: UnsafeMutableRawBufferPointer?
    private let crc32: (UInt32, UnsafeRawBufferPointer) -> UInt32
    private(set) var memberCRC: UInt32 = 0
    private(set) var memberLength: UInt64 = 0
    private(set) var total: UInt64 = 0

    init(next: ByteSink, crc32: @escaping (UInt32, UnsafeRawBufferPointer) -> UInt32, size: Int = 256 * 1024) {
        if let lender = next as? BufferLendingSink {
            destination = .lender(lender)
        } else {
            destination = .own(.allocate(byteCount: size, alignment: 64), next)
        }
        self.crc32 = crc32
    }

    deinit {
        if case .own(let buffer, _) = destination { buffer.deallocate() }
    }

    func startMember() {
        memberCRC = 0
        memberLength = 0
    }

    func restore(crc: UInt32, length: UInt64, total: UInt64) {
        memberCRC = crc
        memberLength = length
        self.total = total
    }

    func room() throws -> UnsafeMutableRawBufferPointer {
        switch destination {
        case .own(let buffer, _): return buffer
        case .lender(let lender):
            if let borrowed { return borrowed }
            let buffer = try lender.borrowBuffer()
            borrowed = buffer
            return buffer
        }
    }

    func filled(_ count: Int) throws {
        guard count > 0 else { return }
        switch destination {
        case .own(let buffer, let next):
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            account(bytes)
            try next.write(bytes)
        case .lender(let lender):
            guard let buffer = borrowed else { return }
            account(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            borrowed = nil
            lender.commitBorrowed(count)
        }
    }

    /// Returns an unfilled borrowed buffer, so none is held between writes.
    func giveBack() {
        guard borrowed != nil, case .lender(let lender) = destination else { return }
        borrowed = nil
        lender.commitBorrowed(0)
    }

    private func account(_ bytes: UnsafeRawBufferPointer) {
        memberCRC = crc32(memberCRC, bytes)
        memberLength &+= UInt64(bytes.count)
        total &+= UInt64(bytes.count)
    }

}

extension StageKind {
    static let gunzip = StageKind.transform(
        "gunzip", summary: "transform: gzip decompression (multi-member, CRC-32 and ISIZE checked)",
        cost: { options in StageCost(nsPerByte: (options.engine == .isal ? 1.1 : 3.0) * 3, expansion: 3) },
        state: GzipState.self
    ) { _, next, context, saved in
        // Without checkpoints the zlib engine need not track its restart points.
        try GzipDecoder(
            engine: context.options.engine, next: next,
            resumable: saved != nil || context.options.checkpointInterval > 0, restoring: saved)
    }
}
