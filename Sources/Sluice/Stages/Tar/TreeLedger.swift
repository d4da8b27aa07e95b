import CIsal
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// What the partial tree holds, member by member, as the extraction left it: for each name
/// (after strip) its kind and a hash of what is there (a file's size, permission bits,
/// mtime and content CRC-64; a symlink's target; a directory is only a kind). A name that a
/// later member replaced keeps only its last entry, so the ledger is the tree's final state
/// at a cut, in the order the names were last made. Checkpoints carry it (raw, in the
/// appendix). A resumed run marks the entries it restored as unverified — written by
/// another process, and the tree may have changed since — and re-reads those still
/// standing before the tree becomes DIR (`PartialTreeCheck`).
///
/// In memory, entries are packed back to back — kind (1 byte; its high bit: unverified),
/// name length (2 bytes, little-endian), the name, the hash (8 bytes, little-endian). In a
/// checkpoint (`encoded`) names are front-coded — the bytes shared with the previous name
/// (2 bytes), the rest's length (2 bytes), the rest — since neighbours mostly share their
/// directory: every checkpoint carries the whole ledger, and its size spaces them
/// (`CheckpointPacing`), so smaller means more of them.
struct TreeLedger {
    enum Kind: UInt8 {
        case file = 1, directory = 2, symlink = 3
        /// A regular file the archive gave more than one name (hard links): a `.file` must
        /// have exactly one, so identical files linked together are a difference.
        case linkedFile = 4

        /// Found on disk as `self`, recorded as `recorded`: a linked file may have lost its
        /// other names to later members that replaced them.
        func matches(_ recorded: Kind) -> Bool {
            self == recorded || (recorded == .linkedFile && self == .file)
        }
    }

    struct Entry: Equatable {
        var kind: Kind
        var name: [UInt8]
        var hash: UInt64
        /// Restored from a checkpoint and not made again since.
        var unverified = false
    }

    /// More than this many bytes of entries (about a million members of 60-byte names) is
    /// more than a checkpoint should carry: the ledger stops and a resume cannot check the tree.
    static let maxBytes = 64 << 20
    private static let dead: UInt8 = 0
    private static let unverifiedBit: UInt8 = 0x80

    private(set) var packed: [UInt8] = []
    /// Name (by `key`) → where its entry starts in `packed`.
    private var index: [Int: Int] = [:]
    /// Names whose hash another name already holds in `index` (practically never).
    private var collided: [[UInt8]: Int] = [:]
    private var deadEntries = 0
    private(set) var count = 0
    private(set) var unverifiedCount = 0
    /// The ledger outgrew `maxBytes` and was dropped: this tree cannot be checked.
    private(set) var overflowed = false
    /// The checkpoint form of `packed[..<encodedThrough]`, kept between cuts: entries are
    /// only appended until one dies, so a cut encodes just the entries made since the last.
    private var encoded = Encoding()

    private struct Encoding {
        var bytes: [UInt8] = []
        /// How much of `packed` `bytes` covers, and where its last name lies there.
        var through = 0
        var lastName = 0..<0
    }

    init() {}

    /// The ledger a checkpoint carried (`encoded`); nil when it is not one untar writes
    /// (malformed, a name not in normal form, a name twice, too large).
    init?(restoring bytes: [UInt8]) {
        guard bytes.count <= Self.maxBytes, let entries = Self.decode(bytes) else { return nil }
        for entry in entries {
            guard packed.count + entry.name.count + 11 <= Self.maxBytes, find(entry.name) == nil,
                MemberPath.restored(entry.name)?.isEmpty == false
            else { return nil }
            record(entry.name, kind: entry.kind, hash: entry.hash, unverified: true)
        }
    }

    // MARK: recording

    /// What was at `name` is gone (a new member is being made there).
    mutating func forget(_ name: [UInt8]) {
        guard !overflowed, let offset = find(name) else { return }
        removeIndex(name)
        kill(offset)
        compactIfMostlyDead()
    }

    /// `name` now holds this (whatever it held before is forgotten). One hash of the name
    /// and one dictionary update: it runs for every member.
    mutating func record(_ name: [UInt8], kind: Kind, hash: UInt64, unverified: Bool = false) {
        guard !overflowed else { return }
        if packed.count + name.count + 11 > Self.maxBytes { compact() }
        guard packed.count + name.count + 11 <= Self.maxBytes else {
            overflowed = true
            encoded = Encoding()
            packed = []
            index = [:]
            collided = [:]
            return
        }
        let offset = packed.count
        packed.append(kind.rawValue | (unverified ? Self.unverifiedBit : 0))
        if unverified { unverifiedCount += 1 }
        Self.append(UInt64(name.count), bytes: 2, to: &packed)
        packed += name
        Self.append(hash, bytes: 8, to: &packed)
        count += 1
        let key = Self.key(name)
        if let earlier = index.updateValue(offset, forKey: key) {
            if matches(name, at: earlier) {
                kill(earlier)
            } else {
                // Another name with the same hash keeps the index; this one goes aside.
                index[key] = earlier
                if let replaced = collided.updateValue(offset, forKey: name) { kill(replaced) }
            }
        } else if !collided.isEmpty, let replaced = collided.removeValue(forKey: name) {
            kill(replaced)
        }
        compactIfMostlyDead()
    }

