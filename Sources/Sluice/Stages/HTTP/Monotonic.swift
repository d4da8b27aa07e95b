#if canImport(Glibc)
import Glibc
#endif

/// Seconds on a clock that never jumps (wall-clock changes must not fake a stall).
enum Monotonic {
    static func seconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
