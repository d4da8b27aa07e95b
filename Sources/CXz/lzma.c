// LZMA decoding of one LZMA2 chunk, written from the LZMA algorithm description:
// an adaptive binary range coder driving literal, match and repeated-match symbols.
#include "cxz.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TOP (1u << 24)
#define PROB_BITS 11
#define PROB_ONE (1u << PROB_BITS)
#define MOVE_BITS 5

void cxz_lzma_reset(cxz_lzma *m) {
    for (size_t i = 0; i < CXZ_PROB_COUNT; i++) m->probs[i] = PROB_ONE / 2;
    m->state = 0;
    m->rep0 = m->rep1 = m->rep2 = m->rep3 = 0;
}

// Range decoder steps on local copies of range/code/ip, so they stay in registers.
// Normalising after every bit mirrors the encoder, so a chunk ends exactly at its last byte.
#define NORMALIZE \
    if (range < TOP) { range <<= 8; code = (code << 8) | *ip++; }

// NORMALIZE without a branch: it reads the next byte (inside the input slack) either way.
#define NORMALIZE_NB { \
        const uint32_t n_ = range < TOP; \
        const uint32_t next_ = (code << 8) | *ip; \
        range = UNPREDICTABLE(n_) ? range << 8 : range; \
        code = n_ ? next_ : code; \
        ip += n_; }

#define BIT(p, bit) do { \
        uint32_t prob_ = *(p); \
        uint32_t bound_ = (range >> PROB_BITS) * prob_; \
        if (code < bound_) { range = bound_; *(p) = (uint16_t)(prob_ + ((PROB_ONE - prob_) >> MOVE_BITS)); bit = 0; } \
        else { range -= bound_; code -= bound_; *(p) = (uint16_t)(prob_ - (prob_ >> MOVE_BITS)); bit = 1; } \
        NORMALIZE \
    } while (0)

#if defined(__clang__)
#define UNPREDICTABLE(x) __builtin_unpredictable(x)
#else
#define UNPREDICTABLE(x) (x)
#endif

// A bit of a literal or a bit tree, without a branch on its value: these bits are close to
// random, so a mispredicted branch costs more than computing both outcomes. The update is
// BIT's: for a 0, prob + ((2048 - prob) >> 5) equals prob - ((prob - 2017) >> 5) with an
// arithmetic shift. `pv` holds *p, loaded ahead; `c0`/`c1` are the probabilities of the two
// nodes the bit can lead to, also loaded ahead, so the next bit does not wait for a load
// whose address depends on this one.
// Hides a value's origin from the compiler, which would otherwise turn "one ? c1 : c0" of two
// loads back into one load from a selected address, the very wait the early loads avoid.
#define OPAQUE(x) __asm__("" : "+r"(x))

#define TREE_BIT(p, pv, c0, c1, sym) do { \
        const uint32_t bound_ = (range >> PROB_BITS) * (pv); \
        const uint32_t one_ = code >= bound_; \
        const uint32_t m_ = 0u - one_; \
        code -= bound_ & m_; \
        range = UNPREDICTABLE(one_) ? range - bound_ : bound_; \
        *(p) = (uint16_t)((pv) - (uint32_t)((int32_t)((pv) - (~m_ & (PROB_ONE - 31))) >> MOVE_BITS)); \
        sym = (sym << 1) + one_; \
        pv = UNPREDICTABLE(one_) ? (c1) : (c0); \
        NORMALIZE_NB \
    } while (0)

// Bit tree of n bits, most significant first, `sym` from 1 to 2^n + its bits. The last bit
// loads no children (they would lie past the tree).
#define TREE_BITS(t, n, sym) do { \
        uint16_t *const t_ = (t); \
        uint32_t pv_ = t_[1]; \
        for (int i_ = 0; i_ < (n) - 1; i_++) { \
            uint32_t c0_ = t_[2 * sym], c1_ = t_[2 * sym + 1]; \
            OPAQUE(c0_); OPAQUE(c1_); \
            TREE_BIT(&t_[sym], pv_, c0_, c1_, sym); \
        } \
        TREE_BIT(&t_[sym], pv_, 0, 0, sym); \
    } while (0)

// Bit tree of n bits, most significant first; result in 0..<2^n.
#define TREE(base, n, out) do { \
        uint32_t s_ = 1; \
        TREE_BITS(base, n, s_); \
        out = s_ - (1u << (n)); \
    } while (0)

// Bit tree read least significant bit first, added into `out`.
#define REVERSE_TREE(base, n, out) do { \
        uint32_t s_ = 1; \
        TREE_BITS(base, n, s_); \
        for (int i_ = 0; i_ < (n); i_++) out |= ((s_ >> ((n) - 1 - i_)) & 1) << i_; \
    } while (0)