    private mutating func kill(_ offset: Int) {
        encoded = Encoding()  // an entry already encoded may be the one that dies
        if packed[offset] & Self.unverifiedBit != 0 { unverifiedCount -= 1 }
        packed[offset] = Self.dead
        deadEntries += 1
        count -= 1
    }

    /// Many replacements between cuts (an archive of one name repeated) must not grow it.
    private mutating func compactIfMostlyDead() {
        if deadEntries > 1024 && deadEntries > count { compact() }
    }

    /// What is recorded for `name`.
    func entry(_ name: [UInt8]) -> Entry? {
        guard let offset = find(name), let kind = Kind(rawValue: packed[offset] & ~Self.unverifiedBit) else { return nil }
        let hashAt = offset + 3 + name.count
        return Entry(kind: kind, name: name, hash: Self.read(packed, at: hashAt, bytes: 8), unverified: packed[offset] & Self.unverifiedBit != 0)
    }

    /// The live entries in a checkpoint's form (dead ones dropped first).
    mutating func snapshot() -> [UInt8] {
        if deadEntries > 0 { compact() }
        Self.encode(packed, into: &encoded)
        return encoded.bytes
    }

    /// The live entries, in the order they were made.
    var live: [Entry] {
        (Self.entries(packed) ?? []).map(\.entry)
    }

    // MARK: hashes

    /// A regular file as it must be found: size, permission bits, mtime and content.
    static func fileHash(size: UInt64, permissions: UInt32, mtime: TarTime, content: UInt64) -> UInt64 {
        withUnsafeTemporaryAllocation(byteCount: 33, alignment: 8) { record in
            record.storeBytes(of: Kind.file.rawValue, toByteOffset: 0, as: UInt8.self)
            record.storeBytes(of: size.littleEndian, toByteOffset: 1, as: UInt64.self)
            record.storeBytes(of: permissions.littleEndian, toByteOffset: 9, as: UInt32.self)
            record.storeBytes(of: mtime.seconds.littleEndian, toByteOffset: 13, as: Int64.self)
            record.storeBytes(of: mtime.nanoseconds.littleEndian, toByteOffset: 21, as: Int32.self)
            record.storeBytes(of: content.littleEndian, toByteOffset: 25, as: UInt64.self)
            var sum = OutputChecksum()
            sum.update(UnsafeRawBufferPointer(record))
            return sum.value
        }
    }

    /// A symlink as it must be found: its mtime (untar restores it, as GNU tar does) and target.
    static func symlinkHash(target: [UInt8], mtime: TarTime) -> UInt64 {
        var record = [Kind.symlink.rawValue]
        withUnsafeBytes(of: mtime.seconds.littleEndian) { record += $0 }
        withUnsafeBytes(of: mtime.nanoseconds.littleEndian) { record += $0 }
        return crc64(record + target)
    }

    static let directoryHash = crc64([Kind.directory.rawValue])

    private static func crc64(_ bytes: [UInt8]) -> UInt64 {
        var sum = OutputChecksum()
        bytes.withUnsafeBytes { sum.update($0) }
        return sum.value
    }

    // MARK: packing

    /// Extends `encoding` to all of `packed` (live entries): front-coded, without the
    /// in-memory mark.
    private static func encode(_ packed: [UInt8], into encoding: inout Encoding) {
        var out = encoding.bytes
        encoding.bytes = []
        defer { encoding.bytes = out }
        packed.withUnsafeBufferPointer { bytes in
            var previous = encoding.lastName
            var at = encoding.through
            defer {
                encoding.through = at
                encoding.lastName = previous
            }
            while at < bytes.count {
                let length = Int(bytes[at + 1]) | Int(bytes[at + 2]) << 8
                let name = (at + 3)..<(at + 3 + length)
                var shared = 0
                let most = min(previous.count, length)
                while shared < most && bytes[previous.lowerBound + shared] == bytes[name.lowerBound + shared] { shared += 1 }
                out.append(bytes[at] & ~unverifiedBit)
                append(UInt64(shared), bytes: 2, to: &out)
                append(UInt64(length - shared), bytes: 2, to: &out)
                out.append(contentsOf: bytes[(name.lowerBound + shared)..<(name.upperBound + 8)])
                previous = name
                at = name.upperBound + 8
            }
        }
    }

