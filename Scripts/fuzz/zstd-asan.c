// Fuzzes Sources/CZstdDecoder under AddressSanitizer/UBSan with mutants of zstd frames (bit
// flips, random bytes, truncations, deletions, block headers changed). The frame loop follows
// ZstdDecoder.swift: each block is read into its own allocation with exactly
// ZSD_INPUT_FRONT_PAD bytes before it and ZSD_INPUT_TAIL_PAD after it, planned, then executed
// into a ring laid out as ZstdWindow does (window + 2 blocks, exactly ZSD_OUTPUT_SLACK after
// it), so any read or write past them is reported. Run by Scripts/fuzz/zstd-asan; a clean run
// prints return codes only.
// usage: zstd-asan FRAME ITERATIONS SEED
#include "zstd_block_decoder.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 128 * 1024 };

// One frame (no skippable frames); returns 0, or a negative code for where it stopped.
static int frame(const uint8_t *in, size_t n) {
    if (n < 6) return -1;
    if (in[0] != 0x28 || in[1] != 0xb5 || in[2] != 0x2f || in[3] != 0xfd) return -2;
    uint8_t fhd = in[4];
    if (fhd & 0x08) return -3;  // reserved bit
    int single = (fhd >> 5) & 1, fcs_flag = fhd >> 6, dict_flag = fhd & 3;
    static const size_t dict_bytes[4] = {0, 1, 2, 4};
    size_t fcs_bytes = fcs_flag == 0 ? (size_t)single : (size_t)1 << fcs_flag;
    size_t at = 5;
    uint64_t window = 0;
    if (!single) {
        uint8_t wd = in[at++];
        uint64_t base = 1ull << (10 + (wd >> 3));
        window = base + (base / 8) * (wd & 7);
    }
    if (dict_bytes[dict_flag]) return -4;  // needs a dictionary
    if (n < at + fcs_bytes) return -1;
    if (single) {
        uint64_t fcs = 0;
        for (size_t i = 0; i < fcs_bytes; i++) fcs |= (uint64_t)in[at + i] << (8 * i);
        if (fcs_flag == 1) fcs += 256;
        window = fcs;
    }
    at += fcs_bytes;
    if (window > (16u << 20)) return -5;  // over the limit this harness allows
    size_t block_max = window < BLOCK ? (size_t)window : BLOCK;
    size_t usable = (size_t)window + 2 * BLOCK + 64;
    uint8_t *ring = malloc(usable + ZSD_OUTPUT_SLACK);
    ZsdDecoder *d = zsd_create();
    ZsdPlan *plan = zsd_plan_create();
    size_t write = 0, previous_end = 0;
    uint64_t history = 0;
    int rc = 0;
    for (;;) {
        if (n - at < 3) { rc = -1; break; }
        uint32_t h = in[at] | in[at + 1] << 8 | in[at + 2] << 16;
        at += 3;
        int last = h & 1, type = (h >> 1) & 3;
        size_t size = h >> 3;
        if (type == 3) { rc = -6; break; }
        if (size > block_max) { rc = -7; break; }
        size_t take = type == 1 ? 1 : size;
        if (n - at < take) { rc = -1; break; }
        size_t limit = type == 2 ? block_max : size;
        if (write + limit > usable) { previous_end = write; write = 0; }
        uint8_t *op = ring + write;
        size_t produced;
        if (type == 0) { memcpy(op, in + at, size); produced = size; }
        else if (type == 1) { memset(op, in[at], size); produced = size; }
        else {
            uint8_t *block = malloc(ZSD_INPUT_FRONT_PAD + size + ZSD_INPUT_TAIL_PAD);
            memset(block, 0, ZSD_INPUT_FRONT_PAD);
            memcpy(block + ZSD_INPUT_FRONT_PAD, in + at, size);
            memset(block + ZSD_INPUT_FRONT_PAD + size, 0, ZSD_INPUT_TAIL_PAD);
            int e = zsd_plan_block(d, block + ZSD_INPUT_FRONT_PAD, size, block_max, plan);
            free(block);  // the plan must not point into the input
            if (e) { rc = -8; break; }
            ZsdOutput o = {op, op + block_max, ring, previous_end ? ring + previous_end : ring, history, window};
            if (zsd_execute_plan(plan, &o)) { rc = -9; break; }
            produced = (size_t)(o.op - op);
        }
        at += take;
        write += produced;
        history = history + produced > window ? window : history + produced;
        if (last) break;
    }
    zsd_plan_destroy(plan);
    zsd_destroy(d);
    free(ring);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    uint8_t *data = malloc((size_t)n);
    if (fread(data, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    int iterations = atoi(argv[2]);
    srand((unsigned)atoi(argv[3]));
    printf("clean=%d\n", frame(data, (size_t)n));
    uint8_t *mutant = malloc((size_t)n);
    int counts[16] = {0};
    for (int i = 0; i < iterations; i++) {
        memcpy(mutant, data, (size_t)n);
        size_t m = (size_t)n;
        int kind = rand() % 5;
        int edits = 1 + rand() % 4;
        for (int e = 0; e < edits; e++) {
            size_t p = 6 + (size_t)rand() % (m - 6);
            switch (kind) {
            case 0: mutant[p] ^= (uint8_t)(1u << (rand() % 8)); break;
            case 1: mutant[p] = (uint8_t)rand(); break;
            case 2: m = p; break;  // truncation
            case 3: memmove(mutant + p, mutant + p + 1, m - p - 1); m--; break;
            default: mutant[p] = (uint8_t)(rand() & 1 ? 0xff : 0); break;
            }
            if (m <= 7) break;
        }
        int rc = frame(mutant, m);
        counts[-rc & 15]++;
    }
    printf("mutants=%d ok=%d", iterations, counts[0]);
    for (int c = 1; c < 16; c++)
        if (counts[c]) printf(" rc-%d=%d", c, counts[c]);
    printf("\n");
    free(mutant);
    free(data);
    return 0;
}
