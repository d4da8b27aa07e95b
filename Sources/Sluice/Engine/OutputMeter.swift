/// Sits in front of the terminal sink and counts what reaches it, for progress.
final class OutputMeter: AheadWritingSink {
    private let next: ByteSink
    private let control: RunControl

    init(next: ByteSink, control: RunControl) {
        self.next = next
        self.control = control
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        try next.write(bytes)
        control.countOutput(bytes.count)
    }

    func aheadWriter() -> AheadWriter? { (next as? AheadWritingSink)?.aheadWriter() }

    func advance(_ count: UInt64, crc64: UInt64) throws {
        try next.passAdvance(count, crc64: crc64)
        control.countOutput(Int(clamping: count))
    }

    func barrier(_ cut: Cut) throws { try next.barrier(cut) }
    func finish() throws { try next.finish() }
}
