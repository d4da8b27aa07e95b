/// The rules for following a redirect by hand (libcurl's FOLLOWLOCATION is off, so these
/// decisions are Sluice's): a hop limit, no downgrade from https, no scheme other than
/// http(s), and the user's credentials only ever sent to the origin they were given for.
struct RedirectPolicy {
    static let maxRedirects = 10
    /// Header names whose values are secrets bound to the original host (compared lowercased).
    static let credentialHeaders: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    /// The URL the user asked for; its origin is the only one credentials go to.
    let original: FetchURL

    /// Where a `Location` from `current` leads, or why it is refused. `hops` counts this one.
    func follow(_ location: String, from current: FetchURL, hops: Int) throws(FetchFailure) -> FetchURL {
        func refused(_ reason: String) -> FetchFailure { .permanent(.redirect(reason: reason)) }
        guard hops <= Self.maxRedirects else {
            throw refused(
                "too many redirects (more than \(Self.maxRedirects)); the last one, from"
                    + " \(DisplayText.url(current.text)), pointed to \(DisplayText.url(DisplayText.quoted(location)))")
        }
        let server = DisplayText.escaped(current.authority)
        guard let next = current.resolving(location) else {
            throw refused("\(server) redirected to '\(DisplayText.url(DisplayText.quoted(location)))', which is not a valid URL")
        }
        guard next.scheme == "http" || next.scheme == "https" else {
            throw refused("\(server) redirected to \(DisplayText.url(next.text)); only http and https redirects are followed")
        }
        if current.scheme == "https" && next.scheme == "http" {
            throw refused("refusing the redirect from \(DisplayText.url(current.text)) to insecure \(DisplayText.url(next.text))")
        }
        return next
    }

    /// The user's headers as sent to `url`: credentials are dropped on any other origin.
    func headers(_ userHeaders: [String], for url: FetchURL) -> [String] {
        guard url.origin != original.origin else { return userHeaders }
        return userHeaders.filter { !Self.credentialHeaders.contains(Self.name(of: $0)) }
    }

    /// The lowercased field name of a `Name: value` line (libcurl also accepts `Name;`).
    static func name(of header: String) -> String {
        let end = header.firstIndex(where: { $0 == ":" || $0 == ";" }) ?? header.endIndex
        return header[..<end].filter { $0 != " " && $0 != "\t" }.lowercased()
    }
}
