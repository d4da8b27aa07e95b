import CZlib
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// One entry of an extracted tree, as the untar tests compare them with GNU tar's and
/// bsdtar's extractions: type, permission bits, mtime, contents, link target, link count.
struct TreeEntry: Equatable, CustomStringConvertible {
    var type: Character  // f, d, l, or ? for anything else
    var permissions: UInt32
    var mtime: Int64
    var mtimeNanoseconds: Int
    var size: Int64
    var crc: UInt32
    var linkTarget: String?
    var linkCount: UInt64

    var description: String {
        "\(type) \(String(permissions, radix: 8)) mtime=\(mtime).\(mtimeNanoseconds) size=\(size) crc=\(crc)"
            + (linkTarget.map { " -> \($0)" } ?? "") + (type == "f" ? " nlink=\(linkCount)" : "")
    }
}

/// Every entry under `root` (not `root` itself unless `includeRoot`), by relative path.
/// Never follows a symlink. `directoryMtimes: false` leaves directories' mtimes out.
func treeSnapshot(_ root: String, includeRoot: Bool = false, directoryMtimes: Bool = true) -> [String: TreeEntry] {
    var out: [String: TreeEntry] = [:]
    func entry(_ path: String) -> TreeEntry? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        let format = st.st_mode & S_IFMT
        let type: Character = format == S_IFREG ? "f" : format == S_IFDIR ? "d" : format == S_IFLNK ? "l" : "?"
        var crcValue: UInt32 = 0
        if type == "f", let data = FileManager.default.contents(atPath: path) {
            crcValue = data.withUnsafeBytes { UInt32(crc32(0, $0.bindMemory(to: Bytef.self).baseAddress, uInt($0.count))) }
        }
        var target: String?
        if type == "l" { target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) }
        let keepTime = type != "d" || directoryMtimes
        return TreeEntry(
            type: type, permissions: type == "l" ? 0 : UInt32(st.st_mode & 0o7777),
            mtime: keepTime ? Int64(st.st_mtim.tv_sec) : 0, mtimeNanoseconds: keepTime ? st.st_mtim.tv_nsec : 0,
            size: type == "f" ? Int64(st.st_size) : 0, crc: crcValue, linkTarget: target,
            linkCount: type == "f" ? UInt64(st.st_nlink) : 0)
    }
    func walk(_ relative: String) {
        let full = relative.isEmpty ? root : root + "/" + relative
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: full) else { return }
        for name in names {
            let child = relative.isEmpty ? name : relative + "/" + name
            guard let e = entry(root + "/" + child) else { continue }
            out[child] = e
            if e.type == "d" { walk(child) }
        }
    }
    if includeRoot, let e = entry(root) { out["."] = e }
    walk("")
    return out
}

/// The differences between two snapshots, one line each, for a readable failure.
func treeDifferences(_ expected: [String: TreeEntry], _ actual: [String: TreeEntry], limit: Int = 20) -> [String] {
    var lines: [String] = []
    for name in Set(expected.keys).union(actual.keys).sorted() where expected[name] != actual[name] {
        lines.append("\(name): expected \(expected[name].map(\.description) ?? "nothing"), got \(actual[name].map(\.description) ?? "nothing")")
        if lines.count == limit { break }
    }
    return lines
}

