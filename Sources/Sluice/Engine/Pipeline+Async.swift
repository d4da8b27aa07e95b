#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

extension Pipeline {
    /// Runs to the end without blocking the caller's task. The stages run on threads of
    /// their own (they block in I/O, which the cooperative pool must not); cancelling the
    /// task stops the run at a checkpoint, and this throws `SluiceError.cancelled`.
    ///
    ///     let pipeline = try Pipeline("fetch https://example.org/x.gz | gunzip | file x")
    ///     async let report = pipeline.run()
    ///     for await event in pipeline.events { … }
    @discardableResult
    public func run() async throws(SluiceError) -> RunReport {
        do {
            return try await runOnAThreadOfItsOwn()
        } catch {
            throw error as? SluiceError ?? .unexpected(String(describing: error))
        }
    }

    private func runOnAThreadOfItsOwn() async throws -> RunReport {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<RunReport, Error>) in
                do {
                    try EngineThread.start("sluice.run") { [self] in
                        continuation.resume(with: Result { try run() as RunReport })
                    }
                } catch {
                    // Without the thread nothing would ever resume the caller.
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            cancel()
        }
    }
}
