/// A tar archive turned into events, one byte range at a time, with a state that is a
/// plain value (so a checkpoint can hold it at any byte and a restore can continue there).
///
/// Formats, from POSIX.1-2017 (ustar, pax), the GNU tar manual's "Tar archive format"
/// and the v7 header layout: 512-byte headers with a checksum; ustar's `prefix` field;
/// pax `x`/`g` extended headers (path, linkpath, size, mtime applied; the rest ignored);
/// GNU `L`/`K` long names and base-256 numbers; v7 directories written as names ending
/// in `/`. Sparse members (GNU `S`, pax `GNU.sparse.*`) and multi-volume members are
/// refused, never extracted half-right.
struct TarReader {
    var state: TarReaderState

    /// Bounds on what an archive may make us hold: a 4 GB pax header is an attack.
    static let maxExtendedHeader: UInt64 = 1 << 20
    static let maxLongName: UInt64 = 8 << 10
    static let maxMembers: UInt64 = 20_000_000

    init() { state = TarReaderState() }

    init(restoring state: TarReaderState) throws(TarError) {
        try state.validate()
        self.state = state
    }

    /// Feeds `bytes`; calls the handler for each member header, its data, and its end.
    mutating func consume<Handler: TarEventHandler>(_ bytes: UnsafeRawBufferPointer, into handler: Handler) throws {
        var at = 0
        let count = bytes.count
        while at < count {
            let available = count - at
            switch state.phase {
            case .header, .endMarker:
                if state.pending.isEmpty && available >= 512 {
                    let block = UnsafeRawBufferPointer(rebasing: bytes[at..<(at + 512)])
                    at += 512
                    state.offset &+= 512
                    try headerBlock(block, into: handler)
                } else {
                    let take = min(512 - state.pending.count, available)
                    state.pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[at..<(at + take)]))
                    at += take
                    state.offset &+= UInt64(take)
                    if state.pending.count == 512 {
                        let block = state.pending
                        state.pending.removeAll(keepingCapacity: true)
                        try block.withUnsafeBytes { try headerBlock($0, into: handler) }
                    }
                }
            case .member:
                let take = Int(min(state.remaining, UInt64(available)))
                try handler.tarData(UnsafeRawBufferPointer(rebasing: bytes[at..<(at + take)]))
                at += take
                state.offset &+= UInt64(take)
                state.remaining -= UInt64(take)
                if state.remaining == 0 {
                    try handler.tarEntryEnd()
                    enterPadding()
                }
            case .extended:
                let take = Int(min(state.remaining, UInt64(available)))
                state.pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[at..<(at + take)]))
                at += take
                state.offset &+= UInt64(take)
                state.remaining -= UInt64(take)
                if state.remaining == 0 {
                    try completeExtended()
                    enterPadding()
                }
            case .padding:
                let take = Int(min(UInt64(state.padding), UInt64(available)))
                at += take
                state.offset &+= UInt64(take)
                state.padding -= UInt32(take)
                if state.padding == 0 { state.phase = .header }
            case .end:
                // Archivers pad to a record size with zeros; anything else after the end is not ours to ignore.
                let tail = UnsafeRawBufferPointer(rebasing: bytes[at...])
                if let bad = tail.firstIndex(where: { $0 != 0 }) {
                    throw TarError.corrupt(offset: state.offset &+ UInt64(bad), reason: "non-zero data after the end-of-archive marker")
                }
                state.offset &+= UInt64(tail.count)
                at = count
            }
        }
    }

    /// End of stream: only a complete archive (both end-of-archive blocks) is accepted.
    func finish() throws(TarError) {
        switch state.phase {
        case .end: return
        case .member:
            throw TarError.corrupt(
                offset: state.offset, reason: "the archive is truncated inside member \(state.members) of it (\(Counted.bytes(state.remaining)) missing)")
        case .header where state.pending.isEmpty && state.members == 0:
            throw TarError.corrupt(offset: state.offset, reason: "the stream is empty, not a tar archive")
        default:
            throw TarError.corrupt(offset: state.offset, reason: "the archive is truncated (no end-of-archive marker)")
        }
    }

    private mutating func enterPadding() {
        state.phase = state.padding == 0 ? .header : .padding
        state.pending.removeAll(keepingCapacity: true)
    }

    private mutating func headerBlock<Handler: TarEventHandler>(_ block: UnsafeRawBufferPointer, into handler: Handler) throws {
        let blockStart = state.offset &- 512
        if block.allSatisfy({ $0 == 0 }) {
            if state.phase == .endMarker {
                state.phase = .end
                return
            }
            guard state.pax.isEmpty, state.longName == nil, state.longLink == nil else {
                throw TarError.corrupt(offset: blockStart, reason: "an extended header is not followed by a member")
            }
            state.phase = .endMarker
            return
        }
        if state.phase == .endMarker {
            throw TarError.corrupt(offset: blockStart, reason: "a non-zero block where the second end-of-archive block should be")
        }
        let header = try TarHeader(block, offset: blockStart)
        switch header.typeflag {
        case UInt8(ascii: "x"), UInt8(ascii: "g"), UInt8(ascii: "L"), UInt8(ascii: "K"):
            let limit =
                header.typeflag == UInt8(ascii: "L") || header.typeflag == UInt8(ascii: "K")
                ? Self.maxLongName : Self.maxExtendedHeader
            guard header.size <= limit else {
                throw TarError.corrupt(offset: blockStart, reason: "an extended header of \(Counted.bytes(header.size)) (the limit is \(limit))")
            }
            state.extendedType = header.typeflag
            state.padding = Self.padding(after: header.size)
            if header.size == 0 {
                try completeExtended()
                enterPadding()
            } else {
                state.phase = .extended
                state.remaining = header.size
                state.pending.removeAll(keepingCapacity: true)
            }
        case UInt8(ascii: "S"):
            throw TarError.corrupt(
                offset: blockStart, reason: "member \(TarName.display(memberName(header))) is a GNU sparse file, which untar does not support")
        case UInt8(ascii: "M"), UInt8(ascii: "N"):
            throw TarError.corrupt(
                offset: blockStart, reason: "member \(TarName.display(memberName(header))) is part of a multi-volume archive, which untar does not support")
        default:
            try member(header, at: blockStart, into: handler)
        }
    }

    private func memberName(_ header: TarHeader) -> [UInt8] {
        state.longName?.bytes ?? state.pax["path"]?.bytes ?? state.globalPax["path"]?.bytes ?? header.name
    }

    private mutating func member<Handler: TarEventHandler>(_ header: TarHeader, at offset: UInt64, into handler: Handler) throws {
        guard state.members < Self.maxMembers else {
            throw TarError.corrupt(offset: offset, reason: "more than \(Self.maxMembers) members")
        }
        var entry = TarEntry(
            path: header.name, linkTarget: header.linkName, kind: header.kind,
            mode: header.mode, mtime: TarTime(seconds: header.mtime, nanoseconds: 0),
            size: header.size, index: state.members, offset: offset)
        let noPax = state.pax.isEmpty && state.globalPax.isEmpty
        func value(_ key: String) -> [UInt8]? {
            // An empty value in an `x` header cancels the global one: the header's field applies.
            guard !noPax, let v = state.pax[key] ?? state.globalPax[key], !v.bytes.isEmpty else { return nil }
            return v.bytes
        }
        // Precedence: this member's `x` record, then a GNU long name, then a `g` record, then the header.
        if let path = value("path") { entry.path = path }
        if let link = value("linkpath") { entry.linkTarget = link }
        if let name = state.longName, state.pax["path"] == nil { entry.path = name.bytes }
        if let link = state.longLink, state.pax["linkpath"] == nil { entry.linkTarget = link.bytes }
        if value(TarReaderState.sparseKey) != nil {
            throw TarError.corrupt(
                offset: offset, reason: "member \(TarName.display(entry.path)) is a sparse file (pax GNU.sparse), which untar does not support")
        }
        if let size = value("size") {
            guard let parsed = TarNumber.decimal(size) else {
                throw TarError.corrupt(offset: offset, reason: "member \(TarName.display(entry.path)) has a bad pax size \(TarName.display(size))")
            }
            entry.size = parsed
        }
        if let mtime = value("mtime") {
            guard let parsed = TarTime(pax: mtime) else {
                throw TarError.corrupt(offset: offset, reason: "member \(TarName.display(entry.path)) has a bad pax mtime \(TarName.display(mtime))")
            }
            entry.mtime = parsed
        }
        if !state.pax.isEmpty { state.pax.removeAll() }
        state.longName = nil
        state.longLink = nil
        state.members += 1

        // Only these carry data; for links, directories and devices the size field is ignored.
        let dataSize: UInt64
        switch entry.kind {
        case .regular, .skipped: dataSize = entry.size
        default: dataSize = 0
        }
        // v7, old GNU and BSD writers (and Python's tarfile) mark directories by the trailing
        // slash alone, whatever regular type they give: GNU tar and bsdtar extract a directory.
        // Any data it claims is still skipped by its size.
        if entry.kind == .regular, entry.path.last == UInt8(ascii: "/") { entry.kind = .directory }
        entry.size = dataSize
        try handler.tarEntry(entry)
        state.padding = Self.padding(after: dataSize)
        if dataSize == 0 {
            try handler.tarEntryEnd()
            enterPadding()
        } else {
            state.phase = .member
            state.remaining = dataSize
        }
    }

    private mutating func completeExtended() throws(TarError) {
        let content = state.pending
        let start = state.offset &- UInt64(content.count)
        switch state.extendedType {
        case UInt8(ascii: "L"): state.longName = ByteString(TarName.trimmingNULs(content))
        case UInt8(ascii: "K"): state.longLink = ByteString(TarName.trimmingNULs(content))
        case UInt8(ascii: "g"): try PaxRecords.parse(content, into: &state.globalPax, offset: start)
        default: try PaxRecords.parse(content, into: &state.pax, offset: start)
        }
        state.pending.removeAll(keepingCapacity: true)
    }

    static func padding(after size: UInt64) -> UInt32 {
        UInt32((512 - size % 512) % 512)
    }
}

