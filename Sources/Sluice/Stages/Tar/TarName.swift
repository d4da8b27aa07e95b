import Foundation

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
struct MemberPath: Equatable, Hashable {
    /// Empty: DIR itself.
    var components: [[UInt8]]

    static let maxLength = 4096
    static let maxComponent = 255

    /// `raw` with `strip` leading components dropped (as `tar --strip-components`),
    /// nil when nothing is left of it.
    static func member(_ raw: [UInt8], strip: Int) throws(PathRefusal) -> MemberPath? {
        try checkCharacters(raw, what: "name")
        guard raw.first != UInt8(ascii: "/") else { throw PathRefusal("is an absolute name") }
        var parts = raw.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true)
        if strip > 0 {
            guard parts.count > strip else { return nil }
            parts.removeFirst(strip)
        }
        var components: [[UInt8]] = []
        for part in parts {
            if part.count == 1 && part.first == UInt8(ascii: ".") { continue }
            if part.count == 2 && part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                guard !components.isEmpty else { throw PathRefusal("has '..' that leaves the destination") }
                components.removeLast()
                continue
            }
            guard part.count <= maxComponent else { throw PathRefusal("has a component longer than \(maxComponent) bytes") }
            components.append(Array(part))
        }
        return MemberPath(components: components)
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
        guard bytes.count <= maxLength else { throw PathRefusal("has a \(what) longer than \(maxLength) bytes") }
        guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x7f }) else {
            throw PathRefusal("has a \(what) with a NUL, newline or other control character")
        }
    }

    /// `a/b/c`, without a terminating NUL.
    var joined: [UInt8] {
        var out: [UInt8] = []
        for (i, c) in components.enumerated() {
            if i > 0 { out.append(UInt8(ascii: "/")) }
            out += c
        }
        return out
    }

    /// Re-parses a path recorded in a checkpoint; it must already be in normal form.
    static func restored(_ bytes: [UInt8]) -> MemberPath? {
        if bytes.isEmpty { return MemberPath(components: []) }
        guard let path = try? member(bytes, strip: 0), path.joined == bytes, !path.components.isEmpty else { return nil }
        return path
    }
}

/// Why a member is refused (the sink adds the member's name and offset).
struct PathRefusal: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
