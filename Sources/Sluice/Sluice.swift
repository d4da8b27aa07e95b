#if !os(Linux)
// openat2, syncfs, /proc/self/fd, ISA-L and the Linux layout of libc: Sluice is Linux-only.
#error("Sluice builds on Linux only")
#endif

import CCrypto
import CCurl
import CIsal
import CZlib

/// Sluice: resumable byte-stream pipelines. Start with `Pipeline`.
public enum Sluice {
    /// The release; the only place it is written (CHANGELOG.md records its history).
    public static let version = "0.2.0"

    /// The C libraries this build runs with, as `name version` pairs: libcurl, OpenSSL,
    /// zlib and ISA-L (whose version is part of every ISA-L checkpoint).
    public static var libraries: [(name: String, version: String)] {
        [
            ("libcurl", Self.curlVersion),
            ("OpenSSL", OpenSSL_version(6).map { String(cString: $0) } ?? "?"),  // 6: OPENSSL_VERSION_STRING, e.g. 3.0.19
            ("zlib", String(cString: zlibVersion())),
            ("ISA-L", "\(ISAL_MAJOR_VERSION).\(ISAL_MINOR_VERSION).\(ISAL_PATCH_VERSION) (built against)"),
        ]
    }

    /// `7.88.1`: curl_version_info's field, not curl_version()'s `libcurl/7.88.1 OpenSSL/…`
    /// text, which initializes LDAP to name its version (SASL plugins and a database
    /// library loaded, half a MiB, to print a line). Every age of the struct has `version`.
    /// Without a loadable libcurl (it is opened on first use), why not.
    private static var curlVersion: String {
        if let reason = sluice_curl_unavailable() { return "not available: " + String(cString: reason) }
        return curl_version_info(CURLVERSION_FIRST)?.pointee.version.map { String(cString: $0) } ?? "?"
    }
}
