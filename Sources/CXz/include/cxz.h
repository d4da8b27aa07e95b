// The hot parts of the .xz decoder: one LZMA2 chunk's LZMA data, the dictionary window,
// the branch/delta filters and CRC-64. Everything else (the container, chunk framing,
// checks, resumable state) is Swift. All state is plain fields the Swift side can save
// and, after range-checking, put back.
#ifndef CXZ_H
#define CXZ_H

#include <stddef.h>
#include <stdint.h>

// Probability slots of the LZMA model, one flat array.
enum {
    CXZ_IS_MATCH = 0,                       // [state 12][pos_state 16]
    CXZ_IS_REP = CXZ_IS_MATCH + 192,        // [state]
    CXZ_IS_REP0 = CXZ_IS_REP + 12,
    CXZ_IS_REP1 = CXZ_IS_REP0 + 12,
    CXZ_IS_REP2 = CXZ_IS_REP1 + 12,
    CXZ_IS_REP0_LONG = CXZ_IS_REP2 + 12,    // [state][pos_state]
    CXZ_DIST_SLOT = CXZ_IS_REP0_LONG + 192, // [len state 4][64]
    CXZ_DIST_SPECIAL = CXZ_DIST_SLOT + 256, // reverse trees of slots 4…13
    CXZ_ALIGN = CXZ_DIST_SPECIAL + 114,     // 4-bit reverse tree
    CXZ_MATCH_LEN = CXZ_ALIGN + 16,         // length coder: choice, choice2, low[16][8], mid[16][8], high[256]
    CXZ_REP_LEN = CXZ_MATCH_LEN + 514,
    CXZ_LITERAL = CXZ_REP_LEN + 514,        // [0x300 << (lc + lp)], lc + lp <= 4
    CXZ_PROB_COUNT = CXZ_LITERAL + 0x300 * 16
};

/// Bytes past a chunk's compressed data that the decoder may read before it notices a
/// corrupt chunk ran over; the caller's input buffer must have them (any value).
#define CXZ_INPUT_SLACK 128
/// Bytes past a chunk's output that match copying may scribble on.
#define CXZ_OUTPUT_SLACK 32
/// Largest uncompressed size of one LZMA2 chunk.
#define CXZ_MAX_CHUNK_OUTPUT (1u << 21)

typedef struct {
    uint16_t probs[CXZ_PROB_COUNT];
    uint32_t state;                // 0…11
    uint32_t rep0, rep1, rep2, rep3; // distances minus one
    uint32_t lc, lp, pb;
} cxz_lzma;

/// The dictionary: a linear buffer whose bytes before `pos` are past output; the last
/// min(history, dict_size) of them are what matches may refer to.
typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t pos;
    size_t max_cap;     // grows up to this, then slides
    uint32_t dict_size;
    uint64_t history;   // bytes since the last dictionary reset
    int mapped;         // buf is one cxz_map'd buffer of cap bytes that never grows
} cxz_window;

enum {
    CXZ_OK = 0,
    CXZ_ERR_RC_INIT = 1,    // a chunk's range coder does not start with a zero byte
    CXZ_ERR_DISTANCE = 2,   // a match refers to before the dictionary's start
    CXZ_ERR_OVERRUN = 3,    // a match or the coded data runs past the chunk's sizes
    CXZ_ERR_END_MARK = 4,   // an end-of-payload marker, which LZMA2 does not allow
    CXZ_ERR_RC_END = 5,     // the range coder did not finish cleanly at the chunk's end
    CXZ_ERR_MEMORY = 6,
};

void cxz_lzma_reset(cxz_lzma *m);
/// The probabilities as a pointer (Swift does not import an array this long).
static inline uint16_t *cxz_lzma_probs(cxz_lzma *m) { return m->probs; }
/// Decodes one LZMA chunk: `in_size` compressed bytes (plus CXZ_INPUT_SLACK readable
/// after them) into exactly `out_size` bytes at the window's position. The caller has
/// reserved room; on success the window advances.
int cxz_lzma_decode(cxz_lzma *m, cxz_window *w, const uint8_t *in, size_t in_size, size_t out_size);

/// Makes room for `n` more bytes (+ slack) at `pos`, growing or sliding the buffer.
int cxz_window_reserve(cxz_window *w, size_t n);
void cxz_window_free(cxz_window *w);
/// Makes the window one mapped buffer of `n` bytes (+ slack) that never grows or slides
/// (a block decoded whole); cxz_window_free unmaps it.
int cxz_window_map(cxz_window *w, size_t n);
/// Makes the window a mapped buffer of `cap` bytes that was used before (its bytes are
/// overwritten, never read before they are): no page faults, no zeroing.
void cxz_window_adopt(cxz_window *w, uint8_t *buf, size_t cap);

/// Block-sized buffers come straight from the system and go straight back: through malloc
/// a freed one stays resident (glibc raises its mmap threshold to the size of the last
/// mapped chunk freed, so the next ones come from a heap that is not trimmed). NULL when
/// the memory is not there. The memory is zeroed.
void *cxz_map(size_t n);
void cxz_unmap(void *p, size_t n);

typedef struct {
    uint32_t kind;          // CXZ_FILTER_*
    uint32_t pos;           // x86/ARM64: position of the next unconverted byte (mod 2^32)
    uint32_t x86_mask;      // x86: which of the last bytes were E8/E9 candidates
    uint32_t x86_prev;      // x86: position of the last E8/E9 seen
    uint32_t delta_dist;    // delta: 1…256
    uint32_t delta_index;   // delta: ring index
    uint8_t delta_ring[256];
    uint8_t held[8];        // branch filters: bytes too few to convert yet
    uint32_t held_count;
} cxz_filter;

enum { CXZ_FILTER_DELTA = 3, CXZ_FILTER_X86 = 4, CXZ_FILTER_ARM64 = 10 };

void cxz_filter_init(cxz_filter *f, uint32_t kind, uint32_t start_or_distance);
/// Runs filters[0], filters[1], … over buf[0..<len] in place (buf has room for the
/// bytes the filters hold, 8 per filter). Returns how many bytes at buf's start are done;
/// the rest is held inside the filters. `final` flushes everything.
size_t cxz_filters_run(cxz_filter *filters, int count, uint8_t *buf, size_t len, int final);

uint64_t cxz_crc64(uint64_t crc, const uint8_t *p, size_t n);

#endif
