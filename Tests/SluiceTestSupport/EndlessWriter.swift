import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Writes 64 KiB chunks into a FIFO from its own thread until stopped (or the reader leaves).
final class EndlessWriter: @unchecked Sendable {
    private let stopped = NSLock()
    private var isStopped = false

    /// A FIFO `endless` in `dir` with a writer behind it; SIGPIPE is ignored, as the writer
    /// outlives the reader. Stop the writer when the test ends.
    static func fifo(in dir: String) throws -> (path: String, writer: EndlessWriter) {
        let path = dir + "/endless"
        try HostileFile.fifo(at: path)
        signal(SIGPIPE, SIG_IGN)
        return (path, EndlessWriter(path: path))
    }

    init(path: String) {
        let thread = Thread { [self] in
            let fd = open(path, O_WRONLY)
            guard fd >= 0 else { return }
            defer { close(fd) }
            let chunk = [UInt8](repeating: 0x61, count: 64 << 10)
            while !shouldStop() {
                if chunk.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) < 0 { return }
            }
        }
        thread.start()
    }

    private func shouldStop() -> Bool {
        stopped.lock()
        defer { stopped.unlock() }
        return isStopped
    }

    func stop() {
        stopped.lock()
        isStopped = true
        stopped.unlock()
    }
}
