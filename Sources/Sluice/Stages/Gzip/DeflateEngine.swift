#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Which raw-deflate implementation a `GzipDecoder` runs on.
public enum InflateEngineKind: String, Codable, Sendable, CaseIterable {
    /// zlib: the reference; resumable at deflate block boundaries plus a replay.
    case zlib
    /// Intel ISA-L: about twice as fast; resumable from its self-contained state.
    case isal

    /// The fastest engine available in this build.
    public static var fastest: InflateEngineKind { .isal }
}

/// How far one `inflate` call got.
enum InflateProgress: Equatable {
    /// All of the input that was consumed belongs to the deflate stream; more is needed.
    case needsInput(consumed: Int)
    /// The final block ended after `consumed` bytes of this input. `overread` holds bytes
    /// taken in earlier calls that lie past the stream's end (at most 8: they belong to
    /// the member trailer).
    case finished(consumed: Int, overread: [UInt8])
}

/// A raw-deflate decompressor (RFC 1951) that can describe its exact state after any
/// input byte and be rebuilt from that description.
protocol DeflateEngine: AnyObject {
    /// Decompresses as much of `input` as belongs to the deflate stream into room that
    /// `output` provides.
    func inflate(_ input: UnsafeRawBufferPointer, into output: InflateOutput) throws -> InflateProgress

    /// The state after every byte consumed so far.
    func snapshot() -> DeflateState
}

/// A deflate engine's state at a cut: one case per engine, each with what that engine
/// needs to be rebuilt. Encoded flat, as `{"engine": "zlib", …fields}`.
enum DeflateState: Sendable, Equatable {
    case zlib(ZlibRestartPoint)
    case isal(IsalInflateState)

    var engine: InflateEngineKind {
        switch self {
        case .zlib: return .zlib
        case .isal: return .isal
        }
    }
}

/// zlib's restart point: the last block boundary (bits of the boundary byte still unread,
/// and their value), the 32 KiB window before it, the compressed bytes since, and how
/// many output bytes those bytes produced (suppressed when they are replayed).
struct ZlibRestartPoint: Codable, Sendable, Equatable {
    var bits: Int = 0
    var bitValue: UInt8 = 0
    var window = Data()
    var replay = Data()
    var replayOutput: UInt64 = 0
}

/// ISA-L's `inflate_state` with its pointers cleared, and the library layout it belongs to.
struct IsalInflateState: Codable, Sendable, Equatable {
    var layout: String
    var blob: Data
}

extension DeflateState: Codable {
    private enum Key: String, CodingKey { case engine }

    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        switch try c.decode(InflateEngineKind.self, forKey: .engine) {
        case .zlib: self = .zlib(try ZlibRestartPoint(from: decoder))
        case .isal: self = .isal(try IsalInflateState(from: decoder))
        }
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(engine, forKey: .engine)
        switch self {
        case .zlib(let point): try point.encode(to: encoder)
        case .isal(let state): try state.encode(to: encoder)
        }
    }
}

/// Where a deflate engine puts its output: it asks for room, decodes into it, and
/// reports how much it filled. Lets the decoder hand out the next stage's own buffers.
protocol InflateOutput: AnyObject {
    /// Room for output; the same room again until something is filled.
    func room() throws -> UnsafeMutableRawBufferPointer
    /// The first `count` bytes of the last room are output.
    func filled(_ count: Int) throws
}

/// Output that is counted and dropped: replaying bytes whose output was already delivered.
final class DiscardingOutput: InflateOutput {
    private let scratch: UnsafeMutableRawBufferPointer
    private(set) var count: UInt64 = 0

    init(size: Int = 64 * 1024) {
        scratch = .allocate(byteCount: size, alignment: 64)
    }

    deinit { scratch.deallocate() }

    func room() throws -> UnsafeMutableRawBufferPointer { scratch }
    func filled(_ n: Int) throws { count &+= UInt64(n) }
}
