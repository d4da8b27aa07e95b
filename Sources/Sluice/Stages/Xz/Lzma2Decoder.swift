import CXz
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// LZMA2 inside one block: the chunk rules (which resets and properties a chunk may or
/// must carry), the LZMA model and the dictionary window. It decodes whole chunks only,
/// so between calls its state is small and exact.
final class Lzma2Decoder {
    private let model: UnsafeMutablePointer<cxz_lzma>
    private var window = cxz_window()
    private var needDictionaryReset = true
    private var needProperties = true
    /// Decoding a whole block into one buffer (`startWholeBlock`): the most output it may
    /// hold, so the window never slides away output not yet handed over.
    private var wholeBlockSize: Int?

    init() {
        model = .allocate(capacity: 1)
        model.initialize(to: cxz_lzma())
        cxz_lzma_reset(model)
    }

    deinit {
        cxz_window_free(&window)
        model.deallocate()
    }

    /// Starts a block with its dictionary size; keeps the window's memory for reuse.
    /// `slideRoom`: output room past the dictionary and a chunk before the window slides
    /// (a slide moves the dictionary); by default the dictionary's size, 4 to 32 MiB.
    func startBlock(dictionarySize: UInt64, slideRoom: Int? = nil) {
        let dictionary = min(dictionarySize, UInt64(UInt32.max))
        window.dict_size = UInt32(dictionary)
        // Grows to the dictionary plus room to slide rarely; see cxz_window_reserve.
        let room = slideRoom ?? Int(min(max(dictionary, 4 << 20), 32 << 20))
        window.max_cap = Int(dictionary) + room + Int(CXZ_MAX_CHUNK_OUTPUT)
        window.pos = 0
        window.history = 0
        needDictionaryReset = true
        needProperties = true
    }

    /// Starts a block that is decoded whole into one buffer of `size` bytes, which the
    /// window itself is (no copy, no slide); `takeOutput()` hands it over. False when the
    /// memory is not there.
    /// `reusing`: a `cxz_map`'d buffer of an earlier block, taken over (and unmapped if too small).
    func startWholeBlock(dictionarySize: UInt64, size: Int, reusing spare: UnsafeMutableRawBufferPointer? = nil) -> Bool {
        cxz_window_free(&window)
        startBlock(dictionarySize: dictionarySize)
        window.max_cap = size + Int(CXZ_OUTPUT_SLACK)
        wholeBlockSize = size
        if let spare, let base = spare.baseAddress {
            if spare.count >= window.max_cap {
                cxz_window_adopt(&window, base.assumingMemoryBound(to: UInt8.self), spare.count)
                return true
            }
            cxz_unmap(base, spare.count)
        }
        return cxz_window_map(&window, size) == CXZ_OK
    }

    /// The whole block's output (`cxz_map`'d: the caller unmaps `mapped` bytes) and its length.
    func takeOutput() -> (bytes: UnsafeMutablePointer<UInt8>?, count: Int, mapped: Int) {
        let output = (window.buf, window.pos, window.cap)
        window.buf = nil
        window.cap = 0
        window.pos = 0
        window.history = 0
        window.mapped = 0
        wholeBlockSize = nil
        return output
    }

    /// Bytes of a chunk's header given its control byte (0: the end of LZMA2 data).
    static func headerLength(control: UInt8) throws -> Int {
        switch control {
        case 0x00: return 1
        case 0x01, 0x02: return 3
        case 0x80...0xBF: return 5
        case 0xC0...0xFF: return 6
        default: throw XzFormatError("invalid LZMA2 chunk control byte 0x\(String(control, radix: 16))")
        }
    }

    /// Bytes after a complete header: compressed data, or the stored bytes of an uncompressed chunk.
    static func payloadLength(header h: UnsafeRawBufferPointer) -> Int {
        h[0] >= 0x80 ? (Int(h[3]) << 8 | Int(h[4])) + 1 : (Int(h[1]) << 8 | Int(h[2])) + 1
    }

