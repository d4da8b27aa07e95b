import CCurl

/// A URL as libcurl parses it: scheme and authority for redirect and credential decisions,
/// relative `Location` values resolved exactly as libcurl itself would.
struct FetchURL: Equatable {
    /// The normalised URL libcurl is asked for.
    let text: String
    /// Lowercased: http, https or file.
    let scheme: String
    /// Lowercased host name or address ("" for file://).
    let host: String
    /// host[:port] as written, for messages ("127.0.0.1:8080", "example.org").
    let authority: String
    /// host:port with the scheme's default port filled in: credentials stay within one origin.
    let origin: String
    /// The query string without its `?`, nil when there is none.
    let query: String?
    /// The port, the scheme's default filled in (nil for file://).
    let port: Int?
    /// file:// only: the local path, percent-decoded (nil for other schemes).
    let localPath: String?

    /// Parses an absolute URL; nil when libcurl rejects it.
    init?(_ text: String) {
        self.init(text, relativeTo: nil)
    }

    /// A redirect target: `location` (absolute or relative) resolved against this URL.
    func resolving(_ location: String) -> FetchURL? {
        FetchURL(location, relativeTo: self)
    }

    var isFile: Bool { scheme == "file" }

    /// Why libcurl cannot be used (it is opened on first use), or nil when it can: without
    /// it no URL parses, and the user must hear about the library, not the URL.
    static var libcurlUnavailable: String? {
        sluice_curl_unavailable().map { "fetch needs libcurl (libcurl.so.4), which could not be loaded: " + String(cString: $0) }
    }

    private init?(_ text: String, relativeTo base: FetchURL?) {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        if let base {
            guard base.text.withCString({ curl_url_set(handle, CURLUPART_URL, $0, 0) }) == CURLUE_OK
            else { return nil }
        }
        // As libcurl's own redirect code does: tolerate spaces, percent-encode what needs it.
        let flags = base == nil ? UInt32(0) : UInt32(CURLU_URLENCODE | CURLU_ALLOW_SPACE)
        guard text.withCString({ curl_url_set(handle, CURLUPART_URL, $0, flags) }) == CURLUE_OK,
            let full = Self.part(handle, CURLUPART_URL),
            let scheme = Self.part(handle, CURLUPART_SCHEME)?.lowercased()
        else { return nil }
        self.text = full
        self.scheme = scheme
        let host = Self.part(handle, CURLUPART_HOST)?.lowercased() ?? ""
        self.host = host
        let explicitPort = Self.part(handle, CURLUPART_PORT)
        let port = explicitPort ?? Self.part(handle, CURLUPART_PORT, flags: UInt32(CURLU_DEFAULT_PORT)) ?? ""
        authority = explicitPort.map { "\(host):\($0)" } ?? host
        origin = "\(host):\(port)"
        self.port = Int(port)
        query = Self.part(handle, CURLUPART_QUERY)
        localPath = scheme == "file" ? Self.part(handle, CURLUPART_PATH, flags: UInt32(CURLU_URLDECODE)) : nil
    }

    private static func part(_ handle: OpaquePointer, _ what: CURLUPart, flags: UInt32 = 0) -> String? {
        var value: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, what, &value, flags) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value)
    }
}
