/// Sizes as people write them: `8MiB`, `512k`, `1G`, `4096`, `0`. Binary units for
/// K/M/G/T and KiB…TiB, decimal for KB…TB; anything that overflows 64 bits is refused.
public enum ByteSize {
    private static let units: [(String, UInt64)] = [
        ("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30), ("TIB", 1 << 40),
        ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000),
        ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40), ("B", 1),
    ]

    public static func parse(_ text: String) -> UInt64? {
        let upper = text.uppercased()
        var digits = Substring(upper)
        var factor: UInt64 = 1
        if let (suffix, unit) = units.first(where: { upper.hasSuffix($0.0) }) {
            digits = digits.dropLast(suffix.count)
            factor = unit
        }
        // Only ASCII digits: UInt64("+5") and fullwidth digits are not sizes.
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = UInt64(digits) else {
            return nil
        }
        let (product, overflow) = n.multipliedReportingOverflow(by: factor)
        return overflow ? nil : product
    }

    /// `bytes` in the largest binary unit that divides it exactly: "256 MiB", "1 GiB",
    /// "1000 bytes" — a size a user can write back into an option.
    public static func text(_ bytes: UInt64) -> String {
        for (name, unit) in [("TiB", UInt64(1) << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        where bytes >= unit && bytes % unit == 0 {
            return "\(bytes / unit) \(name)"
        }
        return Counted.bytes(bytes)
    }
}
