#if canImport(Glibc)
import Glibc
#endif
import CLinux
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// Starts the engine's threads, and says so when one cannot start.
///
/// Foundation's `Thread.start()` reports nothing when `pthread_create` fails (a low
/// `ulimit -u`, no memory for a stack): the body simply never runs, and whoever waits
/// for it — `Relay.finish`, the signal watcher — waits for good. Here a refused start is
/// a `SluiceError.io` (exit 6) naming the thread.
public enum EngineThread {
    /// A way to start a thread; tests pass one that refuses.
    public typealias Starter = (_ name: String, _ body: @escaping @Sendable () -> Void) throws(SluiceError) -> Void

    /// Starts `body` on a new detached thread called `name`, or throws.
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) throws(SluiceError) {
        let refuse = testAllowance.withLock { left in
            guard let allowed = left else { return false }
            left = max(allowed - 1, 0)
            return allowed == 0
        }
        if refuse { throw refused(name, errno: EAGAIN) }
        let context = Unmanaged.passRetained(Body(name: name, run: body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let code = pthread_create(
            &thread, &attributes,
            { raw in
                guard let raw else { return nil }
                let body = Unmanaged<Body>.fromOpaque(raw).takeRetainedValue()
                EngineThread.nameThisThread(body.name)
                body.run()
                return nil
            }, context)
        if code != 0 {
            Unmanaged<Body>.fromOpaque(context).release()
            throw refused(name, errno: code)
        }
    }

    /// Names the calling thread, for debuggers and `top -H`: Linux keeps 15 bytes of a name
    /// and refuses a longer one, so it is cut (at a character boundary) to fit.
    private static func nameThisThread(_ name: String) {
        var bytes = Array(name.utf8.prefix(15))
        while !bytes.isEmpty, String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        bytes.append(0)
        bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { _ = sluice_name_this_thread($0.baseAddress!) }
        }
    }

    private static func refused(_ name: String, errno code: Int32) -> SluiceError {
        .io(path: "thread " + name, operation: "start", errno: code)
    }

    /// Test hook: after `allowed` more starts, every start fails as if the system refused
    /// it (EAGAIN); nil starts threads normally again.
    static func refuseStarts(after allowed: Int?) {
        testAllowance.withLock { $0 = allowed }
    }

    private static let testAllowance = Mutex<Int?>(nil)

    private final class Body: Sendable {
        let name: String
        let run: @Sendable () -> Void
        init(name: String, run: @escaping @Sendable () -> Void) {
            self.name = name
            self.run = run
        }
    }
}
