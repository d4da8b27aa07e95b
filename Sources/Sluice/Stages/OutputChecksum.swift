import CIsal
#if canImport(Glibc)
import Glibc
#endif

/// The running checksum a sink keeps of the bytes it wrote, recorded in its checkpoint
/// state, so a resume can tell whether the bytes already on disk are still those bytes.
/// CRC-64 (ECMA-182, reflected) from ISA-L: tens of GB/s, nothing next to the write itself.
struct OutputChecksum: Equatable {
    private(set) var value: UInt64

    init(_ value: UInt64 = 0) {
        self.value = value
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        value = crc64_ecma_refl(value, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    /// Appends bytes that were checksummed on their own (`crc64`, the value an
    /// `OutputChecksum()` has after them, `count` of them): the value is the checksum of
    /// everything so far followed by them, as if `update` had seen them here.
    mutating func append(crc64: UInt64, count: UInt64) {
        value = Self.shifted(value, byZeroBytes: count) ^ crc64
    }

    // The combination, from the algebra: the pre- and post-inversion cancel between the two
    // parts, so crc(A B) = crc(A)·x^(8|B|) mod P  ⊕  crc(B), the product taken in GF(2)
    // polynomials in the reflected bit order (bit 63 is x^0).

    /// ECMA-182's polynomial, reflected (x^64 implied).
    private static let polynomial: UInt64 = 0xC96C_5795_D787_0F42

    /// a·b mod P.
    private static func multiplied(_ a: UInt64, _ b: UInt64) -> UInt64 {
        var product: UInt64 = 0
        var term = b  // b·x^k mod P, for the k of the bit of `a` being looked at
        var rest = a
        while rest != 0 {
            if rest & (1 << 63) != 0 { product ^= term }
            rest <<= 1
            term = term & 1 != 0 ? (term >> 1) ^ polynomial : term >> 1
        }
        return product
    }

    /// crc·x^(8n) mod P: the register after n zero bytes, without the inversions.
    private static func shifted(_ crc: UInt64, byZeroBytes n: UInt64) -> UInt64 {
        var result = crc
        var square: UInt64 = 1 << (63 - 8)  // x^8, then x^16, x^32, … as the bits of n go by
        var rest = n
        while rest != 0 {
            if rest & 1 != 0 { result = multiplied(square, result) }
            rest >>= 1
            if rest != 0 { square = multiplied(square, square) }
        }
        return result
    }

    /// The checksum of `count` bytes of `fd` from `offset`, read once with `pread`; nil
    /// when the file ends before them.
    static func of(_ fd: Int32, from offset: UInt64, count: UInt64, path: String) throws -> OutputChecksum? {
        guard let end = offset.addingReportingOverflowIfFits(count), end <= UInt64(Int64.max) else { return nil }
        _ = posix_fadvise(fd, off_t(offset), off_t(count), POSIX_FADV_SEQUENTIAL)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { buffer.deallocate() }
        var checksum = OutputChecksum()
        var position = offset
        while position < end {
            let want = Int(min(UInt64(buffer.count), end - position))
            let n = pread(fd, buffer.baseAddress, want, off_t(position))
            if n < 0 {
                if errno == EINTR { continue }
                throw SluiceError.io(path: path, operation: "read back", errno: errno)
            }
            if n == 0 { return nil }
            checksum.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            position += UInt64(n)
        }
        return checksum
    }
}

extension UInt64 {
    /// `self + other`, or nil when it overflows.
    func addingReportingOverflowIfFits(_ other: UInt64) -> UInt64? {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? nil : sum
    }
}
