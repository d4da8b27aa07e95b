/// Sits in front of the terminal sink and counts what reaches it, for progress.
final class OutputMeter: ByteSink {
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

    func barrier(_ cut: Cut) throws { try next.barrier(cut) }
    func finish() throws { try next.finish() }
}
