import Foundation

/// What `fetch` accepts: an absolute http, https or file URL.
enum URLCheck {
    static let schemes = ["http", "https", "file"]

    static func validate(_ token: SpecToken) throws(SpecError) {
        let text = token.text
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw SpecError("'\(text)' is not a valid URL", at: token)
        }
        // What libcurl will be given must also parse there (ports, spaces, …).
        guard schemes.contains(scheme) == false || FetchURL(text) != nil else {
            throw SpecError("'\(text)' is not a URL libcurl accepts", at: token)
        }
        guard schemes.contains(scheme) else {
            throw SpecError("unsupported URL scheme '\(scheme)' (fetch takes http, https or file URLs)", at: token)
        }
        if scheme == "file" {
            guard !components.path.isEmpty else { throw SpecError("'\(text)' names no file", at: token) }
        } else {
            guard let host = components.host, !host.isEmpty else {
                throw SpecError("'\(text)' has no host", at: token)
            }
        }
    }
}
