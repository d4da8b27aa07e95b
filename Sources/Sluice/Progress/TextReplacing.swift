import CLinux

extension String {
    /// This text with every occurrence of `target` replaced, matched literally (Foundation's
    /// `replacingOccurrences` is not linked: Sluice uses FoundationEssentials). Searched as
    /// UTF-8 with memmem, in linear time: a spec error quotes words of megabytes. A valid
    /// UTF-8 needle can only match at a scalar boundary, so no character is cut.
    package func replacingAll(_ target: String, with replacement: String) -> String {
        let text = Array(utf8)
        let needle = Array(target.utf8)
        guard !needle.isEmpty, !text.isEmpty else { return self }
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        text.withUnsafeBytes { hay in
            needle.withUnsafeBytes { pin in
                guard let start = hay.baseAddress, let pinStart = pin.baseAddress else { return }
                var at = 0
                while at < hay.count, let found = sluice_memmem(start + at, hay.count - at, pinStart, pin.count) {
                    let index = start.distance(to: UnsafeRawPointer(found))
                    out.append(contentsOf: hay[at..<index])
                    out.append(contentsOf: replacement.utf8)
                    at = index + pin.count
                }
                out.append(contentsOf: hay[at...])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