/// Receives what the reader finds, in archive order.
protocol TarEventHandler: AnyObject {
    /// A member's header, with every extended header applied.
    func tarEntry(_ entry: TarEntry) throws
    /// The next bytes of the current member's data.
    func tarData(_ bytes: UnsafeRawBufferPointer) throws
    /// The current member's data is complete.
    func tarEntryEnd() throws
}

/// Why an archive cannot be read.
enum TarError: Error, Equatable {
    /// `offset` counts bytes of the tar stream.
    case corrupt(offset: UInt64, reason: String)
}

/// The reader's exact position: where in the block structure it stands, and what the
/// extended headers seen so far set for the next member (or for all, `g`).
public struct TarReaderState: Codable, Sendable, Equatable {
    public enum Phase: String, Codable, Sendable {
        /// Reading a header block; `pending` holds its bytes so far.
        case header
        /// Reading an extended header's content (`x`, `g`, `L`, `K`); `pending` holds it so far.
        case extended
        /// Inside a member's data, `remaining` bytes of it left.
        case member
        /// Skipping the zeros that fill the last block of a member or extended header.
        case padding
        /// After the first zero block: the next must be zero too.
        case endMarker
        /// After both end-of-archive blocks: only zero padding may follow.
        case end
    }
    public var phase: Phase = .header
    public var pending: [UInt8] = []
    public var remaining: UInt64 = 0
    public var padding: UInt32 = 0
    public var extendedType: UInt8 = 0
    /// From the last `x` header, for the next member only; only the keys untar applies.
    public var pax: [String: ByteString] = [:]
    /// From `g` headers, for every later member.
    public var globalPax: [String: ByteString] = [:]
    public var longName: ByteString?
    public var longLink: ByteString?
    /// Members whose headers have been read.
    public var members: UInt64 = 0
    /// Bytes of the tar stream consumed.
    public var offset: UInt64 = 0

