// Benchmarks/lzma-harness/lzma-bench.c — times Sources/CXz/lzma.c alone: decodes the first
// block of a single-block .xz (LZMA2 only) REPS times into one mapped buffer, the way an
// unxz worker does, and prints the block's CRC-64 (compare with `xz -lvv`'s CheckVal).
// Build and run with Benchmarks/lzma-harness/run.
// usage: lzma-bench FILE.xz REPS
#include "cxz.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LZMA_AB
#include <time.h>
int cxz_lzma_decode_base(cxz_lzma *m, cxz_window *w, const uint8_t *in, size_t in_size, size_t out_size);
typedef int (*decode_fn)(cxz_lzma *, cxz_window *, const uint8_t *, size_t, size_t);
static decode_fn decoder = cxz_lzma_decode;
#define cxz_lzma_decode(...) decoder(__VA_ARGS__)
#endif
// LZMA_BENCH_MIB=N stops after the first N MiB of output (shorter rounds, more pairs).
static size_t stop_after = (size_t)-1;
static int lzma2(const uint8_t *in, size_t n, cxz_lzma *m, cxz_window *w, size_t size, size_t *used) {
    size_t p = 0;
    for (;;) {
        if (w->pos >= stop_after) { *used = p; return 0; }
        if (p >= n) return -1;
        uint8_t c = in[p];
        if (c == 0) { *used = p + 1; return 0; }
        size_t hl = c == 1 || c == 2 ? 3 : c >= 0xC0 ? 6 : c >= 0x80 ? 5 : 0;
        if (!hl || n - p < hl) return -2;
        size_t pl = c >= 0x80 ? ((size_t)in[p + 3] << 8 | in[p + 4]) + 1 : ((size_t)in[p + 1] << 8 | in[p + 2]) + 1;
        if (n - p < hl + pl) return -3;
        if (c == 1 || c >= 0xE0) w->history = 0;
        size_t os = c >= 0x80 ? (((size_t)(c & 0x1F) << 16) | (size_t)in[p + 1] << 8 | in[p + 2]) + 1 : pl;
        if (w->pos + os > size) return -5;
        if (c < 0x80) { memcpy(w->buf + w->pos, in + p + hl, pl); w->pos += pl; w->history += pl; }
        else {
            if (c >= 0xC0) { uint8_t b = in[p + 5]; m->lc = b % 9; m->lp = b / 9 % 5; m->pb = b / 45; }
            if (c >= 0xA0) cxz_lzma_reset(m);
            int e = cxz_lzma_decode(m, w, in + p + hl, pl, os);
            if (e) return e;
        }
        p += hl + pl;
    }
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: lzma-bench FILE.xz REPS [OUT]\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
    uint8_t *d = malloc((size_t)n + CXZ_INPUT_SLACK);
    if (fread(d, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    memset(d + n, 0, CXZ_INPUT_SLACK);
    const size_t bh = 12, hsize = ((size_t)d[bh] + 1) * 4;
    const uint8_t *lz = d + bh + hsize;
    // The block's uncompressed size is not in its header (xz -T1): decode once to learn it.
    size_t size = (size_t)1 << 31;
    if (getenv("LZMA_BENCH_MIB")) stop_after = (size_t)atoi(getenv("LZMA_BENCH_MIB")) << 20;
    int reps = atoi(argv[2]);
    cxz_lzma *m = malloc(sizeof *m);
    uint8_t *buf = NULL; size_t cap = 0;
    int rc = 0;
#ifdef LZMA_AB
    // A/B in one process: rounds alternate base and worktree decoders (the order swapped every
    // round), each timed in this thread's CPU time; prints the median of the per-pair ratios.
    double ratios[1000]; int pairs = 0;
    double min[2] = {1e9, 1e9};
    for (int r = 0; r < reps && r < 1000; r++) {
        double t[2];
        for (int k = 0; k < 2; k++) {
            const int which = (r & 1) ^ k;
            decoder = which ? cxz_lzma_decode : cxz_lzma_decode_base;
            cxz_window w = {0};
            w.dict_size = 1u << 30;
            if (!buf) { if (cxz_window_map(&w, size)) return 3; buf = w.buf; cap = w.cap; }
            else cxz_window_adopt(&w, buf, cap);
            size_t used = 0;
            struct timespec a, b;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
            rc = lzma2(lz, (size_t)(d + n - lz), m, &w, size, &used);
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
            if (rc) { fprintf(stderr, "decode error %d\n", rc); return 1; }
            t[which] = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        }
        ratios[pairs++] = t[1] / t[0];
        for (int k = 0; k < 2; k++) if (r > 0 && t[k] < min[k]) min[k] = t[k];
        printf("base %.3f s  new %.3f s  new/base %.4f\n", t[0], t[1], t[1] / t[0]);
    }
    for (int i = 1; i < pairs; i++)
        for (int j = i; j > 0 && ratios[j] < ratios[j - 1]; j--) { double x = ratios[j]; ratios[j] = ratios[j - 1]; ratios[j - 1] = x; }
    printf("median new/base %.4f over %d pairs (quartiles %.4f %.4f)\n", ratios[pairs / 2], pairs, ratios[pairs / 4], ratios[3 * pairs / 4]);
    printf("fastest run (after the first pair): base %.4f s, new %.4f s, new/base %.4f\n", min[0], min[1], min[1] / min[0]);
    return 0;
#endif
    for (int r = 0; r < reps; r++) {
        cxz_window w = {0};
        w.dict_size = 1u << 30;
        if (!buf) { if (cxz_window_map(&w, size)) return 3; buf = w.buf; cap = w.cap; }
        else cxz_window_adopt(&w, buf, cap);
        w.mapped = 1;
        size_t used = 0;
        rc = lzma2(lz, (size_t)(d + n - lz), m, &w, size, &used);
        if (rc) { fprintf(stderr, "decode error %d\n", rc); return 1; }
        if (r == reps - 1) {
            uint64_t crc = cxz_crc64(0, w.buf, w.pos);
            printf("%zu bytes crc64 ", w.pos);
            for (int i = 0; i < 8; i++) printf("%02x", (unsigned)(crc >> (8 * i)) & 0xFF);
            printf("\n");
            if (argc > 3) { FILE *o = fopen(argv[3], "wb"); fwrite(w.buf, 1, w.pos, o); fclose(o); }
        }
    }
    return 0;
}
