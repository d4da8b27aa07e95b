import Glibc

/// `printf`-style text from the C library, for the few numbers shown with a fixed number of
/// decimals (`%.1f`, `%02ld`): the same conversions Foundation's `String(format:)` made,
/// without linking the full Foundation for them.
func cFormat(_ format: String, _ arguments: any CVarArg...) -> String {
    var capacity = 64
    while true {
        var buffer = [CChar](repeating: 0, count: capacity)
        let length = withVaList(arguments) { vsnprintf(&buffer, capacity, format, $0) }
        guard length >= 0 else { return "" }
        if Int(length) < capacity {
            return String(decoding: buffer[0..<Int(length)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        capacity = Int(length) + 1
    }
}
