// Fuzzes Sources/CXz/lzma.c under AddressSanitizer/UBSan with mutants of a raw LZMA2
// stream (bit flips, random bytes, truncations, deletions, chunk sizes and control bytes
// changed). The chunk loop follows Lzma2Decoder.decode; the input gets exactly
// CXZ_INPUT_SLACK bytes after it and the window exactly CXZ_OUTPUT_SLACK, in both the
// streaming layout and the whole-block layout of the worker threads, so any read or write
// past them is reported. Run by Scripts/fuzz/lzma2-asan; a clean run prints return codes only.
// usage: lzma2-asan RAW UNCOMPRESSED_SIZE DICT_SIZE ITERATIONS SEED
#include "cxz.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
// LZMA2 chunk loop mirroring Lzma2Decoder.decode; whole==1: window is one block buffer of `size`.
static int lzma2(const uint8_t *data, size_t n, int whole, size_t size, uint32_t dict) {
    cxz_lzma *m = malloc(sizeof *m); cxz_lzma_reset(m);
    cxz_window w = {0}; w.dict_size = dict;
    if (whole) { w.max_cap = size + CXZ_OUTPUT_SLACK; if (cxz_window_reserve(&w, size)) { free(m); return -9; } }
    else w.max_cap = dict + (dict > (4u<<20) ? dict : (4u<<20)) + CXZ_MAX_CHUNK_OUTPUT;
    // input: exact size + slack in its own allocation
    uint8_t *in = malloc(n + CXZ_INPUT_SLACK); memcpy(in, data, n); memset(in + n, 0xAB, CXZ_INPUT_SLACK);
    size_t p = 0; int needReset = 1, needProps = 1, rc = 0;
    for (;;) {
        if (p >= n) { rc = -1; break; }
        uint8_t c = in[p];
        if (c == 0) { rc = 0; break; }
        size_t hl = c == 1 || c == 2 ? 3 : c >= 0xC0 ? 6 : c >= 0x80 ? 5 : 0;
        if (!hl) { rc = -2; break; }
        if (n - p < hl) { rc = -3; break; }
        size_t pl = c >= 0x80 ? ((size_t)in[p+3] << 8 | in[p+4]) + 1 : ((size_t)in[p+1] << 8 | in[p+2]) + 1;
        if (n - p < hl + pl) { rc = -3; break; }
        int reset = c == 1 || c >= 0xE0;
        if (reset) { w.history = 0; if (!whole) w.pos = 0; needReset = 0; needProps = 1; }
        else if (needReset) { rc = -4; break; }
        size_t os = c >= 0x80 ? (((size_t)(c & 0x1F) << 16) | (size_t)in[p+1] << 8 | in[p+2]) + 1 : pl;
        if (whole && w.pos + os > size) { rc = -5; break; }
        if (cxz_window_reserve(&w, os)) { rc = -6; break; }
        if (c < 0x80) { memcpy(w.buf + w.pos, in + p + hl, pl); w.pos += pl; w.history += pl; }
        else {
            if (c >= 0xC0) { uint8_t b = in[p+5]; if (b >= 225) { rc = -7; break; }
                uint32_t lc = b % 9, lp = b / 9 % 5, pb = b / 45; if (lc + lp > 4) { rc = -7; break; }
                m->lc = lc; m->lp = lp; m->pb = pb; needProps = 0; }
            else if (needProps) { rc = -8; break; }
            if (c >= 0xA0) cxz_lzma_reset(m);
            int e = cxz_lzma_decode(m, &w, in + p + hl, pl, os);
            if (e) { rc = e; break; }
        }
        p += hl + pl;
    }
    free(in); cxz_window_free(&w); free(m);
    return rc;
}
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
    uint8_t *d = malloc(n); fread(d, 1, n, f); fclose(f);
    size_t size = strtoul(argv[2], 0, 10); uint32_t dict = strtoul(argv[3], 0, 10);
    int iters = atoi(argv[4]); unsigned seed = atoi(argv[5]); srand(seed);
    printf("clean whole=%d stream=%d\n", lzma2(d, n, 1, size, dict), lzma2(d, n, 0, size, dict));
    uint8_t *mu = malloc(n);
    int hist[16] = {0};
    for (int i = 0; i < iters; i++) {
        memcpy(mu, d, n); size_t len = n;
        int k = rand() % 8; if (k > 5) k = 5;
        int muts = 1 + rand() % 4;
        for (int j = 0; j < muts; j++) {
            size_t at = rand() % len;
            if (k == 0) mu[at] ^= 1 << (rand() % 8);
            else if (k == 1) mu[at] = rand();
            else if (k == 2) len = at + 1;  // truncate
            else if (k == 3) { mu[at] = rand() & 1 ? 0xFF : 0; }
            else if (k == 4 && at + 8 < len) { memmove(mu + at, mu + at + 1 + rand() % 7, len - at - 8); }
            else {
                // walk chunk headers and perturb one's sizes
                size_t p = 0, pick = rand() % 8, idx = 0;
                while (p < len && mu[p]) { uint8_t c = mu[p]; size_t hl = c == 1 || c == 2 ? 3 : c >= 0xC0 ? 6 : c >= 0x80 ? 5 : 0; if (!hl || p + hl > len) break;
                    size_t pl = c >= 0x80 ? ((size_t)mu[p+3] << 8 | mu[p+4]) + 1 : ((size_t)mu[p+1] << 8 | mu[p+2]) + 1;
                    if (idx++ == pick || p + hl + pl >= len) { int d = rand() % 64 - 32; int which = rand() % 3;
                        if (c >= 0x80 && which == 0) { size_t v = ((size_t)mu[p+3] << 8 | mu[p+4]) + d; mu[p+3] = v >> 8; mu[p+4] = v; }
                        else if (c >= 0x80 && which == 1) { size_t v = ((size_t)mu[p+1] << 8 | mu[p+2]) + d; mu[p+1] = v >> 8; mu[p+2] = v; }
                        else if (which == 2) { mu[p] = rand() % 2 ? 0x80 | (c & 0x1F) : (c >= 0x80 ? 0xE0 | (c & 0x1F) : 1); }
                        else { size_t v = ((size_t)mu[p+1] << 8 | mu[p+2]) + d; mu[p+1] = v >> 8; mu[p+2] = v; }
                        break; }
                    p += hl + pl; }
            }
        }
        int r1 = lzma2(mu, len, rand() & 1, rand() % 4 ? size : rand() % (size + 64) + 1, rand() % 3 ? dict : 4096 + rand() % 65536);
        hist[(r1 + 9) & 15]++;
    }
    for (int i = 0; i < 16; i++) if (hist[i]) printf("rc %d: %d\n", i - 9, hist[i]);
    return 0;
}
