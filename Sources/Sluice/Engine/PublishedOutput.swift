#if canImport(Glibc)
import Glibc
#endif

/// A run that renamed its output into place and was killed before it removed its
/// checkpoint leaves `PATH` complete, no partial file, and a checkpoint whose file state
/// describes the partial file at its last cut. A rerun used to find the partial file
/// missing and start over from zero.
///
/// What can be proven: `PATH` begins with exactly the bytes the checkpoint records (its
/// length and CRC-64, the check a resume makes of a partial file). What cannot: the bytes
/// after them, written after that cut. So sluice never declares `PATH` good from this alone;
/// it copies those recorded bytes to a new partial file and resumes there, so only the
/// stretch after the last checkpoint runs again and every check (the digest, the
/// decoders' trailers) is made before the result replaces `PATH`. `PATH` stays as it is
/// until then.
enum PublishedOutput {
    /// When the checkpoint's file output is missing its partial file and `output.path`
    /// begins with the recorded bytes: makes the partial file from them and returns the
    /// notice that says what happened. When `output.path` is there but cannot be used, the
    /// notice says why (touching nothing; the resume then finds the partial file missing
    /// and starts over). Nil, touching nothing, when neither applies.
    static func reopen(_ state: FileSinkState, output: OutputTarget) throws -> String? {
        let shown = DisplayText.escaped(output.path)
        let source: Int32
        switch try published(state, path: output.path, partialPath: output.partialPath) {
        case .notApplicable: return nil
        case .unusable(let why):
            return "\(shown) is there, but \(why), so the run cannot resume on it; it stays as it is until a"
                + " complete new output replaces it"
        case .matches(let fd): source = fd
        }
        defer { close(source) }
        let partial = try POSIX.createNew(output.partialPath, mode: 0o644)
        do {
            defer { close(partial) }
            try copy(state.bytesWritten, from: source, to: partial, path: output.partialPath)
            try POSIX.fsync(partial, path: output.partialPath)
        } catch {
            unlink(output.partialPath)
            throw error
        }
        return "\(shown) is there and begins with the \(Counted.bytes(state.bytesWritten)) the checkpoint records: the last"
            + " run most likely finished and was stopped before it removed its checkpoint; resuming from that checkpoint"
            + " on a copy of those bytes, so the rest is checked again before the result replaces \(shown)"
            + " (which stays as it is until then)"
    }

    /// Whether a rerun would resume on the published output (for `sluice inspect`; reads only).
    static func wouldReopen(_ state: FileSinkState) -> Bool {
        guard case .matches(let fd)? = try? published(state, path: state.path, partialPath: FileSink.partialPath(for: state.path))
        else { return false }
        close(fd)
        return true
    }

    /// What a published output is to a checkpoint whose partial file is missing.
    private enum Published {
        /// The partial file is there, the checkpoint records no bytes, or nothing is at `path`.
        case notApplicable
        /// Something is at `path` that does not begin with the recorded bytes: why.
        case unusable(String)
        /// `path`, opened for reading: it begins with the recorded bytes.
        case matches(Int32)
    }

    /// Whether `path` can stand in for the missing partial file: a regular file that begins
    /// with the recorded bytes.
    private static func published(_ state: FileSinkState, path: String, partialPath: String) throws -> Published {
        guard state.bytesWritten > 0, POSIX.lstatFacts(partialPath) == nil, let found = POSIX.lstatFacts(path) else {
            return .notApplicable
        }
        let recorded = Counted.bytes(state.bytesWritten)
        guard found.kind == .regular else { return .unusable("it is not a regular file") }
        guard found.size >= state.bytesWritten else {
            return .unusable("it holds \(Counted.bytes(found.size)), fewer than the \(recorded) the checkpoint records")
        }
        let fd: Int32
        do {
            guard let opened = try POSIX.openRegular(path, access: O_RDONLY, operation: "open") else { return .notApplicable }
            fd = opened
        } catch {
            return .unusable("it cannot be read (\(error))")
        }
        do {
            if try OutputChecksum.of(fd, from: 0, count: state.bytesWritten, path: path) == OutputChecksum(state.crc64) { return .matches(fd) }
        } catch {
            close(fd)
            throw error
        }
        close(fd)
        return .unusable("its first \(recorded) are not the ones the checkpoint records (their CRC-64 differs)")
    }

    /// The first `count` bytes of `source` into `target`, by reading and writing: this runs
    /// once, after a rare kill, on bytes the check just made brought into the page cache, so
    /// `sluice_copy_file_range` and the fallback it needs elsewhere (`CheckpointSpill`) would
    /// buy nothing here.
    private static func copy(_ count: UInt64, from source: Int32, to target: Int32, path: String) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { buffer.deallocate() }
        var position: UInt64 = 0
        let end = count
        while position < end {
            let n = pread(source, buffer.baseAddress, Int(min(UInt64(buffer.count), end - position)), off_t(position))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw SluiceError.io(path: path, operation: "copy the published output into", errno: n < 0 ? errno : EIO) }
            try POSIX.writeAll(target, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), path: path)
            position += UInt64(n)
        }
    }
}
