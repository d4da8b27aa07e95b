/// The directories whose mode and mtime wait for the end of the archive, kept packed and
/// appended to in place: a checkpoint copies the bytes as they are instead of encoding
/// thousands of records again at every cut, and they weigh a third of a plain list.
///
/// Layout: a format byte (2), then per directory: mode, the change of mtime seconds from
/// the previous directory (zigzag), nanoseconds, how many leading bytes the path shares
/// with the previous path, the length of the rest and the rest — numbers as LEB128 varints.
/// Archives list a tree depth first, so neighbouring paths share most of their bytes.
struct DirectoryList: Equatable, Sendable {
    static let format: UInt8 = 2

    private(set) var bytes: [UInt8] = [Self.format]
    private(set) var count = 0
    /// What the list bounds: 18 bytes per directory plus its path.
    private(set) var weight = 0
    private var lastPath: [UInt8] = []
    private var lastSeconds: Int64 = 0

    init() {}

    init(_ list: [DirectoryMetadata]) {
        for dir in list { append(dir) }
    }

    /// nil when the bytes are not a list `append` could have written.
    init?(packed: [UInt8]) {
        guard packed.first == Self.format else { return nil }
        var reader = VarintReader(bytes: packed, at: 1)
        while !reader.atEnd {
            guard let mode = reader.next(), mode <= UInt64(UInt32.max), let delta = reader.next(),
                let nanos = reader.next(), nanos < 1_000_000_000, let shared = reader.next(),
                shared <= UInt64(lastPath.count), let suffix = reader.next(),
                suffix <= UInt64(MemberPath.maxLength), shared + suffix <= UInt64(MemberPath.maxLength), let rest = reader.take(Int(suffix))
            else { return nil }
            lastSeconds = lastSeconds &+ Int64(bitPattern: (delta >> 1) ^ (0 &- (delta & 1)))
            lastPath.removeSubrange(Int(shared)...)
            lastPath += rest
            count += 1
            weight += 18 + lastPath.count
        }
        bytes = packed
    }

    mutating func append(_ dir: DirectoryMetadata) {
        let path = dir.path.bytes
        var shared = 0
        let limit = min(path.count, lastPath.count)
        while shared < limit, path[shared] == lastPath[shared] { shared += 1 }
        let delta = dir.mtime.seconds &- lastSeconds
        put(UInt64(dir.mode))
        put(UInt64(bitPattern: (delta << 1) ^ (delta >> 63)))
        put(UInt64(UInt32(bitPattern: dir.mtime.nanoseconds)))
        put(UInt64(shared))
        put(UInt64(path.count - shared))
        bytes += path[shared...]
        lastPath = path
        lastSeconds = dir.mtime.seconds
        count += 1
        weight += 18 + path.count
    }

    /// The directories in the order they were appended.
    var list: [DirectoryMetadata] {
        var out: [DirectoryMetadata] = []
        out.reserveCapacity(count)
        var reader = VarintReader(bytes: bytes, at: 1)
        var path: [UInt8] = []
        var seconds: Int64 = 0
        // The bytes were checked when made or read: every step succeeds.
        while !reader.atEnd {
            guard let mode = reader.next(), let delta = reader.next(), let nanos = reader.next(),
                let shared = reader.next(), let suffix = reader.next(), let rest = reader.take(Int(suffix))
            else { break }
            seconds = seconds &+ Int64(bitPattern: (delta >> 1) ^ (0 &- (delta & 1)))
            path.removeSubrange(Int(shared)...)
            path += rest
            out.append(
                DirectoryMetadata(
                    path: ByteString(path), mode: UInt32(truncatingIfNeeded: mode),
                    mtime: TarTime(seconds: seconds, nanoseconds: Int32(truncatingIfNeeded: nanos))))
        }
        return out
    }

    private mutating func put(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    static func == (a: DirectoryList, b: DirectoryList) -> Bool { a.bytes == b.bytes }
}

/// LEB128 numbers and byte runs from a packed list; nil past the end or on overlong numbers.
private struct VarintReader {
    let bytes: [UInt8]
    var at: Int

    var atEnd: Bool { at >= bytes.count }

    mutating func next() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            guard shift < 64, shift < 63 || byte <= 1 else { return nil }
            value |= UInt64(byte & 0x7f) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
        return nil
    }

    mutating func take(_ n: Int) -> ArraySlice<UInt8>? {
        guard n >= 0, bytes.count - at >= n else { return nil }
        defer { at += n }
        return bytes[at..<(at + n)]
    }
}
