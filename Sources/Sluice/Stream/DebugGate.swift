#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Test-only pause points, compiled into debug builds only. With
/// `SLUICE_TEST_GATE_<NAME>=FIFO` in the environment, the run opens that FIFO when it
/// reaches the point and waits until the test closes its end — so a test can act exactly
/// inside a race window (another run taking a lock, a file appearing) without sleeping.
/// Each gate stops the process once.
enum DebugGate {
    #if DEBUG
    private static let passed = Mutex<Set<String>>([])
    #endif

    static func pass(_ name: String) {
        #if DEBUG
        let key = "SLUICE_TEST_GATE_" + name
        guard let value = getenv(key) else { return }
        let fifo = String(cString: value)
        guard passed.withLock({ $0.insert(name).inserted }) else { return }
        // Opening blocks until the test opens the writing end: that tells it we are here.
        let fd = open(fifo, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n > 0 || (n < 0 && errno == EINTR) { continue }
            break
        }
        close(fd)
        #endif
    }
}
