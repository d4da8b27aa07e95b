#if canImport(Glibc)
import Glibc
#endif

/// `stdin`: standard input. A pipe cannot be rewound, so this source never resumes.
public final class StdinSource: ByteSource {
    private let fd: Int32
    private let buffer: UnsafeMutableRawBufferPointer
    private let control: RunControl?
    /// A pipe or terminal: reads wait in poll(), where a stop (SIGINT) reaches them.
    private let mayBlock: Bool

    public init(fd: Int32 = STDIN_FILENO, control: RunControl? = nil, chunkSize: Int = 256 * 1024) {
        self.fd = fd
        self.control = control
        mayBlock = POSIX.mayBlock(fd)
        buffer = .allocate(byteCount: chunkSize, alignment: 64)
    }

    deinit { buffer.deallocate() }

    public func run(into sink: ByteSink) throws {
        while true {
            try control?.check()
            let n = try POSIX.read(fd, into: buffer, path: "stdin", control: control, mayBlock: mayBlock)
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
        "stdin", summary: "source: standard input (not resumable)", nsPerByte: 0.3, resumable: false
    ) { _, context, _ in StdinSource(control: context.control) }
}
