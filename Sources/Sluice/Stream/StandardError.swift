#if canImport(Glibc)
import Glibc
#endif

/// Text for stderr, written with plain `write(2)`. Foundation's `FileHandle.write(_:)`
/// traps when the write fails, and stderr is often a pipe whose reader may go away
/// (`sluice … 2>&1 | head`): a notice nobody reads must never crash a run.
public enum StandardError {
    public static func write(_ text: String) {
        var bytes = Array(text.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            var offset = 0
            while offset < buffer.count {
                let n = Glibc.write(STDERR_FILENO, base + offset, buffer.count - offset)
                if n < 0 && errno == EINTR { continue }
                // EPIPE, a closed descriptor, a full disk: the message is lost, the run goes on.
                guard n > 0 else { return }
                offset += n
            }
        }
    }
}
