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
