extension String {
    /// This text with every occurrence of `target` replaced, matched scalar by scalar
    /// (Foundation's `replacingOccurrences` is not linked: Sluice uses FoundationEssentials).
    package func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        return String(unicodeScalars.replacing(target.unicodeScalars, with: replacement.unicodeScalars))
    }
}
