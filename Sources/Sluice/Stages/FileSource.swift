#if canImport(Glibc)
import Glibc
#endif

/// `read PATH`: a local file, resumed by offset. Size and modification time stand in
/// for HTTP validators: if either changed since the checkpoint, the data did.
public final class FileSource: ByteSource {
    public let path: String
    private let fd: Int32
    private let size: UInt64
    private let modified: String
    /// A regular file: its size when opened is where the stream must end.
    private let isRegular: Bool
    /// The source offset of the next byte read.
    private var position: UInt64
    private let buffer: UnsafeMutableRawBufferPointer
    private let control: RunControl?
    /// A FIFO or device: reads wait in poll(), where a stop reaches them.
    private let mayBlock: Bool

    public init(
        path: String, resumeFrom saved: SourceState? = nil, control: RunControl? = nil,
        chunkSize: Int = 256 * 1024
    ) throws {
        self.path = path
        self.control = control
        // O_NONBLOCK: opening a FIFO no writer has opened yet would block, deaf to a stop;
        // reads then wait in poll() instead (`POSIX.waitReady`), so it is cleared again.
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw SluiceError.io(path: path, operation: "open", errno: errno) }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let code = errno
            close(fd)
            throw SluiceError.io(path: path, operation: "stat", errno: code)
        }
        size = UInt64(st.st_size)
        mayBlock = POSIX.mayBlock(fd)
        modified = Self.modificationStamp(st)
        isRegular = (st.st_mode & S_IFMT) == S_IFREG
        position = saved?.offset ?? 0
        buffer = .allocate(byteCount: chunkSize, alignment: 64)
        if let saved {
            guard saved.offset <= size || saved.totalLength != size else {
                throw StateRejected("its offset \(saved.offset) lies past the end of \(path)")
            }
            if saved.totalLength != size || saved.lastModified != modified {
                throw SourceChanged(
                    location: path,
                    reason: saved.totalLength != size
                        ? "its size is now \(Counted.bytes(size)), was \(saved.totalLength.map(String.init) ?? "unknown")"
                        : "its modification time changed")
            }
            // A pipe or device cannot be rewound: like stdin, it cannot be resumed.
            guard (st.st_mode & S_IFMT) == S_IFREG || saved.offset == 0 else {
                throw StateRejected("\(path) is not a regular file, so it cannot be resumed")
            }
            guard lseek(fd, off_t(saved.offset), SEEK_SET) >= 0 else {
                throw SluiceError.io(path: path, operation: "seek in", errno: errno)
            }
        }
    }

    /// The validator a checkpoint keeps for a local file's modification time.
    static func modificationStamp(_ st: stat) -> String {
        "\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
    }

    deinit {
        close(fd)
        buffer.deallocate()
    }

    public func run(into sink: ByteSink) throws {
        while true {
            try control?.check()
            let n = try POSIX.read(fd, into: buffer, path: path, control: control, mayBlock: mayBlock)
            if n == 0 {
                // A file cut short while being read (truncated, rotated) ends early: what
                // came out is neither the file as it was nor as it is now.
                if isRegular && position < size {
                    throw SourceChanged(
                        location: path, reason: "it ended at byte \(position) while being read, but had \(Counted.bytes(size)) when opened",
                        duringRun: true)
                }
                return
            }
            try sink.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            position &+= UInt64(n)
        }
    }

    public func state(at offset: UInt64) -> SourceState {
        SourceState(kind: "read", location: path, offset: offset, lastModified: modified, totalLength: size)
    }
}

extension StageKind {
    static let read = StageKind.source(
        "read", arguments: [.path], summary: "source: a local file, resumed by offset",
        nsPerByte: 0.3, input: { $0.arguments.first }
    ) { spec, context, saved in
        try FileSource(path: spec.arguments[0], resumeFrom: saved, control: context.control)
    }
}
