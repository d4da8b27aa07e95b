import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import SluiceTestSupport

/// Names, types, sizes, modes, modification times and (small) contents of everything in a directory.
struct DirectorySnapshot: Equatable {
    struct Entry: Equatable {
        var type: UInt32
        var size: Int64
        var mode: UInt32
        var modified: Int64
        var contents: Data?
    }

    var entries: [String: Entry] = [:]

    init(_ directory: String) throws {
        for name in try FileManager.default.subpathsOfDirectory(atPath: directory) {
            let path = directory + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            let type = UInt32(st.st_mode) & UInt32(S_IFMT)
            let small = type == UInt32(S_IFREG) && st.st_size <= 8 << 20
            entries[name] = Entry(
                type: type, size: Int64(st.st_size), mode: UInt32(st.st_mode),
                modified: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec),
                contents: small ? FileManager.default.contents(atPath: path) : nil)
        }
    }

    var names: [String] { entries.keys.sorted() }

    func differences(from before: DirectorySnapshot) -> String {
        var notes: [String] = []
        for name in Set(entries.keys).union(before.entries.keys).sorted() {
            switch (before.entries[name], entries[name]) {
            case (nil, _?): notes.append("created \(name)")
            case (_?, nil): notes.append("removed \(name)")
            case let (old?, new?) where old != new:
                notes.append("changed \(name) (size \(old.size) → \(new.size), mtime \(old.modified) → \(new.modified))")
            default: break
            }
        }
        return notes.isEmpty ? "no differences" : notes.joined(separator: "; ")
    }
}

/// A data file and its gzip, generated at test time: runs of random bytes (real work for
/// the inflater, little compression) between runs of number text.
struct MixedGzipFixture: Sendable {
    var directory: String
    var raw: String
    var gz: String
    var rawDigest: String
    var gzDigest: String

    /// `chunks` × ~2.3 MB of data (1.2 MB random, ~1.1 MB text), compressed with gzip -1.
    static func make(name: String, chunks: Int) throws -> MixedGzipFixture {
        let directory = NSTemporaryDirectory() + "sluice-fixture-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let raw = directory + "/" + name, gz = raw + ".gz"
        let script = """
            set -e -o pipefail
            for i in $(seq 1 \(chunks)); do
              head -c 1200000 /dev/urandom
              seq $((i * 1000000)) $((i * 1000000 + 150000))
            done > '\(raw)'
            gzip -1 -k -f '\(raw)'
            """
        let result = try shell(script, capture: true)
        guard result.status == 0, FileManager.default.fileExists(atPath: gz) else {
            throw FixtureError("could not generate \(gz): \(result.output)")
        }
        return MixedGzipFixture(
            directory: directory, raw: raw, gz: gz,
            rawDigest: try sha256Hex(ofFile: raw), gzDigest: try sha256Hex(ofFile: gz))
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}

struct FixtureError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Fixtures made once per test process, on first use, and removed when it exits.
final class FixtureCache: @unchecked Sendable {
    private let lock = NSLock()
    private var made: [String: MixedGzipFixture] = [:]
    private var cleanupRegistered = false

    static let shared = FixtureCache()

    func get(_ key: String, make: () throws -> MixedGzipFixture) throws -> MixedGzipFixture {
        lock.lock()
        defer { lock.unlock() }
        if let fixture = made[key] { return fixture }
        if !cleanupRegistered {
            cleanupRegistered = true
            atexit { FixtureCache.shared.removeAll() }
        }
        let fixture = try make()
        made[key] = fixture
        return fixture
    }

    func removeAll() {
        lock.lock()
        defer { lock.unlock() }
        for fixture in made.values { fixture.remove() }
        made = [:]
    }
}

extension MixedGzipFixture {
    static func shared(_ name: String, chunks: Int) throws -> MixedGzipFixture {
        try FixtureCache.shared.get("\(name)/\(chunks)") { try make(name: name, chunks: chunks) }
    }

    /// ≥ 100 MB of gzip (70 × ~1.55 MB), ~177 MB of data.
    static func big() throws -> MixedGzipFixture {
        try shared("big", chunks: 70)
    }
}

func fileSize(_ path: String) throws -> UInt64 {
    var st = stat()
    guard stat(path, &st) == 0 else { throw FixtureError("cannot stat \(path): \(String(cString: strerror(errno)))") }
    return UInt64(st.st_size)
}

/// `cmp -s a b`.
func filesEqual(_ a: String, _ b: String) throws -> Bool {
    try shell("cmp -s '\(a)' '\(b)'").status == 0
}

extension Data {
    /// `text` compressed by the gzip CLI.
    init(gzipped text: String) {
        let directory = NSTemporaryDirectory() + "sluice-gz-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try? text.write(toFile: directory + "/t", atomically: true, encoding: .utf8)
        _ = try? shell("gzip -n '\(directory)/t'")
        self = FileManager.default.contents(atPath: directory + "/t.gz") ?? Data()
    }
}