    /// Bytes a chunk decodes to, from its complete header (not the end byte).
    static func outputLength(header h: UnsafeRawBufferPointer) -> Int {
        h[0] >= 0x80 ? (Int(h[0] & 0x1F) << 16 | Int(h[1]) << 8 | Int(h[2])) + 1 : payloadLength(header: h)
    }

    /// The window's buffer (a worker's block output is one of the pool's mappings).
    var windowBase: UnsafeMutableRawPointer? { UnsafeMutableRawPointer(window.buf) }

    /// Bytes in the window: a whole block's output so far.
    var outputCount: Int { window.pos }

    /// Decodes one whole chunk (header + payload, with CXZ_INPUT_SLACK readable bytes after
    /// it) into the window; returns its output, valid until the next call.
    func decode(chunk: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer {
        let control = chunk[0]
        let payload = UnsafeRawBufferPointer(rebasing: chunk[(try Self.headerLength(control: control))...])
        let dictionaryReset = control == 0x01 || control >= 0xE0
        if dictionaryReset {
            window.history = 0
            // A whole block keeps its earlier output; matches cannot reach it (history is 0).
            if wholeBlockSize == nil { window.pos = 0 }
            needDictionaryReset = false
            needProperties = true
        } else if needDictionaryReset {
            throw XzFormatError("the first LZMA2 chunk does not reset the dictionary")
        }
        let outputSize = Self.outputLength(header: chunk)
        if let wholeBlockSize, window.pos + outputSize > wholeBlockSize {
            throw XzFormatError("the block decodes to more than its header's uncompressed size \(wholeBlockSize)")
        }
        guard cxz_window_reserve(&window, outputSize) == CXZ_OK else {
            throw XzFormatError("out of memory for the \(xzSize(UInt64(window.dict_size))) dictionary")
        }
        let start = window.pos
        if control < 0x80 {
            (window.buf + start).update(from: payload.baseAddress!.assumingMemoryBound(to: UInt8.self), count: payload.count)
            window.pos += payload.count
            window.history &+= UInt64(payload.count)
        } else {
            if control >= 0xC0 {
                try setProperties(chunk[5])
                needProperties = false
            } else if needProperties {
                throw XzFormatError("an LZMA2 chunk lacks the properties it needs")
            }
            if control >= 0xA0 { cxz_lzma_reset(model) }
            let status = cxz_lzma_decode(
                model, &window, payload.baseAddress!.assumingMemoryBound(to: UInt8.self),
                payload.count, outputSize)
            guard status == CXZ_OK else { throw XzFormatError(Self.describe(status)) }
        }
        return UnsafeRawBufferPointer(start: window.buf + start, count: outputSize)
    }

    private func setProperties(_ byte: UInt8) throws {
        guard byte < 9 * 5 * 5 else { throw XzFormatError("invalid LZMA properties byte 0x\(String(byte, radix: 16))") }
        let lc = UInt32(byte % 9), lp = UInt32(byte / 9 % 5), pb = UInt32(byte / 45)
        guard lc + lp <= 4 else { throw XzFormatError("LZMA2 properties lc + lp exceed 4") }
        model.pointee.lc = lc
        model.pointee.lp = lp
        model.pointee.pb = pb
    }

    private static func describe(_ status: Int32) -> String {
        switch Int(status) {
        case Int(CXZ_ERR_RC_INIT): "an LZMA chunk does not start with a zero byte"
        case Int(CXZ_ERR_DISTANCE): "a match refers to data before the dictionary's start"
        case Int(CXZ_ERR_OVERRUN): "LZMA data runs past its chunk's sizes"
        case Int(CXZ_ERR_END_MARK): "an LZMA end marker inside LZMA2 data"
        case Int(CXZ_ERR_RC_END): "an LZMA chunk does not end cleanly"
        default: "out of memory"
        }
    }

    // MARK: State

    /// Probabilities in use: the fixed part plus the literal coders lc + lp selects.
    private var probabilityCount: Int { Int(CXZ_LITERAL) + (0x300 << Int(model.pointee.lc + model.pointee.lp)) }

    /// The window goes to `spill` when there is one (a failed write is left in
    /// `spill.failure` for the barrier to throw); otherwise it is copied.
    func snapshot(spillingTo spill: CheckpointSpill? = nil) -> LzmaState {
        let m = model.pointee
        let count = probabilityCount
        let probabilities = Data(bytes: cxz_lzma_probs(model), count: count * 2)
        let keep = Int(min(window.history, UInt64(window.dict_size)))
        var state = LzmaState(
            needDictionaryReset: needDictionaryReset, needProperties: needProperties,
            lc: m.lc, lp: m.lp, pb: m.pb, state: m.state, reps: [m.rep0, m.rep1, m.rep2, m.rep3],
            probabilities: probabilities, history: window.history, window: Data())
        if keep > 0 {
            state.$window = CheckpointBlob(joining: [UnsafeRawBufferPointer(start: window.buf + window.pos - keep, count: keep)], spill: spill)
        }
        return state
    }

    /// Restores after `startBlock` with the block's dictionary size; every field is checked.
    func restore(_ s: LzmaState) throws {
        guard s.lc <= 8, s.lp <= 4, s.pb <= 4, s.lc + s.lp <= 4 else { throw XzStateError("LZMA lc/lp/pb out of range") }
        guard s.state < 12, s.reps.count == 4 else { throw XzStateError("LZMA state or distances out of range") }
        model.pointee.lc = s.lc
        model.pointee.lp = s.lp
        model.pointee.pb = s.pb
        guard s.probabilities.count == probabilityCount * 2 else { throw XzStateError("the LZMA probabilities have the wrong count") }
        var valid = true
        let probs = cxz_lzma_probs(model)!
        s.probabilities.withUnsafeBytes { saved in
            for i in 0..<probabilityCount {
                let p = UInt16(saved[2 * i]) | UInt16(saved[2 * i + 1]) << 8
                if p == 0 || p >= 2048 { valid = false }
                probs[i] = p
            }
        }
        guard valid else { throw XzStateError("an LZMA probability is out of range") }
        let expected = min(s.history, UInt64(window.dict_size))
        guard UInt64(s.window.count) == expected else { throw XzStateError("the dictionary window has the wrong size") }
        guard !s.needDictionaryReset || (s.history == 0 && s.needProperties) else {
            throw XzStateError("the LZMA2 reset flags contradict the window")
        }
        model.pointee.state = s.state
        model.pointee.rep0 = s.reps[0]
        model.pointee.rep1 = s.reps[1]
        model.pointee.rep2 = s.reps[2]
        model.pointee.rep3 = s.reps[3]
        window.pos = 0
        window.history = 0
        guard cxz_window_reserve(&window, s.window.count) == CXZ_OK else { throw XzStateError("out of memory for the window") }
        s.window.withUnsafeBytes { raw in
            if let base = raw.baseAddress { window.buf.update(from: base.assumingMemoryBound(to: UInt8.self), count: raw.count) }
        }
        window.pos = s.window.count
        window.history = s.history
        needDictionaryReset = s.needDictionaryReset
        needProperties = s.needProperties
    }
}

/// The LZMA2 decoder between chunks, in a checkpoint.
public struct LzmaState: Codable, Sendable, Equatable {
    var needDictionaryReset: Bool
    var needProperties: Bool
    var lc: UInt32
    var lp: UInt32
    var pb: UInt32
    var state: UInt32
    var reps: [UInt32]
    /// Little-endian 16-bit probabilities (raw in the checkpoint's appendix).
    @CheckpointBlob var probabilities: Data
    /// Bytes since the last dictionary reset.
    var history: UInt64
    /// The last min(history, dictionary size) bytes of output, before the filters (raw in
    /// the checkpoint's appendix).
    @CheckpointBlob var window: Data
}