    /// The marker a pax sparse key leaves in `pax`/`globalPax`.
    static let sparseKey = "GNU.sparse"

    public init() {}

    private enum CodingKeys: String, CodingKey {
        case phase, pending, remaining, padding, extendedType, pax, globalPax, longName, longLink, members, offset
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        phase = try c.decode(Phase.self, forKey: .phase)
        pending = try c.decode(ByteString.self, forKey: .pending).bytes
        remaining = try c.decode(UInt64.self, forKey: .remaining)
        padding = try c.decode(UInt32.self, forKey: .padding)
        extendedType = try c.decode(UInt8.self, forKey: .extendedType)
        pax = try c.decode([String: ByteString].self, forKey: .pax)
        globalPax = try c.decode([String: ByteString].self, forKey: .globalPax)
        longName = try c.decodeIfPresent(ByteString.self, forKey: .longName)
        longLink = try c.decodeIfPresent(ByteString.self, forKey: .longLink)
        members = try c.decode(UInt64.self, forKey: .members)
        offset = try c.decode(UInt64.self, forKey: .offset)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(phase, forKey: .phase)
        try c.encode(ByteString(pending), forKey: .pending)
        try c.encode(remaining, forKey: .remaining)
        try c.encode(padding, forKey: .padding)
        try c.encode(extendedType, forKey: .extendedType)
        try c.encode(pax, forKey: .pax)
        try c.encode(globalPax, forKey: .globalPax)
        try c.encodeIfPresent(longName, forKey: .longName)
        try c.encodeIfPresent(longLink, forKey: .longLink)
        try c.encode(members, forKey: .members)
        try c.encode(offset, forKey: .offset)
    }

