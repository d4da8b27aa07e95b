@testable import Sluice

extension CheckpointKey {
    /// A fixed key for tests that seal and read checkpoints in memory.
    static let test = CheckpointKey(bytes: Array(repeating: 7, count: 32))
}
