#include <zlib.h>

// inflateInit2 is a macro; Swift cannot call macros that expand to function calls.
static inline int sluice_inflateInit2(z_stream *strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}
static inline int sluice_deflateInit2(z_stream *strm, int level, int windowBits) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}
