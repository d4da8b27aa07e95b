/// The `name=value` options of `fetch` (until the stage registry parses stage options):
/// `connections=N`, N a whole number from 1 to 32.
enum FetchStageOptions {
    static let connectionsRange = 1...MultiFetch.maxConnections

    /// The connection count given after the URL, or nil when none is.
    static func connections(from words: ArraySlice<SpecToken>) throws(SpecError) -> Int? {
        var connections: Int?
        for word in words {
            let parts = word.text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0] == "connections" else {
                throw SpecError("'fetch' takes a URL and optionally connections=N; unexpected '\(word.text)'", at: word)
            }
            guard connections == nil else { throw SpecError("'connections' is given twice", at: word) }
            guard let count = Int(parts[1]), connectionsRange.contains(count) else {
                throw SpecError("connections takes a whole number from \(connectionsRange.lowerBound) to"
                                + " \(connectionsRange.upperBound), not '\(parts[1])'", at: word)
            }
            connections = count
        }
        return connections
    }
}