// One bit of a matched literal. `mb` holds the match byte shifted so that this bit's match
// bit is 0x100; `offs` is 0x100 while the decoded bits agree with the match byte, else 0.
// A 1 keeps `offs` only if the match bit was 1 (offs1 = mbit), a 0 only if it was 0.
#define MATCHED_BIT() do { \
        const uint32_t mbit_ = mb & offs, offs0_ = offs ^ mbit_; \
        uint16_t *const p_ = &lit[offs + mbit_ + sym]; \
        mb <<= 1; \
        uint32_t c0_ = lit[offs0_ + (mb & offs0_) + 2 * sym], c1_ = lit[mbit_ + (mb & mbit_) + 2 * sym + 1]; \
        OPAQUE(c0_); OPAQUE(c1_); \
        TREE_BIT(p_, pv, c0_, c1_, sym); \
        offs = UNPREDICTABLE(sym & 1) ? mbit_ : offs0_; \
    } while (0)

#define LENGTH(coder, pos_state, out) do { \
        uint16_t *lc_ = probs + (coder); uint32_t c_; \
        BIT(&lc_[0], c_); \
        if (!c_) { TREE(lc_ + 2 + (pos_state) * 8, 3, out); } \
        else { BIT(&lc_[1], c_); \
            if (!c_) { TREE(lc_ + 130 + (pos_state) * 8, 3, out); out += 8; } \
            else { TREE(lc_ + 258, 8, out); out += 16; } } \
    } while (0)

// Fetches the cache lines of the 2^(late+4) bytes before span_end (2^(late-2)+1 lines, as
// the span need not start on a line).
static inline void prefetch_span(uintptr_t span_end, uint32_t late) {
    __builtin_prefetch((const void *)(span_end - (1u << (late + 4))));
    for (uint32_t k = 0; k < (1u << (late + 4)); k += 64) __builtin_prefetch((const void *)(span_end - 1 - k));
}

static inline uint32_t after_literal(uint32_t s) { return s < 4 ? 0 : (s < 10 ? s - 3 : s - 6); }

