import Foundation

/// Which raw-deflate implementation a `GzipDecoder` runs on.
public enum InflateEngineKind: String, Codable, Sendable, CaseIterable {
    /// zlib: the reference; resumable at deflate block boundaries plus a replay.
    case zlib
    /// Intel ISA-L: about twice as fast; resumable from its self-contained state.
    case isal

    /// The fastest engine available in this build.
    public static var fastest: InflateEngineKind { .isal }
}

/// A raw-deflate decompressor (RFC 1951) that can describe its exact state after any
/// input byte and be rebuilt from that description.
protocol DeflateEngine: AnyObject {
    /// Decompresses as much of `input` as belongs to the deflate stream into room that
    /// `output` provides. Returns the input bytes consumed; `finished` is true once the
    /// final block has ended (the rest of `input` then belongs to the trailer).
    func inflate(_ input: UnsafeRawBufferPointer, into output: InflateOutput) throws -> (consumed: Int, finished: Bool)

    /// After `finished`: bytes taken in an earlier call that lie past the deflate stream
    /// (read-ahead); they belong to the trailer.
    var overread: [UInt8] { get }

    /// The state after every byte consumed so far.
    func snapshot() -> DeflateState

    /// CRC-32 (gzip polynomial) continued over `bytes`; each engine brings its fastest one.
    func crc32(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32
}

/// A deflate engine's state at a cut.
public struct DeflateState: Codable, Sendable, Equatable {
    public var engine: InflateEngineKind
    /// zlib: the last block boundary (bits of the boundary byte still unread, and their
    /// value), the 32 KiB window before it, the compressed bytes since, and how many
    /// output bytes those bytes produced (suppressed when they are replayed).
    public var bits: Int = 0
    public var bitValue: UInt8 = 0
    public var window: Data = Data()
    public var replay: Data = Data()
    public var replayOutput: UInt64 = 0
    /// ISA-L: the library's layout identity and its `inflate_state`, pointers cleared.
    public var layout: String?
    public var blob: Data?
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
