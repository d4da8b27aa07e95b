import CZstdDecoder
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The output history of a frame: a ring of two segments so no byte is ever moved.
/// Each block is decoded in place at the write position; when a block might not fit
/// before the end, writing restarts at the front and the older segment ends where
/// writing stopped. The ring holds window + 2 blocks (+ copy slack), so the bytes a match
/// may reach (the last window-size bytes) are never overwritten by the block being decoded.
final class ZstdWindow {
    private static let block = 128 * 1024
    private var storage: UnsafeMutableRawPointer
    private var usable: Int
    /// Where the next block goes.
    private(set) var writeOffset = 0
    /// End of the older segment (0: none).
    private var previousEnd = 0
    private(set) var windowSize: UInt64 = 0
    /// Bytes of this frame's output the ring holds that a match may reach.
    private(set) var history: UInt64 = 0

    init() {
        usable = 0
        guard let memory = Self.allocate(Self.extra) else { fatalError("out of memory allocating a zstd window ring") }
        storage = memory
    }

    deinit { free(storage) }

    private static var extra: Int { 2 * block + 64 + Int(ZSD_OUTPUT_SLACK) + 64 }

    private static let hugePage = 2 << 20

    /// Ring storage on 2 MiB boundaries, its whole 2 MiB stretches backed by huge pages where
    /// the kernel allows (transparent huge pages in `madvise` mode, the Debian default). Match
    /// sources land anywhere in a window of megabytes: with 4 KiB pages nearly every prefetch
    /// of one missed the TLB and walked the page tables first (perf: ~20% of execution's
    /// samples on the prefetch alone). The tail past the last whole stretch keeps 4 KiB pages,
    /// so the ring costs no more memory than before; a refusal only leaves the 4 KiB pages.
    /// Nil when the system refuses: a window the limit allows may still be more than it
    /// gives (`memlimit=4TiB` and a frame asking for 2 TiB), and that is an error, not an abort.
    private static func allocate(_ byteCount: Int) -> UnsafeMutableRawPointer? {
        var memory: UnsafeMutableRawPointer?
        guard posix_memalign(&memory, byteCount >= hugePage ? hugePage : 64, byteCount) == 0, let memory else { return nil }
        if byteCount >= hugePage { _ = madvise(memory, byteCount / hugePage * hugePage, MADV_HUGEPAGE) }
        return memory
    }

    /// Starts a frame with a window of `size` bytes (already checked against the limit),
    /// holding `restored` as the history (a checkpoint's window; empty for a new frame).
    /// Throws (exit 6) when the system cannot give the ring.
    func start(windowSize size: UInt64, restored: Data = Data()) throws(SluiceError) {
        let needed = Int(size) + 2 * Self.block + 64
        if needed > usable {
            guard let memory = Self.allocate(needed + Int(ZSD_OUTPUT_SLACK) + 64) else {
                throw .io(path: "a \(ByteSize.text(size)) zstd window", operation: "allocate memory for", errno: ENOMEM)
            }
            free(storage)
            storage = memory
            usable = needed
        }
        windowSize = size
        previousEnd = 0
        writeOffset = restored.count
        history = UInt64(restored.count)
        restored.withUnsafeBytes { storage.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
    }

    /// The output description for decoding a block of at most `limit` bytes at the write position.
    func prepareBlock(limit: Int) -> ZsdOutput {
        if writeOffset + limit > usable {
            previousEnd = writeOffset
            writeOffset = 0
        }
        let op = (storage + writeOffset).assumingMemoryBound(to: UInt8.self)
        let start = storage.assumingMemoryBound(to: UInt8.self)
        return ZsdOutput(
            op: op, limit: op + limit, segment_start: start,
            previous_end: previousEnd == 0 ? start : start + previousEnd,
            history: history, window_size: windowSize)
    }

    /// Room for a raw or RLE block of `count` bytes at the write position.
    func rawRoom(_ count: Int) -> UnsafeMutableRawPointer {
        prepareBlock(limit: count).op.map { UnsafeMutableRawPointer($0) }!
    }

    /// The block's `count` bytes at the write position are final.
    func commit(_ count: Int) -> UnsafeRawBufferPointer {
        let bytes = UnsafeRawBufferPointer(start: storage + writeOffset, count: count)
        writeOffset += count
        history = min(windowSize, history + UInt64(count))
        return bytes
    }

    /// The last `history` bytes, oldest first, as they lie in the ring (one or two pieces,
    /// valid until the next block): what a checkpoint keeps.
    var pieces: [UnsafeRawBufferPointer] {
        let wanted = Int(history)
        if wanted <= writeOffset {
            return [UnsafeRawBufferPointer(start: storage + (writeOffset - wanted), count: wanted)]
        }
        let older = wanted - writeOffset
        return [
            UnsafeRawBufferPointer(start: storage + (previousEnd - older), count: older),
            UnsafeRawBufferPointer(start: storage, count: writeOffset),
        ]
    }
}
