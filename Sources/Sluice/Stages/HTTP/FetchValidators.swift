/// What identifies one version of a remote resource: the validators a resume compares
/// before it splices new bytes onto old ones.
struct FetchValidators: Sendable, Equatable {
    var etag: String?
    var lastModified: String?
    var totalLength: UInt64?

    init(etag: String? = nil, lastModified: String? = nil, totalLength: UInt64? = nil) {
        self.etag = etag
        self.lastModified = lastModified
        self.totalLength = totalLength
    }

    init(_ state: SourceState) {
        self.init(etag: state.etag, lastModified: state.lastModified, totalLength: state.totalLength)
    }

    /// The `If-Range` value: only a strong ETag may be used there (RFC 9110 §13.1.5),
    /// otherwise the Last-Modified date.
    var ifRange: String? {
        if let etag, !Self.isWeak(etag) { return etag }
        return lastModified
    }

    /// Why `seen` cannot be the version these validators describe, or nil when nothing
    /// contradicts it. The ETag decides when both sides have one (servers behind a load
    /// balancer may disagree on dates); otherwise Last-Modified does; lengths always count.
    func contradiction(by seen: FetchValidators) -> String? {
        if let old = etag, let new = seen.etag {
            if old != new { return "its ETag changed from \(old) to \(new)" }
        } else if let old = lastModified, let new = seen.lastModified, old != new {
            return "its Last-Modified changed from \(old) to \(new)"
        }
        if let old = totalLength, let new = seen.totalLength, old != new {
            return "its length changed from \(old) to \(new) bytes"
        }
        return nil
    }

    /// True when a validator positively identifies `seen` as this version, byte for byte:
    /// equal strong ETags, or (without comparable ETags) equal Last-Modified dates.
    func isConfirmed(by seen: FetchValidators) -> Bool {
        guard contradiction(by: seen) == nil else { return false }
        if let old = etag, let new = seen.etag, !Self.isWeak(old), !Self.isWeak(new) { return true }
        if let old = lastModified, let new = seen.lastModified { return old == new }
        return false
    }

    private static func isWeak(_ etag: String) -> Bool { etag.hasPrefix("W/") }
}
