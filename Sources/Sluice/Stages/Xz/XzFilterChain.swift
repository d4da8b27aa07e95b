import CXz
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The filters before LZMA2 (delta, x86, ARM64), run in decoding order over each chunk's
/// output. The branch filters hold back up to 4 bytes they cannot convert yet.
final class XzFilterChain {
    private var filters: [cxz_filter]
    /// A chunk's output plus what the filters hold.
    private let work: UnsafeMutableRawBufferPointer

    var isEmpty: Bool { filters.isEmpty }

    /// `chain` in encoding order, as the block header lists it.
    init(_ chain: [XzBlockHeader.Filter]) {
        filters = chain.reversed().map { spec in
            var f = cxz_filter()
            cxz_filter_init(&f, spec.kind, spec.parameter)
            return f
        }
        work = .allocate(byteCount: filters.isEmpty ? 0 : Int(CXZ_MAX_CHUNK_OUTPUT) + 64, alignment: 16)
    }

    deinit { work.deallocate() }

    /// Filters `bytes`; the result (valid until the next call) may be shorter, or longer by held bytes.
    func run(_ bytes: UnsafeRawBufferPointer, final: Bool) -> UnsafeRawBufferPointer {
        if !bytes.isEmpty { work.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
        let done = filters.withUnsafeMutableBufferPointer { f in
            cxz_filters_run(
                f.baseAddress, Int32(f.count), work.baseAddress!.assumingMemoryBound(to: UInt8.self),
                bytes.count, final ? 1 : 0)
        }
        return UnsafeRawBufferPointer(rebasing: work[0..<done])
    }

    func snapshot() -> [XzFilterState] {
        filters.map { f in
            var f = f
            let held = withUnsafeBytes(of: &f.held) { Data($0.prefix(Int(f.held_count))) }
            let ring = withUnsafeBytes(of: &f.delta_ring) { Data($0) }
            return XzFilterState(
                kind: f.kind, position: f.pos, x86Mask: f.x86_mask, x86Previous: f.x86_prev,
                deltaIndex: f.delta_index, deltaRing: f.kind == UInt32(CXZ_FILTER_DELTA) ? ring : Data(),
                held: held)
        }
    }

    /// Restores filter states onto a chain built from the same block header.
    func restore(_ states: [XzFilterState]) throws {
        guard states.count == filters.count else { throw XzStateError("the filter states do not match the block's filters") }
        for (i, state) in states.enumerated() {
            var f = filters[i]
            guard state.kind == f.kind else { throw XzStateError("a filter state belongs to another filter") }
            let maxHeld = f.kind == UInt32(CXZ_FILTER_X86) ? 4 : (f.kind == UInt32(CXZ_FILTER_ARM64) ? 3 : 0)
            guard state.held.count <= maxHeld, state.x86Mask <= 0xFF, state.deltaIndex < 256 else {
                throw XzStateError("a filter state is out of range")
            }
            if f.kind == UInt32(CXZ_FILTER_DELTA) {
                guard state.deltaRing.count == 256 else { throw XzStateError("the delta history is malformed") }
                withUnsafeMutableBytes(of: &f.delta_ring) { $0.copyBytes(from: state.deltaRing) }
                f.delta_index = state.deltaIndex
            } else {
                f.pos = state.position
                f.x86_mask = state.x86Mask
                f.x86_prev = state.x86Previous
            }
            withUnsafeMutableBytes(of: &f.held) { $0.copyBytes(from: state.held) }
            f.held_count = UInt32(state.held.count)
            filters[i] = f
        }
    }
}

/// One filter's state in a checkpoint.
public struct XzFilterState: Codable, Sendable, Equatable {
    var kind: UInt32
    var position: UInt32
    var x86Mask: UInt32
    var x86Previous: UInt32
    var deltaIndex: UInt32
    var deltaRing: Data
    var held: Data
}

/// A checkpoint's unxz state does not hold together; `XzDecoder` refuses the checkpoint.
struct XzStateError: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