    /// A restored state is hostile input: every field must be one the reader could have left.
    func validate() throws(TarError) {
        func refuse(_ why: String) -> TarError { TarError.corrupt(offset: offset, reason: "checkpoint state: \(why)") }
        let extendedTypes: [UInt8] = [UInt8(ascii: "x"), UInt8(ascii: "g"), UInt8(ascii: "L"), UInt8(ascii: "K")]
        switch phase {
        case .header, .endMarker:
            if pending.count >= 512 { throw refuse("a header holds \(Counted.bytes(pending.count))") }
        case .extended:
            guard extendedTypes.contains(extendedType) else { throw refuse("unknown extended header type \(extendedType)") }
            let limit =
                extendedType == UInt8(ascii: "L") || extendedType == UInt8(ascii: "K")
                ? TarReader.maxLongName : TarReader.maxExtendedHeader
            let (total, overflow) = UInt64(pending.count).addingReportingOverflow(remaining)
            if remaining == 0 || overflow || total > limit { throw refuse("extended header size out of bounds") }
        case .member:
            if remaining == 0 || !pending.isEmpty { throw refuse("member phase with nothing left") }
        case .padding:
            if padding == 0 || padding >= 512 || !pending.isEmpty { throw refuse("padding of \(Counted.bytes(padding))") }
        case .end:
            if !pending.isEmpty { throw refuse("bytes pending after the end") }
        }
        if padding >= 512 { throw refuse("padding of \(Counted.bytes(padding))") }
        // Headers and data start on 512-byte boundaries of the stream, and the padding
        // after data ends on one: the offset must agree with the phase's counts.
        let (dataEnd, overflow) = offset.addingReportingOverflow(phase == .padding ? UInt64(padding) : remaining)
        if overflow { throw refuse("offset \(offset) and \(Counted.bytes(remaining)) to come overflow") }
        switch phase {
        case .header, .endMarker:
            if offset % 512 != UInt64(pending.count) { throw refuse("a header's \(Counted.bytes(pending.count)) do not end at offset \(offset)") }
        case .extended, .member:
            if phase == .extended, UInt64(pending.count) > offset || (offset - UInt64(pending.count)) % 512 != 0 {
                throw refuse("an extended header's \(Counted.bytes(pending.count)) do not end at offset \(offset)")
            }
            if padding != TarReader.padding(after: dataEnd) { throw refuse("padding of \(Counted.bytes(padding)) after data ending at \(dataEnd)") }
        case .padding:
            if dataEnd % 512 != 0 { throw refuse("padding of \(Counted.bytes(padding)) from offset \(offset)") }
        case .end:
            if offset < 1024 { throw refuse("the end of the archive at offset \(offset)") }
        }
        if members > TarReader.maxMembers { throw refuse("too many members") }
        let allowed: Set<String> = ["path", "linkpath", "size", "mtime", Self.sparseKey]
        for (key, value) in pax.merging(globalPax, uniquingKeysWith: { a, _ in a }) {
            if !allowed.contains(key) || UInt64(value.bytes.count) > TarReader.maxExtendedHeader {
                throw refuse("pax key '\(TarName.display(Array(key.utf8)))'")
            }
        }
        for name in [longName, longLink].compactMap({ $0 }) where UInt64(name.bytes.count) > TarReader.maxLongName {
            throw refuse("a long name of \(Counted.bytes(name.bytes.count))")
        }
    }
}

/// What kind of thing a member is.
enum TarEntryKind: Equatable {
    case regular, directory, symlink, hardLink, fifo, characterDevice, blockDevice
    /// A type untar does not create (volume labels, unknown vendor types): its data is skipped.
    case skipped(UInt8)
}

/// A second and its fraction, as pax `mtime` carries it.
struct TarTime: Codable, Equatable, Sendable {
    var seconds: Int64
    var nanoseconds: Int32

