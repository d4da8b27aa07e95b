import Foundation
import XCTest
@testable import Sluice
@testable import SluiceTestSupport

/// Sends a barrier through `head` as if the source stood at `offset`, returning the sealed
/// checkpoint (the chain must end in a terminal sink such as MemorySink).
/// With `spill`, the stages put their large blobs there, as a run with a checkpoint file does.
func takeCut(_ head: ByteSink, offset: Int, spec: String, spill: CheckpointSpill? = nil) throws -> Checkpoint {
    let box = CutBox()
    try head.barrier(
        Cut(source: SourceState(kind: "read", location: "x", offset: UInt64(offset)), spill: spill, onSeal: { box.cut = $0 }))
    // The cut holds the closure that holds the box: emptying the box ends the cycle, which
    // otherwise leaked every cut's states (whole windows), failing `--sanitize address` runs.
    defer { box.cut = nil }
    let sealed = try XCTUnwrap(box.cut)
    return Checkpoint(spec: spec, source: sealed.source, stages: sealed.stages)
}

/// The checkpoint as a rerun reads it: encoded to JSON and decoded again.
func roundTripped(_ checkpoint: Checkpoint) throws -> Checkpoint {
    try Checkpoint.decode(try checkpoint.encoded(key: .test), path: "memory", key: .test)
}

/// Writes `bytes` to `sink` in pieces of `chunk` bytes.
func write(_ bytes: [UInt8], to sink: ByteSink, chunk: Int) throws {
    var i = 0
    while i < bytes.count {
        let end = min(bytes.count, i + chunk)
        try bytes[i..<end].withUnsafeBytes { try sink.write($0) }
        i = end
    }
}

/// Writes `bytes` to `sink` in pieces of `chunk` bytes and finishes it; the error that
/// stopped it, or nil when it went through.
func failureWriting(_ bytes: [UInt8], to sink: ByteSink, chunk: Int) -> Error? {
    do {
        try write(bytes, to: sink, chunk: chunk)
        try sink.finish()
        return nil
    } catch {
        return error
    }
}