int cxz_lzma_decode(cxz_lzma *m, cxz_window *w, const uint8_t *in, size_t in_size, size_t out_size) {
    if (in_size < 5 || in[0] != 0) return CXZ_ERR_RC_INIT;
    const uint8_t *ip = in + 5;
    const uint8_t *const iend = in + in_size;
    uint32_t range = 0xFFFFFFFFu;
    uint32_t code = (uint32_t)in[1] << 24 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 8 | in[4];

    uint16_t *const probs = m->probs;
    uint8_t *out = w->buf + w->pos;
    uint8_t *const ostart = out;
    uint8_t *const oend = out + out_size;
    const uint64_t dict = w->dict_size;
    // Matches may reach back to history_start (never before the last reset, nor further than the dictionary).
    const uint8_t *const history_start = ostart - (w->history < dict ? w->history : dict);
    const uint32_t pos0 = (uint32_t)w->history;
    const uint32_t pb_mask = (1u << m->pb) - 1, lp_mask = (1u << m->lp) - 1;
    const uint32_t lc = m->lc;
    uint32_t state = m->state, rep0 = m->rep0, rep1 = m->rep1, rep2 = m->rep2, rep3 = m->rep3;
    int err = CXZ_OK;

    // A matched literal reads at rep0: it must lie inside the history (a restored state could lie).
    if (state >= 7 && (uint64_t)rep0 >= (uint64_t)(out - history_start)) return CXZ_ERR_DISTANCE;

    while (out < oend) {
        if (ip > iend) { err = CXZ_ERR_OVERRUN; break; }
        const uint32_t pos = pos0 + (uint32_t)(out - ostart);
        const uint32_t pos_state = pos & pb_mask;
        uint32_t bit;
        BIT(&probs[CXZ_IS_MATCH + state * 16 + pos_state], bit);
        if (!bit) {
            const uint32_t prev = out > history_start ? out[-1] : 0;
            uint16_t *lit = probs + CXZ_LITERAL + 0x300 * (((pos & lp_mask) << lc) + (prev >> (8 - lc)));
            uint32_t sym = 1;
            if (state >= 7) {
                // Matched literal: while the bits agree with the byte at rep0 they select the
                // matched probabilities (offset 0x100 or 0x200); after the first disagreement
                // `offs` becomes 0 and the rest are plain literal bits.
                // Both probabilities the next bit may use are loaded ahead, as in TREE_BITS.
                uint32_t mb = (uint32_t)out[-(ptrdiff_t)rep0 - 1] << 1;
                uint32_t offs = 0x100;
                uint32_t pv = lit[offs + (mb & offs) + 1];
                MATCHED_BIT(); MATCHED_BIT(); MATCHED_BIT(); MATCHED_BIT();
                MATCHED_BIT(); MATCHED_BIT(); MATCHED_BIT();
                TREE_BIT(&lit[offs + (mb & offs) + sym], pv, 0, 0, sym);
            } else {
                TREE_BITS(lit, 8, sym);
            }
            *out++ = (uint8_t)sym;
            state = after_literal(state);
            continue;
        }
        uint32_t len = 0;
        BIT(&probs[CXZ_IS_REP + state], bit);
        if (!bit) {
            // A new match: length, then distance slot, then the distance's remaining bits.
            LENGTH(CXZ_MATCH_LEN, pos_state, len);
            state = state < 7 ? 7 : 10;
            uint32_t slot;
            TREE(probs + CXZ_DIST_SLOT + (len < 3 ? len : 3) * 64, 6, slot);
            uint32_t dist;
            if (slot < 4) {
                dist = slot;
            } else {
                const uint32_t direct = (slot >> 1) - 1;
                dist = (2 | (slot & 1)) << direct;
                if (slot < 14) {
                    REVERSE_TREE(probs + CXZ_DIST_SPECIAL + dist - slot - 1, direct, dist);
                } else {
                    // Direct bits have probability 1/2: range halves per bit whatever the bits are,
                    // so where normalisation falls is known in advance. It first falls after bit
                    // k1 = 8 - clz(range), and after that every 8 bits with no bit of range lost.
                    // With code widened by the next 4 input bytes (C = code:bytes) and range
                    // by 32 zero bits (R), a normalisation changes neither C nor R, so the bits
                    // decode with no normalising: only R's halving drops its low bit until k1
                    // (the mask). At most 4 normalisations, as 26 bits is the most there are.
                    const uint32_t nd = direct - 4, k1 = 8 - (uint32_t)__builtin_clz(range | 1);
                    uint32_t next4;
                    memcpy(&next4, ip, 4);
                    uint64_t C = (uint64_t)code << 32 | __builtin_bswap32(next4);
                    uint64_t R = (uint64_t)range << 32;
                    uint32_t high = 0, j = 0;
#define DIRECT_BIT { \
                        R = (R >> 1) & (j++ < k1 ? ~(uint64_t)0 << 32 : ~(uint64_t)0); \
                        uint64_t d_; \
                        const uint32_t zero_ = __builtin_sub_overflow(C, R, &d_); \
                        C = UNPREDICTABLE(zero_) ? C : d_; \
                        high = (high << 1) + (zero_ ^ 1); }
                    // A far match's first load waits for memory, and the next symbol (a literal
                    // reading the match's last byte) waits for that load, so the source is
                    // fetched as early as it is narrowed down: when all but the last `late`
                    // direct bits and the 4 align bits are known it lies in a span of 2^(late+4)
                    // bytes, whose 2^(late-2)+1 cache lines are fetched while those bits decode.
                    // Five bits early (9 lines) decoded the 64 MiB corpus ~11% faster than
                    // fetching 2 lines before the align bits; six (17 lines) gained little more.
                    // Prefetches do not fault, and the address is computed in uintptr_t: a
                    // distance beyond the history only fetches a useless line and is refused
                    // below, before any byte is read.
                    const uint32_t late = nd < 5 ? nd : 5;
#pragma clang loop unroll(disable)
                    while (j < nd - late) DIRECT_BIT
                    const uintptr_t span_end = (uintptr_t)out - dist - (high << (late + 4));
                    if (late == 5) prefetch_span(span_end, 5);  // a constant count: no loop
                    else prefetch_span(span_end, late);
#pragma clang loop unroll(disable)
                    while (j < nd) DIRECT_BIT
#undef DIRECT_BIT
                    // k1 > 8 only if a restored state's probabilities let range fall below 2^24:
                    // the bits are then wrong but C and R stay consistent, and ip moves on at most 4.
                    const uint32_t norms = nd < k1 ? 0 : k1 > 8 ? 0 : 1 + (nd - k1) / 8;
                    range = (uint32_t)(R >> (32 - 8 * norms));
                    code = (uint32_t)(C >> (32 - 8 * norms));
                    ip += norms;
                    dist += high << 4;
                    REVERSE_TREE(probs + CXZ_ALIGN, 4, dist);
                    if (dist == 0xFFFFFFFFu) { err = CXZ_ERR_END_MARK; break; }
                }
            }
            rep3 = rep2; rep2 = rep1; rep1 = rep0; rep0 = dist;
        } else {
            BIT(&probs[CXZ_IS_REP0 + state], bit);
            if (!bit) {
                BIT(&probs[CXZ_IS_REP0_LONG + state * 16 + pos_state], bit);
                if (!bit) {
                    // Short rep: one byte from rep0.
                    if ((uint64_t)rep0 >= (uint64_t)(out - history_start) || rep0 >= dict) { err = CXZ_ERR_DISTANCE; break; }
                    state = state < 7 ? 9 : 11;
                    *out = out[-(ptrdiff_t)rep0 - 1];
                    out++;
                    continue;
                }
            } else {
                uint32_t dist;
                BIT(&probs[CXZ_IS_REP1 + state], bit);
                if (!bit) {
                    dist = rep1;
                } else {
                    BIT(&probs[CXZ_IS_REP2 + state], bit);
                    if (!bit) { dist = rep2; } else { dist = rep3; rep3 = rep2; }
                    rep2 = rep1;
                }
                rep1 = rep0;
                rep0 = dist;
            }
            LENGTH(CXZ_REP_LEN, pos_state, len);
            state = state < 7 ? 8 : 11;
        }
        len += 2;
        if ((uint64_t)rep0 >= (uint64_t)(out - history_start) || rep0 >= dict) { err = CXZ_ERR_DISTANCE; break; }
        if (len > (size_t)(oend - out)) { err = CXZ_ERR_OVERRUN; break; }
        const uint8_t *src = out - (ptrdiff_t)rep0 - 1;
        uint8_t *const stop = out + len;
        if (rep0 >= 31) {
            // 32 bytes at once, then 16 at a time: each read lies wholly before the bytes being
            // written; the copy may run up to 30 bytes past the match, into CXZ_OUTPUT_SLACK.
            memcpy(out, src, 16);
            memcpy(out + 16, src + 16, 16);
            out += 32; src += 32;
            while (out < stop) { memcpy(out, src, 16); out += 16; src += 16; }
            out = stop;
        } else if (rep0 >= 15) {
            // Sixteen bytes at a time: each read lies wholly before the bytes being written;
            // the last step may run up to 15 bytes past the match, into CXZ_OUTPUT_SLACK.
            do { memcpy(out, src, 16); out += 16; src += 16; } while (out < stop);
            out = stop;
        } else if (rep0 >= 7) {
            do { memcpy(out, src, 8); out += 8; src += 8; } while (out < stop);
            out = stop;
        } else if (rep0 == 0) {
            memset(out, out[-1], len);  // a run of one byte, common in binaries' padding
            out = stop;
        } else {
            do { *out++ = *src++; } while (out < stop);
        }
    }
    if (err == CXZ_OK) {
        if (ip != iend) err = CXZ_ERR_OVERRUN;
        else if (code != 0) err = CXZ_ERR_RC_END;
    }
    m->state = state; m->rep0 = rep0; m->rep1 = rep1; m->rep2 = rep2; m->rep3 = rep3;
    if (err == CXZ_OK) {
        w->pos += out_size;
        w->history += out_size;
    }
    return err;
}