    /// `[-]digits[.digits]`; fractions beyond nanoseconds are cut off.
    init?(pax value: [UInt8]) {
        var bytes = value[...]
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { bytes = bytes.dropFirst() }
        let dot = bytes.firstIndex(of: UInt8(ascii: "."))
        let whole = dot.map { bytes[..<$0] } ?? bytes
        guard let magnitude = TarNumber.decimal(Array(whole)), magnitude <= UInt64(Int64.max) else { return nil }
        var nanos: Int64 = 0
        if let dot {
            let fraction = bytes[(dot + 1)...]
            guard !fraction.isEmpty, fraction.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            var scale: Int64 = 100_000_000
            for digit in fraction.prefix(9) {
                nanos += Int64(digit - 0x30) * scale
                scale /= 10
            }
        }
        if negative {
            // -1.25 is 1.25 s before the epoch: -2 s + 0.75 s.
            seconds = -Int64(magnitude) - (nanos > 0 ? 1 : 0)
            nanoseconds = Int32(nanos > 0 ? 1_000_000_000 - nanos : 0)
        } else {
            seconds = Int64(magnitude)
            nanoseconds = Int32(nanos)
        }
    }

    init(seconds: Int64, nanoseconds: Int32) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }
}

/// One member, with every extended header applied. Names are raw bytes as the archive has them.
struct TarEntry: Equatable {
    var path: [UInt8]
    var linkTarget: [UInt8]
    var kind: TarEntryKind
    var mode: UInt32
    var mtime: TarTime
    /// Bytes of data that follow the header.
    var size: UInt64
    /// 0-based position among the archive's members.
    var index: UInt64
    /// Where its header block starts in the tar stream (after any extended headers).
    var offset: UInt64
}

/// The fields of one 512-byte header block.
struct TarHeader {
    var name: [UInt8]
    var linkName: [UInt8]
    var mode: UInt32
    var size: UInt64
    var mtime: Int64
    var typeflag: UInt8
    var kind: TarEntryKind

    init(_ block: UnsafeRawBufferPointer, offset: UInt64) throws(TarError) {
        func field(_ start: Int, _ length: Int) -> UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(rebasing: block[start..<(start + length)])
        }
        guard let stored = TarNumber.parse(field(148, 8)) else {
            throw TarError.corrupt(offset: offset, reason: "a header's checksum field is not a number (not a tar archive, or damaged)")
        }
        // The checksum field counts as eight spaces. Some old writers summed signed bytes.
        var unsigned: Int64 = 8 * 32
        for i in 0..<512 { unsigned += Int64(block[i]) }
        for i in 148..<156 { unsigned -= Int64(block[i]) }
        guard stored == unsigned || stored == Self.signedChecksum(block) else {
            throw TarError.corrupt(offset: offset, reason: "header checksum mismatch (stored \(stored), computed \(unsigned))")
        }
        let isPOSIX =
            block[257] == UInt8(ascii: "u") && block[258] == UInt8(ascii: "s") && block[259] == UInt8(ascii: "t")
            && block[260] == UInt8(ascii: "a") && block[261] == UInt8(ascii: "r") && block[262] == 0
        var name = TarName.cString(field(0, 100))
        if isPOSIX {
            let prefix = TarName.cString(field(345, 155))
            if !prefix.isEmpty { name = prefix + [UInt8(ascii: "/")] + name }
        }
        self.name = name
        linkName = TarName.cString(field(157, 100))
        typeflag = block[156]
        func number(_ start: Int, _ length: Int, _ what: String) throws(TarError) -> Int64 {
            guard let n = TarNumber.parse(field(start, length)) else {
                throw TarError.corrupt(offset: offset, reason: "member \(TarName.display(name)) has a bad \(what) field")
            }
            return n
        }
        mode = UInt32(truncatingIfNeeded: try number(100, 8, "mode") & 0o7777)
        let size = try number(124, 12, "size")
        guard size >= 0 else { throw TarError.corrupt(offset: offset, reason: "member \(TarName.display(name)) has a negative size") }
        self.size = UInt64(size)
        mtime = try number(136, 12, "mtime")
        switch typeflag {
        case 0, UInt8(ascii: "0"), UInt8(ascii: "7"): kind = .regular
        case UInt8(ascii: "1"): kind = .hardLink
        case UInt8(ascii: "2"): kind = .symlink
        case UInt8(ascii: "3"): kind = .characterDevice
        case UInt8(ascii: "4"): kind = .blockDevice
        case UInt8(ascii: "5"), UInt8(ascii: "D"): kind = .directory
        case UInt8(ascii: "6"): kind = .fifo
        default: kind = .skipped(typeflag)
        }
        // GNU dumpdir ('D') data lists the directory's contents: skipped, never interpreted.
        if typeflag == UInt8(ascii: "D") { kind = .skipped(typeflag) }
    }

    private static func signedChecksum(_ block: UnsafeRawBufferPointer) -> Int64 {
        var signed: Int64 = 8 * 32
        for i in 0..<512 where i < 148 || i >= 156 { signed += Int64(Int8(bitPattern: block[i])) }
        return signed
    }
}

