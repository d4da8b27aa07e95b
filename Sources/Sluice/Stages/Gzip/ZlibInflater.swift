import CZlib
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Raw inflate on zlib, resumable the way zlib's examples/zran.c restarts: at the last
/// deflate block boundary, with `inflatePrime` for the boundary's leftover bits,
/// `inflateSetDictionary` for the 32 KiB window, and a replay of the compressed bytes
/// since the boundary whose output is suppressed.
final class ZlibInflater: DeflateEngine {
    private var stream = z_stream()
    /// When false (checkpoints disabled) boundaries are not tracked, saving the copies.
    private let tracksBoundaries: Bool

    // The restart point: everything a snapshot needs.
    private var boundaryBits = 0
    private var boundaryBitValue: UInt8 = 0
    private var window = [UInt8](repeating: 0, count: 32768)
    private var windowCount = 0
    private var replay: [UInt8] = []
    private var replayOutput: UInt64 = 0

    init(tracksBoundaries: Bool = true) throws {
        self.tracksBoundaries = tracksBoundaries
        guard sluice_inflateInit2(&stream, -15) == Z_OK else {
            throw SluiceError.corruptData(format: "gzip", offset: 0, reason: "zlib could not start an inflater")
        }
    }

    convenience init(restoring state: ZlibRestartPoint) throws {
        try self.init(tracksBoundaries: true)
        guard (0...7).contains(state.bits), state.window.count <= 32768 else {
            throw StateRejected("the zlib inflate state is malformed")
        }
        if state.bits > 0 {
            inflatePrime(&stream, Int32(state.bits), Int32(state.bitValue >> (8 - state.bits)))
        }
        if !state.window.isEmpty {
            let rc = state.window.withUnsafeBytes {
                inflateSetDictionary(&stream, $0.bindMemory(to: Bytef.self).baseAddress, uInt($0.count))
            }
            guard rc == Z_OK else {
                throw StateRejected("zlib refused the saved window")
            }
        }
        boundaryBits = state.bits
        boundaryBitValue = state.bitValue
        windowCount = state.window.count
        state.window.copyBytes(to: &window, count: windowCount)
        // Replay the bytes after the boundary; their output was delivered before the cut.
        let suppressed = DiscardingOutput()
        let replayed = try state.replay.withUnsafeBytes { try inflate($0, into: suppressed) }
        guard replayed == .needsInput(consumed: state.replay.count), suppressed.count == state.replayOutput else {
            throw StateRejected("replaying the saved compressed bytes did not reproduce the recorded state")
        }
    }

    deinit {
        inflateEnd(&stream)
    }

    func inflate(_ input: UnsafeRawBufferPointer, into output: InflateOutput) throws -> InflateProgress {
        guard let base = input.baseAddress, input.count > 0 else { return .needsInput(consumed: 0) }
        let start = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: Bytef.self))
        stream.next_in = start
        stream.avail_in = uInt(input.count)
        defer {
            stream.next_in = nil
            stream.avail_in = 0
        }
        while true {
            let before = stream.next_in!
            let room = try output.room()
            stream.next_out = room.baseAddress!.assumingMemoryBound(to: Bytef.self)
            stream.avail_out = uInt(room.count)
            let rc = CZlib.inflate(&stream, Z_BLOCK)
            let produced = room.count - Int(stream.avail_out)
            if tracksBoundaries {
                replay.append(contentsOf: UnsafeBufferPointer(start: before, count: stream.next_in! - before))
                replayOutput &+= UInt64(produced)
            }
            try output.filled(produced)
            let consumed = stream.next_in! - start
            switch rc {
            case Z_STREAM_END:
                return .finished(consumed: consumed, overread: [])  // zlib never reads past the end
            case Z_OK:
                break
            case Z_BUF_ERROR:
                return .needsInput(consumed: consumed)  // no progress possible: all input used
            default:
                let message = stream.msg.map { String(cString: $0) } ?? "inflate error \(rc)"
                throw GzipFormatError(message)
            }
            // Bit 7: stopped at a block boundary; bit 6: in the last block (no restart point after it).
            if tracksBoundaries && stream.data_type & 128 != 0 && stream.data_type & 64 == 0 {
                markBoundary()
            }
            if stream.avail_in == 0 && stream.avail_out > 0 { return .needsInput(consumed: consumed) }
        }
    }

    private func markBoundary() {
        boundaryBits = Int(stream.data_type & 7)
        boundaryBitValue = boundaryBits > 0 ? stream.next_in![-1] : 0
        replay.removeAll(keepingCapacity: true)
        replayOutput = 0
        var length = uInt(0)
        window.withUnsafeMutableBufferPointer { _ = inflateGetDictionary(&stream, $0.baseAddress, &length) }
        windowCount = Int(length)
    }

    func snapshot() -> DeflateState {
        .zlib(
            ZlibRestartPoint(
                bits: boundaryBits, bitValue: boundaryBitValue,
                window: Data(window[0..<windowCount]), replay: Data(replay), replayOutput: replayOutput))
    }

    /// CRC-32 (gzip polynomial) continued over `bytes`.
    static func crc32(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        return UInt32(CZlib.crc32(UInt(crc), base.assumingMemoryBound(to: Bytef.self), uInt(bytes.count)))
    }
}
