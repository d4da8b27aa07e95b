#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// What `fetch` accepts: an absolute http, https or file URL.
enum URLCheck {
    static let schemes = ["http", "https", "file"]

    static func validate(_ text: String) throws(StageWordError) {
        // libcurl takes a C string: everything after a NUL would be dropped, and another URL
        // than the one checked, printed and checkpointed would be fetched.
        guard !text.contains("\0") else { throw StageWordError("a URL cannot contain a NUL byte") }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw StageWordError("'\(DisplayText.url(text))' is not a valid URL")
        }
        // What libcurl will be given must also parse there (ports, spaces, …).
        if schemes.contains(scheme), let reason = FetchURL.libcurlUnavailable { throw StageWordError(reason) }
        guard schemes.contains(scheme) == false || FetchURL(text) != nil else {
            throw StageWordError("'\(DisplayText.url(text))' is not a URL libcurl accepts")
        }
        guard schemes.contains(scheme) else {
            throw StageWordError("unsupported URL scheme '\(scheme)' (fetch takes http, https or file URLs)")
        }
        if scheme == "file" {
            guard !components.path.isEmpty else { throw StageWordError("'\(DisplayText.url(text))' names no file") }
        } else {
            guard let host = components.host, !host.isEmpty else {
                throw StageWordError("'\(DisplayText.url(text))' has no host")
            }
        }
    }
}