int cxz_window_reserve(cxz_window *w, size_t n) {
    const size_t need = n + CXZ_OUTPUT_SLACK;
    if (w->pos + need <= w->cap) return CXZ_OK;
    if (w->mapped) return CXZ_ERR_MEMORY;
    if (w->pos + need > w->max_cap) {
        // Slide: keep only the bytes matches may still refer to.
        const size_t keep = w->history < w->dict_size ? (size_t)w->history : w->dict_size;
        memmove(w->buf, w->buf + w->pos - keep, keep);
        w->pos = keep;
        if (w->pos + need <= w->cap) return CXZ_OK;
    }
    size_t grown = w->cap < (1u << 20) ? (1u << 20) : w->cap * 2;
    if (grown > w->max_cap) grown = w->max_cap;
    if (grown < w->pos + need) grown = w->pos + need;
    uint8_t *b = realloc(w->buf, grown);
    if (!b) return CXZ_ERR_MEMORY;
    w->buf = b;
    w->cap = grown;
    return CXZ_OK;
}

void cxz_window_free(cxz_window *w) {
    if (w->mapped) cxz_unmap(w->buf, w->cap);
    else free(w->buf);
    w->buf = NULL;
    w->cap = w->pos = 0;
    w->mapped = 0;
}

int cxz_window_map(cxz_window *w, size_t n) {
    cxz_window_free(w);
    uint8_t *b = cxz_map(n + CXZ_OUTPUT_SLACK);
    if (!b) return CXZ_ERR_MEMORY;
    w->buf = b;
    w->cap = n + CXZ_OUTPUT_SLACK;
    w->mapped = 1;
    return CXZ_OK;
}

void cxz_window_adopt(cxz_window *w, uint8_t *buf, size_t cap) {
    cxz_window_free(w);
    w->buf = buf;
    w->cap = cap;
    w->mapped = 1;
}

void *cxz_map(size_t n) {
    if (n == 0) n = 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void cxz_unmap(void *p, size_t n) {
    if (p) munmap(p, n == 0 ? 1 : n);
}