    /// A checkpoint's entries; nil when malformed, or when the names it spells out would
    /// not fit in `maxBytes` in memory (front-coding lets 14 bytes spell a 4 KiB name, so
    /// a forged 64 MiB ledger would otherwise ask for gigabytes).
    static func decode(_ bytes: [UInt8]) -> [Entry]? {
        var out: [Entry] = []
        var name: [UInt8] = []
        var at = 0
        var unpacked = 0
        while at < bytes.count {
            guard bytes.count - at >= 5, let kind = Kind(rawValue: bytes[at]) else { return nil }
            let shared = Int(read(bytes, at: at + 1, bytes: 2))
            let rest = Int(read(bytes, at: at + 3, bytes: 2))
            guard shared <= name.count, shared + rest > 0, shared + rest <= MemberPath.maxLength,
                bytes.count - at - 5 >= rest + 8
            else { return nil }
            unpacked += shared + rest + 11
            guard unpacked <= maxBytes else { return nil }
            name.removeSubrange(shared...)
            name += bytes[(at + 5)..<(at + 5 + rest)]
            out.append(Entry(kind: kind, name: name, hash: read(bytes, at: at + 5 + rest, bytes: 8)))
            at += 5 + rest + 8
        }
        return out
    }

    /// The in-memory entries with their offsets; nil when malformed.
    private static func entries(_ bytes: [UInt8]) -> [(offset: Int, entry: Entry)]? {
        var out: [(Int, Entry)] = []
        var at = 0
        while at < bytes.count {
            guard bytes.count - at >= 3 else { return nil }
            let length = Int(read(bytes, at: at + 1, bytes: 2))
            guard length > 0, bytes.count - at - 3 >= length + 8 else { return nil }
            if bytes[at] == dead {
                at += 3 + length + 8
                continue
            }
            guard let kind = Kind(rawValue: bytes[at] & ~unverifiedBit) else { return nil }
            let name = Array(bytes[(at + 3)..<(at + 3 + length)])
            let entry = Entry(kind: kind, name: name, hash: read(bytes, at: at + 3 + length, bytes: 8), unverified: bytes[at] & unverifiedBit != 0)
            out.append((at, entry))
            at += 3 + length + 8
        }
        return out
    }

    private mutating func compact() {
        var fresh: [UInt8] = []
        fresh.reserveCapacity(packed.count)
        index.removeAll(keepingCapacity: true)
        collided.removeAll()
        var at = 0
        while at < packed.count {
            let length = Int(Self.read(packed, at: at + 1, bytes: 2))
            let end = at + 3 + length + 8
            if packed[at] != Self.dead {
                insertIndex(Array(packed[(at + 3)..<(at + 3 + length)]), at: fresh.count)
                fresh += packed[at..<end]
            }
            at = end
        }
        packed = fresh
        deadEntries = 0
        encoded = Encoding()
    }

    private func find(_ name: [UInt8]) -> Int? {
        if let offset = index[Self.key(name)], matches(name, at: offset) { return offset }
        return collided.isEmpty ? nil : collided[name]
    }

    private func matches(_ name: [UInt8], at offset: Int) -> Bool {
        let length = Int(Self.read(packed, at: offset + 1, bytes: 2))
        return length == name.count && packed[(offset + 3)..<(offset + 3 + length)].elementsEqual(name)
    }

    /// Rebuilding the index (a restore, a compaction): names are distinct there.
    private mutating func insertIndex(_ name: [UInt8], at offset: Int) {
        let key = Self.key(name)
        if let other = index[key], !matches(name, at: other) {
            collided[name] = offset
        } else {
            index[key] = offset
        }
    }

    private mutating func removeIndex(_ name: [UInt8]) {
        let key = Self.key(name)
        if let offset = index[key], matches(name, at: offset) {
            index[key] = nil
        } else {
            collided[name] = nil
        }
    }

    /// The name's CRC-64: a fraction of SipHash's cost on a name. Names chosen to collide
    /// (CRC is linear, an archive could) only move to `collided`, a Dictionary of its own.
    private static func key(_ name: [UInt8]) -> Int {
        var sum = OutputChecksum()
        name.withUnsafeBytes { sum.update($0) }
        return Int(truncatingIfNeeded: sum.value)
    }

    private static func append(_ value: UInt64, bytes: Int, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0.prefix(bytes)) }
    }

    private static func read(_ bytes: [UInt8], at offset: Int, bytes count: Int) -> UInt64 {
        var value: UInt64 = 0
        for i in 0..<count { value |= UInt64(bytes[offset + i]) << (8 * i) }
        return value
    }
}
