#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// The `decompress` stage's state: the codec it chose and that decoder's state, or —
/// before enough bytes arrived to tell — the bytes seen so far.
public struct DecompressState: StageStateValue {
    public static let stage = "decompress"
    public var codec: Decompressor.Codec?
    /// The first bytes, while the codec is not known yet (fewer than 6).
    public var seen: Data
    public var gunzip: GzipState?
    public var unxz: XzState?
    public var unzstd: ZstdState?

    public var position: StagePosition {
        switch codec {
        case .gzip: return gunzip?.position ?? StagePosition(input: 0, output: 0)
        case .xz: return unxz?.position ?? StagePosition(input: 0, output: 0)
        case .zstd: return unzstd?.position ?? StagePosition(input: 0, output: 0)
        case nil: return StagePosition(input: UInt64(seen.count), output: 0)
        }
    }
}

/// `decompress`: reads the first bytes and becomes `gunzip`, `unxz` or `unzstd` by their
/// magic number; anything else is refused, naming the bytes it saw.
public final class Decompressor: ForwardingSink {
    public enum Codec: String, Codable, Sendable {
        case gzip, xz, zstd
        /// The stage this codec is decoded by.
        public var stage: String {
            switch self {
            case .gzip: return "gunzip"
            case .xz: return "unxz"
            case .zstd: return "unzstd"
            }
        }
    }

    /// Magic numbers; a zstd stream may also start with a skippable frame (50…5f 2a 4d 18).
    private static let magics: [(Codec, [UInt8])] = [
        (.gzip, [0x1f, 0x8b]), (.xz, [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), (.zstd, [0x28, 0xb5, 0x2f, 0xfd]),
    ]
    private static let longestMagic = 6

    public let next: ByteSink
    private let engine: InflateEngineKind
    private let resumable: Bool
    private let zstdWindowLimit: UInt64
    private let xzMemoryLimit: UInt64
    private let xzDecoders: Int
    private let zstdPlanAhead: Bool
    private var seen: [UInt8] = []
    public private(set) var codec: Codec?
    private var gzip: GzipDecoder?
    private var xz: XzDecoder?
    private var zstd: ZstdDecoder?

    public init(
        next: ByteSink, engine: InflateEngineKind = .fastest, resumable: Bool = true,
        zstdWindowLimit: UInt64 = 128 << 20, xzMemoryLimit: UInt64 = 256 << 20, xzDecoders: Int = 1,
        zstdPlanAhead: Bool = false, restoring state: DecompressState? = nil
    ) throws {
        self.next = next
        self.engine = engine
        self.resumable = resumable
        self.zstdWindowLimit = zstdWindowLimit
        self.xzMemoryLimit = xzMemoryLimit
        self.xzDecoders = xzDecoders
        self.zstdPlanAhead = zstdPlanAhead
        if let state { try restore(state) }
    }

    private var decoder: ByteSink? { gzip ?? xz ?? zstd }

    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        if let decoder { return try decoder.write(bytes) }
        var rest = bytes[...]
        while codec == nil, let byte = rest.first {
            seen.append(byte)
            rest = rest.dropFirst()
            guard try decide() else {
                // Show a little more than the bytes that settled it, when they are at hand.
                let shown = seen + rest.prefix(max(0, 8 - seen.count))
                throw SluiceError.corruptData(format: "compressed", offset: 0, reason: "not gzip, xz or zstd data: it starts with \(Self.describe(shown))")
            }
        }
        if let decoder, !rest.isEmpty { try decoder.write(UnsafeRawBufferPointer(rebasing: rest)) }
    }

    /// Picks the codec once the bytes seen match a magic number; false once none can match.
    private func decide() throws -> Bool {
        if let match = Self.magics.first(where: { seen.starts(with: $0.1) }) {
            try become(match.0)
        } else if seen.count >= 4, seen[1...3] == [0x2a, 0x4d, 0x18], seen[0] & 0xf0 == 0x50 {
            try become(.zstd)
        } else if !Self.magics.contains(where: { $0.1.starts(with: seen) }) && !(seen.count < 4 && Self.skippablePrefix(seen)) {
            return false
        }
        return true
    }

    private static func skippablePrefix(_ bytes: [UInt8]) -> Bool {
        [0x50, 0x2a, 0x4d, 0x18].indices.prefix(bytes.count).allSatisfy { i in
            i == 0 ? bytes[0] & 0xf0 == 0x50 : bytes[i] == [0x50, 0x2a, 0x4d, 0x18][i]
        }
    }

