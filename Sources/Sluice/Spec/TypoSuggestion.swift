/// What a mistyped word (a stage, an option) most likely meant, for "did you mean" hints.
public enum TypoSuggestion {
    /// The word a typo most likely meant: the only one within two edits (insert, delete,
    /// replace, or swap of neighbours), or nil.
    public static func closest(to typed: String, among words: [String]) -> String? {
        let typed = Array(typed.utf8.prefix(64))
        let near = words.filter { editDistance(typed, Array($0.utf8)) <= 2 }
        return near.count == 1 ? near[0] : nil
    }

    /// Optimal-string-alignment distance: Levenshtein plus transposition of neighbours.
    private static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var rows = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { rows[i][0] = i }
        for j in 0...b.count { rows[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var best = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { best = min(best, rows[i - 2][j - 2] + 1) }
                rows[i][j] = best
            }
        }
        return rows[a.count][b.count]
    }
}
