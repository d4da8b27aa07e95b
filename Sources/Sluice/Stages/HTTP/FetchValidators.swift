/// What identifies one version of a remote resource: the validators a resume compares
/// before it splices new bytes onto old ones.
struct FetchValidators: Sendable, Equatable {
    var etag: String?
    var lastModified: String?
    var totalLength: UInt64?
    /// Last-Modified is a strong validator (see `SourceState.lastModifiedIsStrong`).
    var lastModifiedIsStrong: Bool

    init(etag: String? = nil, lastModified: String? = nil, totalLength: UInt64? = nil, lastModifiedIsStrong: Bool = false) {
        self.etag = etag
        self.lastModified = lastModified
        self.totalLength = totalLength
        self.lastModifiedIsStrong = lastModifiedIsStrong
    }

    init(_ state: SourceState) {
        self.init(
            etag: state.etag, lastModified: state.lastModified, totalLength: state.totalLength,
            lastModifiedIsStrong: state.lastModifiedIsStrong ?? false)
    }

    /// Whether there is anything but the length to tell versions apart.
    var hasValidator: Bool { etag != nil || lastModified != nil }

    /// The `If-Range` value (RFC 9110 §13.1.5): only a strong validator may be used there —
    /// a strong ETag, else a Last-Modified date shown to be strong. Otherwise none is sent,
    /// and the response's own validators are checked instead (ResumeJudge).
    var ifRange: String? {
        if let etag, !Self.isWeak(etag) { return etag }
        return lastModifiedIsStrong ? lastModified : nil
    }

    /// Why `seen` cannot be the version these validators describe, or nil when nothing
    /// contradicts it. ETags are compared weakly (RFC 9110 §8.8.3.2: `W/"x"` and `"x"` name
    /// the same entity — Apache marks an ETag weak for a second after a file changes); equal
    /// strong ETags decide alone (servers behind a load balancer may disagree on dates),
    /// otherwise Last-Modified counts too; lengths always count.
    func contradiction(by seen: FetchValidators) -> String? {
        var etagsDecide = false
        if let old = etag, let new = seen.etag {
            if Self.opaque(old) != Self.opaque(new) {
                return "its ETag changed from \(DisplayText.quoted(old)) to \(DisplayText.quoted(new))"
            }
            etagsDecide = !Self.isWeak(old) && !Self.isWeak(new)
        }
        if !etagsDecide, let old = lastModified, let new = seen.lastModified, old != new {
            return "its Last-Modified changed from \(DisplayText.quoted(old)) to \(DisplayText.quoted(new))"
        }
        if let old = totalLength, let new = seen.totalLength, old != new {
            return "its length changed from \(Counted.bytes(old)) to \(Counted.bytes(new))"
        }
        return nil
    }

    /// True when a validator positively identifies `seen` as this version, byte for byte:
    /// equal strong ETags (strong comparison), or (without them) equal Last-Modified dates.
    func isConfirmed(by seen: FetchValidators) -> Bool {
        guard contradiction(by: seen) == nil else { return false }
        if let old = etag, let new = seen.etag, !Self.isWeak(old), !Self.isWeak(new) { return true }
        if let old = lastModified, let new = seen.lastModified { return old == new }
        return false
    }

    /// The stricter proof a refreshed URL needs (its query may now sign another object):
    /// equal strong ETags, or equal Last-Modified dates and equal total lengths.
    func proves(_ seen: FetchValidators) -> Bool {
        guard contradiction(by: seen) == nil else { return false }
        if let old = etag, let new = seen.etag, !Self.isWeak(old), !Self.isWeak(new) { return true }
        guard let old = lastModified, let new = seen.lastModified, old == new,
            let oldLength = totalLength, let newLength = seen.totalLength
        else { return false }
        return oldLength == newLength
    }

    private static func isWeak(_ etag: String) -> Bool { etag.hasPrefix("W/") }

    /// The tag without its weakness mark, for the weak comparison.
    private static func opaque(_ etag: String) -> Substring {
        isWeak(etag) ? etag.dropFirst(2) : etag[...]
    }
}
