import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// Hostile things to put at a name: FIFOs, device nodes, sockets, links.
enum HostileFile {
    static func fifo(at path: String) throws {
        guard mkfifo(path, 0o600) == 0 else { throw FileSystemFixtureError("mkfifo \(path): \(String(cString: strerror(errno)))") }
    }

    /// A character device node equal to /dev/null (needs root, which the suite runs as):
    /// the test never points sluice at the machine's real /dev/null. (1, 3) in glibc's encoding of small numbers.
    static func nullDevice(at path: String) throws {
        guard mknod(path, S_IFCHR | 0o666, dev_t((1 << 8) | 3)) == 0 else {
            throw FileSystemFixtureError("mknod \(path): \(String(cString: strerror(errno))) (needs root)")
        }
    }

    /// A bound Unix socket; the descriptor is closed when the test ends, the name stays.
    static func socket(at path: String, test: XCTestCase) throws {
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FileSystemFixtureError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw FileSystemFixtureError("socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in bytes.enumerated() { raw[i] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else {
            close(fd)
            throw FileSystemFixtureError("bind \(path): \(String(cString: strerror(errno)))")
        }
        test.addTeardownBlock { close(fd) }
    }

    static func symlink(at path: String, to target: String) throws {
        guard Glibc.symlink(target, path) == 0 else { throw FileSystemFixtureError("symlink \(path): \(String(cString: strerror(errno)))") }
    }
}

/// The test side of a `SLUICE_TEST_GATE_<NAME>=FIFO` pause point in a debug sluice: the
/// child stops there until `release()`, so a test acts exactly inside a race window.
/// Synchronisation is by the FIFO (opening it blocks until both ends are there), never by
/// sleeping; the only timeout is the bound on a child that never arrives.
final class RaceGate: @unchecked Sendable {
    let name: String
    let fifo: String
    private var writer: Int32 = -1

    init(_ name: String, in directory: String) throws {
        self.name = name
        fifo = directory + "/gate-" + name
        try HostileFile.fifo(at: fifo)
    }

    var environment: [String: String] { ["SLUICE_TEST_GATE_\(name)": fifo] }

    /// Waits until a child has reached the gate; false if none did within `timeout`.
    func waitUntilReached(timeout: TimeInterval) -> Bool {
        let opened = DispatchSemaphore(value: 0)
        let box = FDBox()
        let path = fifo
        Thread {
            box.fd = open(path, O_WRONLY | O_CLOEXEC)  // blocks until the child opens its end
            opened.signal()
        }.start()
        guard opened.wait(timeout: .now() + timeout) == .success else {
            // Unblock the opener with a reader of our own, then close both ends.
            let reader = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            opened.wait()
            if box.fd >= 0 { close(box.fd) }
            if reader >= 0 { close(reader) }
            return false
        }
        writer = box.fd
        return writer >= 0
    }

    /// Lets the child go on (it reads end of file).
    func release() {
        if writer >= 0 { close(writer) }
        writer = -1
    }

    deinit { release() }

    private final class FDBox: @unchecked Sendable { var fd: Int32 = -1 }
}

struct FileSystemFixtureError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Mounts a small read-only tmpfs at `path` (root only, as the suite runs), unmounted when
/// the test ends: a directory even root cannot write to.
func mountReadOnlyDirectory(at path: String, test: XCTestCase) throws {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    let result = try shell("mount -t tmpfs -o ro,size=1m tmpfs '\(path)' 2>&1", capture: true)
    guard result.status == 0 else { throw FileSystemFixtureError("mount a read-only tmpfs at \(path) (needs root): \(result.output)") }
    test.addTeardownBlock { _ = try? shell("umount '\(path)' 2>/dev/null || umount -l '\(path)'") }
}