/// A source-tree-like directory: nested directories, files of many sizes (some empty,
/// some large), long and UTF-8 names, symlinks, hard links, odd modes, fractional mtimes.
func makeSourceTree(
    at root: String, files: Int, seed: UInt64, largeFile: Int = 0, longNames: Bool = true,
    sizeDivisor: Int = 1
) throws {
    var random = SeededRandom(seed: seed)
    let fm = FileManager.default
    try fm.createDirectory(atPath: root, withIntermediateDirectories: true)
    var directories = [""]
    let words = ["src", "lib", "include", "tests", "docs", "util", "core", "net", "fs", "übersetzung", "数据", "a"]
    for i in 0..<files {
        if i % 12 == 0 || directories.count < 3 {
            let parent = directories[Int(random.next() % UInt64(directories.count))]
            let depth = parent.split(separator: "/").count
            var name = words[Int(random.next() % UInt64(words.count))] + "\(i)"
            if longNames && i % 97 == 5 { name += String(repeating: "x", count: 120) }  // > 100 bytes
            let path = depth > 14 ? "" + name : (parent.isEmpty ? name : parent + "/" + name)
            try fm.createDirectory(atPath: root + "/" + path, withIntermediateDirectories: true)
            directories.append(path)
        }
        let dir = directories[Int(random.next() % UInt64(directories.count))]
        let prefix = dir.isEmpty ? "" : dir + "/"
        let r = random.next() % 100
        let size: Int = (r < 8 ? 0 : r < 70 ? Int(random.next() % 4000) : r < 97 ? Int(random.next() % 60_000) : Int(random.next() % 600_000)) / sizeDivisor
        let name = prefix + "file\(i)" + (i % 50 == 7 ? ".ünïcødé" : ".c")
        let bytes = makeTestData(count: size, seed: random.next())
        guard fm.createFile(atPath: root + "/" + name, contents: Data(bytes)) else {
            throw CocoaError(.fileWriteUnknown)
        }
        let modes: [mode_t] = [0o644, 0o644, 0o755, 0o600, 0o444, 0o640]
        chmod(root + "/" + name, modes[Int(random.next() % UInt64(modes.count))])
        var times = [
            timespec(tv_sec: 1_600_000_000 + Int(random.next() % 100_000_000), tv_nsec: Int(random.next() % 1_000_000_000)),
            timespec(tv_sec: 1_600_000_000 + Int(random.next() % 100_000_000), tv_nsec: Int(random.next() % 1_000_000_000)),
        ]
        utimensat(AT_FDCWD, root + "/" + name, &times, 0)
        if i % 40 == 3 { symlink("file\(i)" + (i % 50 == 7 ? ".ünïcødé" : ".c"), root + "/" + prefix + "link\(i)") }
        if i % 55 == 4 { link(root + "/" + name, root + "/" + prefix + "hard\(i)") }
    }
    if largeFile > 0 {
        try Data(makeTestData(count: largeFile, seed: seed ^ 0xFF)).write(to: URL(fileURLWithPath: root + "/large.bin"))
    }
    // A very long path (> 255 bytes) and an empty directory.
    try fm.createDirectory(atPath: root + "/empty-dir", withIntermediateDirectories: true)
    if longNames {
        let deep = (0..<6).map { "deep-directory-name-\($0)-" + String(repeating: "d", count: 40) }.joined(separator: "/")
        try fm.createDirectory(atPath: root + "/" + deep, withIntermediateDirectories: true)
        _ = fm.createFile(atPath: root + "/" + deep + "/leaf-with-a-long-name-" + String(repeating: "l", count: 100), contents: Data("deep".utf8))
    }
    // Directory modes and mtimes last, after their contents.
    for dir in directories.reversed() where !dir.isEmpty {
        var times = [timespec(tv_sec: 1_500_000_000, tv_nsec: 0), timespec(tv_sec: 1_500_000_000 + Int(random.next() % 1000), tv_nsec: 0)]
        let modes: [mode_t] = [0o755, 0o755, 0o750, 0o555, 0o700]
        chmod(root + "/" + dir, modes[Int(random.next() % UInt64(modes.count))])
        utimensat(AT_FDCWD, root + "/" + dir, &times, 0)
    }
}

/// A temporary directory on tmpfs when there is one (/dev/shm): tests that finish many
/// extractions would otherwise wait on every `syncfs` of a shared disk.
func makeMemoryTemporaryDirectory(_ test: XCTestCase) throws -> String {
    guard access("/dev/shm", W_OK) == 0 else { return try makeTemporaryDirectory(test) }
    let path = "/dev/shm/sluice-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    test.addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
    return path
}
