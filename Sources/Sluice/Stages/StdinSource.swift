#if canImport(Glibc)
import Glibc
#endif

/// `stdin`: standard input. A pipe cannot be rewound, so this source never resumes.
public final class StdinSource: ByteSource {
    private let fd: Int32
    private let buffer: UnsafeMutableRawBufferPointer

    public init(fd: Int32 = STDIN_FILENO, chunkSize: Int = 256 * 1024) {
        self.fd = fd
        buffer = .allocate(byteCount: chunkSize, alignment: 64)
    }

    deinit { buffer.deallocate() }

    public func run(into sink: ByteSink) throws {
        while true {
            let n = try POSIX.read(fd, into: buffer, path: "stdin")
            if n == 0 { return }
            try sink.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    public func state(at offset: UInt64) -> SourceState {
        SourceState(kind: "stdin", location: "-", offset: offset)
    }
}

extension StageKind {
    static let stdin = StageKind.source(
        "stdin", summary: "source: standard input (not resumable)", nsPerByte: 0.3
    ) { _, _, _ in StdinSource() }
}
