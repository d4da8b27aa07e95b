#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// Raw bytes (a name, a partial header) carried through a checkpoint as base64:
/// Linux names are bytes, not necessarily UTF-8.
public struct ByteString: Codable, Sendable, Equatable, Hashable {
    public var bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public init(from decoder: Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let data = Data(base64Encoded: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not base64"))
        }
        bytes = [UInt8](data)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(Data(bytes).base64EncodedString())
    }
}

/// Byte-level helpers for names as archives store them.
enum TarName {
    /// The bytes of a NUL-terminated header field.
    static func cString(_ field: UnsafeRawBufferPointer) -> [UInt8] {
        let end = field.firstIndex(of: 0) ?? field.count
        return Array(field[..<end])
    }

    /// GNU long names end in NULs, counted in the member size.
    static func trimmingNULs(_ bytes: [UInt8]) -> [UInt8] {
        var end = bytes.count
        while end > 0, bytes[end - 1] == 0 { end -= 1 }
        return Array(bytes[..<end])
    }

    /// A name fit for a one-line message: quoted, with control characters, quotes,
    /// backslashes and bytes that are not UTF-8 escaped (an archive chooses its names).
    static func display(_ bytes: [UInt8]) -> String {
        var out = "'"
        let shown = bytes.prefix(300)
        if let text = String(validating: shown, as: UTF8.self) {
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\\": out += "\\\\"
                case "'": out += "\\'"
                case "\n": out += "\\n"
                case _ where scalar.value < 0x20 || scalar.value == 0x7f || (0x80...0x9f).contains(scalar.value):
                    out += "\\x" + hex(UInt8(truncatingIfNeeded: scalar.value))
                default: out.unicodeScalars.append(scalar)
                }
            }
        } else {
            for byte in shown {
                if byte >= 0x20 && byte < 0x7f && byte != UInt8(ascii: "\\") && byte != UInt8(ascii: "'") {
                    out.unicodeScalars.append(Unicode.Scalar(byte))
                } else {
                    out += "\\x" + hex(byte)
                }
            }
        }
        if bytes.count > shown.count { out += "…" }
        return out + "'"
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 15)]])
    }
}

/// A member name made safe to extract: split into components with `.` and empty ones
/// dropped and `..` resolved lexically (the extractor never follows a symlink inside the
/// tree, so lexical and physical resolution agree). Refuses what the rules forbid.
///
/// Kept as the normalised name itself (`a/b/c`) with where its last component starts:
/// every member makes one, and one array instead of one per component keeps that cheap.
struct MemberPath: Equatable, Hashable {
    /// `a/b/c`, without a terminating NUL; empty: DIR itself.
    let joined: [UInt8]
    /// How many components `joined` has.
    let depth: Int
    /// Where the last component starts in `joined`.
    private let leafStart: Int

    static let maxLength = 4096
    static let maxComponent = 255
    private static let slash = UInt8(ascii: "/")
    private static let dot = UInt8(ascii: ".")

    init(components: [[UInt8]]) {
        var out: [UInt8] = []
        for (i, c) in components.enumerated() {
            if i > 0 { out.append(Self.slash) }
            out += c
        }
        self.init(normalised: out, depth: components.count)
    }

    private init(normalised joined: [UInt8], depth: Int) {
        self.joined = joined
        self.depth = depth
        leafStart = joined.lastIndex(of: Self.slash).map { $0 + 1 } ?? 0
    }

    /// DIR itself.
    var isEmpty: Bool { depth == 0 }

    /// The components, one array each (for the rare paths that walk them).
    var components: [[UInt8]] {
        joined.split(separator: Self.slash).map(Array.init)
    }

    /// The last component; nil for DIR itself.
    var leaf: ArraySlice<UInt8>? { depth == 0 ? nil : joined[leafStart...] }

    /// The directory holding the member, as a name beneath DIR (empty: DIR itself).
    var parent: ArraySlice<UInt8> { joined[..<max(leafStart - 1, 0)] }

    /// `raw` with `strip` leading components dropped (as `tar --strip-components`),
    /// nil when nothing is left of it.
    static func member(_ raw: [UInt8], strip: Int) throws(PathRefusal) -> MemberPath? {
        try checkCharacters(raw, what: "name")
        guard raw.first != slash else { throw PathRefusal("is an absolute name") }
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var depth = 0
        var parts = 0
        var at = 0
        let end = raw.count
        while at < end {
            guard raw[at] != slash else {
                at += 1
                continue
            }
            var stop = at + 1
            while stop < end && raw[stop] != slash { stop += 1 }
            defer { at = stop }
            parts += 1
            // Strip counts the name's non-empty parts as written, `.` and `..` included.
            if parts <= strip { continue }
            let length = stop - at
            if length == 1 && raw[at] == dot { continue }
            if length == 2 && raw[at] == dot && raw[at + 1] == dot {
                guard depth > 0 else { throw PathRefusal("has '..' that leaves the destination") }
                depth -= 1
                out.removeSubrange((out.lastIndex(of: slash) ?? 0)...)
                continue
            }
            guard length <= maxComponent else { throw PathRefusal("has a component longer than \(Counted.bytes(maxComponent))") }
            if depth > 0 { out.append(slash) }
            out.append(contentsOf: raw[at..<stop])
            depth += 1
        }
        // Nothing left after stripping: the member is dropped, as tar does.
        if strip > 0 && parts <= strip { return nil }
        return MemberPath(normalised: out, depth: depth)
    }

    /// Validates a symlink target as the kernel would resolve it from the link's
    /// directory: relative, and every `..` leading (so each one climbs a real directory
    /// this extraction made), never climbing above the destination.
    static func checkSymlinkTarget(_ target: [UInt8], linkDirectoryDepth: Int) throws(PathRefusal) {
        try checkCharacters(target, what: "symlink target")
        guard target.first != UInt8(ascii: "/") else { throw PathRefusal("is a symlink to an absolute path") }
        var climbs = 0
        var sawName = false
        for part in target.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            if part.count == 1 && part.first == UInt8(ascii: ".") { continue }
            if part.count == 2 && part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                // After a name, '..' would climb out of something that may itself be a symlink.
                guard !sawName else { throw PathRefusal("is a symlink whose target has '..' after a name") }
                climbs += 1
                continue
            }
            sawName = true
        }
        guard climbs <= linkDirectoryDepth else { throw PathRefusal("is a symlink whose target leaves the destination") }
    }

    private static func checkCharacters(_ bytes: [UInt8], what: String) throws(PathRefusal) {
        guard !bytes.isEmpty else { throw PathRefusal("has an empty \(what)") }
        guard bytes.count <= maxLength else { throw PathRefusal("has a \(what) longer than \(Counted.bytes(maxLength))") }
        guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x7f }) else {
            throw PathRefusal("has a \(what) with a NUL, newline or other control character")
        }
    }

    /// Re-parses a path recorded in a checkpoint; it must already be in normal form.
    static func restored(_ bytes: [UInt8]) -> MemberPath? {
        if bytes.isEmpty { return MemberPath(components: []) }
        guard let path = try? member(bytes, strip: 0), path.joined == bytes, !path.isEmpty else { return nil }
        return path
    }
}

/// Why a member is refused (the sink adds the member's name and offset).
struct PathRefusal: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