    private func become(_ chosen: Codec, gunzip: GzipState? = nil, unxz: XzState? = nil, unzstd: ZstdState? = nil) throws {
        switch chosen {
        case .gzip: gzip = try GzipDecoder(engine: engine, next: next, resumable: resumable, restoring: gunzip)
        case .xz: xz = try XzDecoder(next: next, memoryLimit: xzMemoryLimit, decoders: xzDecoders, restoring: unxz)
        case .zstd: zstd = try ZstdDecoder(next: next, windowLimit: zstdWindowLimit, restoring: unzstd, planAhead: zstdPlanAhead)
        }
        codec = chosen
        if gunzip == nil && unxz == nil && unzstd == nil {
            let first = seen
            seen = []
            try first.withUnsafeBytes { try decoder!.write($0) }
        }
    }

    public func finish() throws {
        guard let decoder else {
            throw SluiceError.corruptData(
                format: "compressed", offset: UInt64(seen.count),
                reason: seen.isEmpty
                    ? "unexpected end of data: no data at all"
                    : "unexpected end of data: \(Self.describe(seen)) is too short to tell gzip, xz or zstd")
        }
        try decoder.finish()
    }

    /// unzstd executes the blocks it has in flight before its state is taken.
    public func barrier(_ cut: Cut) throws {
        try zstd?.settle()
        try cut.record(spilling: snapshot(spillingTo:))
        try next.barrier(cut)
    }

    public func snapshot() -> DecompressState {
        snapshot(spillingTo: nil)
    }

    /// unxz's and unzstd's windows go to `spill` when there is one.
    func snapshot(spillingTo spill: CheckpointSpill?) -> DecompressState {
        DecompressState(
            codec: codec, seen: Data(seen), gunzip: gzip?.snapshot(), unxz: xz?.snapshot(spillingTo: spill),
            unzstd: zstd?.snapshot(spillingTo: spill))
    }

    private func restore(_ state: DecompressState) throws {
        func refuse(_ why: String) -> StateRejected {
            StateRejected("its decompress state is unusable: \(why)")
        }
        guard let chosen = state.codec else {
            seen = [UInt8](state.seen)
            guard seen.count < Self.longestMagic, state.gunzip == nil, state.unxz == nil, state.unzstd == nil else {
                throw refuse("no codec but decoder state")
            }
            let possible = try? decide()
            guard possible == true, codec == nil else { throw refuse("its first bytes \(Self.describe(seen)) are no magic number's start") }
            return
        }
        guard state.seen.isEmpty else { throw refuse("a codec and undecided bytes") }
        switch chosen {
        case .gzip:
            guard let g = state.gunzip, state.unxz == nil, state.unzstd == nil else { throw refuse("the gzip state is missing") }
            try become(.gzip, gunzip: g)
        case .xz:
            guard let x = state.unxz, state.gunzip == nil, state.unzstd == nil else { throw refuse("the xz state is missing") }
            try become(.xz, unxz: x)
        case .zstd:
            guard let z = state.unzstd, state.gunzip == nil, state.unxz == nil else { throw refuse("the zstd state is missing") }
            try become(.zstd, unzstd: z)
        }
    }

    /// `50 4b 03 04 ("PK\x03\x04")`: hex, then the bytes with the unprintable ones escaped.
    static func describe(_ bytes: [UInt8]) -> String {
        let text = bytes.map { byte in
            (0x20..<0x7f).contains(byte) && byte != 0x22 && byte != 0x5c
                ? String(UnicodeScalar(byte)) : "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }.joined()
        return bytes.withUnsafeBytes { hexBytes($0) } + " (\"\(text)\")"
    }
}

extension StageOption {
    /// One `memlimit=` for whichever codec the input turns out to be; each keeps its own default.
    static let decompressMemoryLimit = StageOption.size(
        "memlimit", "largest zstd window (default 128MiB) or xz dictionary (default 256MiB) accepted", in: 1...(1 << 42))
}

extension StageKind {
    static let decompress = StageKind.transform(
        "decompress", options: [.decompressMemoryLimit],
        summary: "transform: gunzip, unxz or unzstd, chosen by the input's magic number",
        // unzstd's figure: the codec is not known when the plan is made.
        cost: { _ in StageCost(nsPerByte: 8, expansion: 4) }, state: DecompressState.self
    ) { spec, next, context, saved in
        try Decompressor(
            next: next, engine: context.options.engine,
            resumable: saved != nil || context.options.checkpointInterval > 0,
            zstdWindowLimit: ZstdDecoder.windowLimit(spec),
            xzMemoryLimit: spec.option("memlimit").flatMap(UInt64.init) ?? (256 << 20),
            xzDecoders: XzDecoder.decoderThreads(context.options),
            zstdPlanAhead: ZstdDecoder.planAhead(context.options), restoring: saved)
    }
}