/// Numeric header fields: octal text, or GNU base-256 when the first byte's top bit is set.
enum TarNumber {
    static func parse(_ field: UnsafeRawBufferPointer) -> Int64? {
        guard let first = field.first else { return nil }
        if first & 0x80 != 0 { return base256(field) }
        var i = 0
        while i < field.count, field[i] == UInt8(ascii: " ") { i += 1 }
        var value: Int64 = 0
        while i < field.count, field[i] >= UInt8(ascii: "0"), field[i] <= UInt8(ascii: "7") {
            // At most 12 octal digits fit a field: no overflow is possible.
            value = value * 8 + Int64(field[i] - UInt8(ascii: "0"))
            i += 1
        }
        // Only terminators may follow the digits (an all-NUL field is 0, as v7 writers leave it).
        while i < field.count {
            guard field[i] == 0 || field[i] == UInt8(ascii: " ") else { return nil }
            i += 1
        }
        return value
    }

    /// Big-endian two's complement with the marker bit; values outside Int64 are refused.
    private static func base256(_ field: UnsafeRawBufferPointer) -> Int64? {
        let negative = field[0] & 0x40 != 0
        var value: UInt64 = negative ? UInt64.max : 0
        for (index, raw) in field.enumerated() {
            let byte = index == 0 ? (negative ? raw | 0x80 : raw & 0x7f) : raw
            // The bits shifted out must be pure sign extension.
            let top = UInt8(truncatingIfNeeded: value >> 56)
            guard top == (negative ? 0xff : 0) else { return nil }
            value = value << 8 | UInt64(byte)
        }
        let signed = Int64(bitPattern: value)
        guard (signed < 0) == negative else { return nil }
        return signed
    }

    /// Decimal digits only (pax sizes), refusing overflow.
    static func decimal(_ bytes: [UInt8]) -> UInt64? {
        guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
        var value: UInt64 = 0
        for byte in bytes {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(byte - 0x30))
            guard !o1, !o2 else { return nil }
            value = sum
        }
        return value
    }
}

/// pax extended header records: `LENGTH KEY=VALUE\n`, LENGTH counting the whole record.
enum PaxRecords {
    static func parse(_ content: [UInt8], into values: inout [String: ByteString], offset: UInt64) throws(TarError) {
        var at = 0
        while at < content.count {
            // Some writers pad the content with NULs.
            if content[at] == 0, content[at...].allSatisfy({ $0 == 0 }) { return }
            guard let space = content[at...].prefix(21).firstIndex(of: UInt8(ascii: " ")),
                let length = TarNumber.decimal(Array(content[at..<space])),
                length > UInt64(space - at + 1), length <= UInt64(content.count - at)
            else {
                throw TarError.corrupt(offset: offset + UInt64(at), reason: "a pax extended header record has a bad length")
            }
            let end = at + Int(length)
            guard content[end - 1] == UInt8(ascii: "\n"),
                let equals = content[(space + 1)..<(end - 1)].firstIndex(of: UInt8(ascii: "="))
            else {
                throw TarError.corrupt(offset: offset + UInt64(at), reason: "a pax extended header record is malformed")
            }
            let key = String(decoding: content[(space + 1)..<equals], as: UTF8.self)
            let value = ByteString(Array(content[(equals + 1)..<(end - 1)]))
            switch key {
            case "path", "linkpath", "size", "mtime": values[key] = value
            case _ where key.hasPrefix("GNU.sparse."): values[TarReaderState.sparseKey] = ByteString([UInt8(ascii: "1")])
            default: break  // atime, ctime, uid, gid, uname, gname, charset, comment, vendor keys: not applied
            }
            at = end
        }
    }
}
