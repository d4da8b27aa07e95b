/// The one interface every stage speaks: an OutputStream-style sink.
///
/// A transform is a sink that wraps the next sink (like Java's `DigestOutputStream`
/// or Go's `io.Writer` chains); a pipeline is a source pushing bytes into the head of
/// such a chain. Bytes, checkpoint barriers and the end of the stream all flow
/// downstream through the same three calls, so a stage never needs to know whether
/// its neighbour runs on the same thread or behind a queue.
public protocol ByteSink: AnyObject {
    /// Consumes all of `bytes`, or throws. The buffer is only valid during the call.
    func write(_ bytes: UnsafeRawBufferPointer) throws

    /// A checkpoint barrier has reached this stage: every byte before it has been written,
    /// none after it. Record this stage's exact state in `cut`, then pass the barrier on.
    func barrier(_ cut: Cut) throws

    /// End of stream: validate (digests, trailers), flush, then finish downstream.
    func finish() throws
}

extension ByteSink {
    /// Convenience for tests and small callers.
    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }
}

/// A transform: a stage that passes its output to `next`. Barriers record `snapshot()`
/// and travel on; `finish()` passes the end on (a stage that checks something at the end
/// of its input does so first, then calls `finishNext()`).
public protocol ForwardingSink: ByteSink {
    associatedtype State: StageStateValue
    var next: ByteSink { get }
    /// The stage's exact state after every byte written so far.
    func snapshot() -> State
}

extension ForwardingSink {
    public func barrier(_ cut: Cut) throws {
        cut.record(snapshot())
        try next.barrier(cut)
    }

    public func finish() throws {
        try next.finish()
    }
}

/// The last stage: it owns the output, so it alone seals a cut, once the bytes the cut
/// covers can be made durable.
public protocol TerminalSink: ByteSink {
    associatedtype State: StageStateValue
    func snapshot() -> State
    /// Makes every byte written so far durable; run by the checkpoint writer, possibly on
    /// another thread while the sink keeps writing (nil: nothing to make durable).
    func durability() throws -> (@Sendable () throws -> Void)?
    /// What a resume did to the output, for the user.
    var notices: [String] { get }
    /// Buffers (256 KiB each) of the queue in front of the sink's thread, in a threaded run.
    var queueBuffers: Int { get }
}

extension TerminalSink {
    public var notices: [String] { [] }
    public var queueBuffers: Int { 8 }
}

extension TerminalSink {
    public func barrier(_ cut: Cut) throws {
        cut.record(snapshot())
        try cut.seal(makeDurable: try durability())
    }
}

/// A sink that can lend out its own buffers, so the stage in front of it produces straight
/// into them instead of into a buffer of its own that is then copied (the relay does this:
/// an inflater decodes directly into the queue's buffers).
public protocol BufferLendingSink: ByteSink {
    /// A buffer to fill; at most one is out at a time.
    func borrowBuffer() throws -> UnsafeMutableRawBufferPointer
    /// Hands back the borrowed buffer; its first `count` bytes are written (0: nothing).
    func commitBorrowed(_ count: Int)
}

/// A sink that can take bytes over as they are and write them later, on its own thread, so
/// the stage in front of it goes on at once instead of waiting while a large block is copied
/// and written (the relay does this: unxz hands over a worker's whole decoded block).
protocol HandOverSink: ByteSink {
    /// Writes `bytes` after everything written before, later; `done` is called, on any
    /// thread, once they are no longer needed (written, dropped after a failure, or thrown).
    /// `released(n)`, if given, is called as the first n bytes are written, before `done`:
    /// the lender may reuse them already.
    func write(
        handingOver bytes: UnsafeRawBufferPointer, released: (@Sendable (Int) -> Void)?, whenDone done: @escaping @Sendable () -> Void
    ) throws
}

extension HandOverSink {
    func write(handingOver bytes: UnsafeRawBufferPointer, whenDone done: @escaping @Sendable () -> Void) throws {
        try write(handingOver: bytes, released: nil, whenDone: done)
    }
}

/// Writes bytes of the stream before their turn, from any thread (unxz's workers write each
/// decoded block straight to its place in the output file, instead of holding it until the
/// blocks before it have gone on). Nothing written this way counts until the sink is told
/// in order (`AheadWritingSink.advance`) that those bytes are there.
///
/// The offset coordinate: offset 0 is the first byte the sink that handed out this writer
/// accepts in order after `aheadWriter()` returned it; every byte it accepts later, written,
/// handed over or advanced, counts one.
protocol AheadWriter: AnyObject, Sendable {
    /// Writes all of `bytes` at `offset`, or throws the sink's own write error.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws
}

/// A sink that can take bytes ahead of their turn (a file: the partial file, written at
/// the bytes' place), or that passes them to one such (a relay).
protocol AheadWritingSink: ByteSink {
    /// A writer for bytes ahead of the stream, offsets counted from now (see
    /// `AheadWriter`); nil when the sink behind cannot take them.
    func aheadWriter() -> AheadWriter?
    /// In order, like `write`: the next `count` bytes of the stream are already written
    /// through an ahead writer; `crc64` is their CRC-64 alone (`OutputChecksum`).
    func advance(_ count: UInt64, crc64: UInt64) throws
}

extension ByteSink {
    /// Passes an `advance` on from a sink in front (a relay, the output meter): only a sink
    /// that handed out an ahead writer can be told bytes are already there.
    func passAdvance(_ count: UInt64, crc64: UInt64) throws {
        guard let taker = self as? AheadWritingSink else { throw SluiceError.unexpected("an advance to a sink that takes no bytes ahead") }
        try taker.advance(count, crc64: crc64)
    }
}

/// Another sink's ahead writer, seen from a sink in front of it that had already accepted
/// `shift` bytes (in that sink's coordinate) when it handed this one out.
final class ShiftedAheadWriter: AheadWriter {
    private let inner: AheadWriter
    private let shift: UInt64

    init(_ inner: AheadWriter, shift: UInt64) {
        self.inner = inner
        self.shift = shift
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        guard let at = offset.addingReportingOverflowIfFits(shift) else {
            throw SluiceError.unexpected("an ahead write past the largest file offset")
        }
        try inner.write(bytes, at: at)
    }
}
