/// A count with its noun for messages, singular for exactly one: "1 byte", "0 bytes",
/// "3 connections". The one place messages get their plurals from.
enum Counted {
    /// `count` and `noun`, or `plural` (default: `noun` + "s") unless `count` is 1.
    static func text(_ count: some BinaryInteger, _ noun: String, plural: String? = nil) -> String {
        "\(count) \(count == 1 ? noun : plural ?? noun + "s")"
    }

    /// "1 byte", "2 bytes".
    static func bytes(_ count: some BinaryInteger) -> String { text(count, "byte") }
}
