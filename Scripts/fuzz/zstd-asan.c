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

// The decoded output of the last frame() call (its FNV-1a hash and length), compared
// against libzstd's and between the BMI2 and portable sequence loops.
static uint64_t out_hash;
static size_t out_length;
static char out_message[200];

// Where the clean frame's compressed blocks keep their sequences sections (targeted mutants).
enum { MAX_SECTIONS = 4096 };
static size_t section_start[MAX_SECTIONS], section_end[MAX_SECTIONS];
static int section_count;
static int recording;

static void hash_output(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) out_hash = (out_hash ^ p[i]) * 0x100000001b3ull;
    out_length += n;
}

// Bytes a literals section takes (RFC 8878 §3.1.1.3.1), or 0 when it cannot be parsed.
static size_t literals_size(const uint8_t *b, size_t n) {
    if (n < 1) return 0;
    uint32_t type = b[0] & 3, format = (b[0] >> 2) & 3;
    if (type <= 1) {
        size_t header = format == 1 ? 2 : format == 3 ? 3 : 1;
        if (n < header) return 0;
        size_t size = format == 1 ? (b[0] >> 4) | (size_t)b[1] << 4
                      : format == 3 ? (b[0] >> 4) | (size_t)b[1] << 4 | (size_t)b[2] << 12
                                    : (size_t)(b[0] >> 3);
        return header + (type == 0 ? size : 1);
    }
    if (n < 5) return 0;
    uint64_t h = b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24 | (uint64_t)b[4] << 32;
    if (format <= 1) return 3 + ((h >> 14) & 0x3FF);
    if (format == 2) return 4 + (size_t)((h >> 18) & 0x3FFF);
    return 5 + (size_t)((h >> 22) & 0x3FFFF);
}

// One frame (no skippable frames); returns 0, or a negative code for where it stopped.
static int frame(const uint8_t *in, size_t n) {
    out_hash = 0xcbf29ce484222325ull;
    out_length = 0;
    out_message[0] = 0;
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
            if (recording && section_count < MAX_SECTIONS) {
                size_t lit = literals_size(in + at, size);
                if (lit > 0 && lit < size) {
                    section_start[section_count] = at + lit;
                    section_end[section_count++] = at + size;
                }
            }
            int e = zsd_plan_block(d, block + ZSD_INPUT_FRONT_PAD, size, block_max, plan);
            free(block);  // the plan must not point into the input
            if (e) { snprintf(out_message, sizeof out_message, "%s", zsd_message(d)); rc = -8; break; }
            ZsdOutput o = {op, op + block_max, ring, previous_end ? ring + previous_end : ring, history, window};
            if (zsd_execute_plan(plan, &o)) { snprintf(out_message, sizeof out_message, "%s", zsd_plan_message(plan)); rc = -9; break; }
            produced = (size_t)(o.op - op);
        }
        hash_output(op, produced);
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

#ifdef ZSD_REFERENCE
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
// libzstd as the reference (test builds only): when both decoders accept a mutant, their
// outputs must be the same bytes; when only ours does, the mutant is printed for a look.
static ZSTD_DCtx *reference;
static uint8_t *reference_out;
enum { REFERENCE_CAPACITY = 64 << 20 };
static int differs, only_ours;
static void compare(const uint8_t *mutant, size_t m, int rc, int i) {
    size_t r = ZSTD_decompressDCtx(reference, reference_out, REFERENCE_CAPACITY, mutant, m);
    if (ZSTD_isError(r)) {
        if (rc == 0 && only_ours++ < 5) {
            printf("only-ours mutant %d: libzstd says %s\n", i, ZSTD_getErrorName(r));
            char name[64];
            snprintf(name, sizeof name, "only-ours-%d.zst", i);
            FILE *out = getenv("ZSD_DUMP") ? fopen(name, "wb") : NULL;
            if (out) { fwrite(mutant, 1, m, out); fclose(out); }
        }
        return;
    }
    if (rc != 0) return;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < r; k++) h = (h ^ reference_out[k]) * 0x100000001b3ull;
    if (h != out_hash || r != out_length) {
        differs++;
        printf("DIFFERENT OUTPUT mutant %d: ours %zu bytes, libzstd %zu\n", i, out_length, r);
    }
}
#endif

// Sequences-section mutants: the modes byte, the count, the bitstream's last bytes (initial
// states and end marker), bit flips and random bytes inside it.
static void mutate_sequences(uint8_t *mutant) {
    int s = rand() % section_count;
    size_t start = section_start[s], end = section_end[s], span = end - start;
    int edits = 1 + rand() % 3;
    for (int e = 0; e < edits; e++) {
        switch (rand() % 6) {
        case 0: mutant[start] = (uint8_t)rand(); break;                              // count
        case 1: if (span > 2) mutant[start + 1 + (mutant[start] >= 128)] = (uint8_t)(rand() & ~3); break;  // modes
        case 2: mutant[end - 1 - (size_t)rand() % (span < 4 ? span : 4)] = (uint8_t)rand(); break;  // states
        case 3: mutant[end - 1] = (uint8_t)(1u << (rand() % 8)); break;                // end marker
        case 4: mutant[start + (size_t)rand() % span] ^= (uint8_t)(1u << (rand() % 8)); break;
        default: mutant[start + (size_t)rand() % span] = (uint8_t)rand(); break;
        }
    }
}

// usage: zstd-asan FRAME ITERATIONS SEED [v]  (v: one line per mutant: return code, output
// length and hash, message; two builds' lines must match)
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
    int verbose = argc > 4 && argv[4][0] == 'v';
    srand((unsigned)atoi(argv[3]));
    recording = 1;
    printf("clean=%d", frame(data, (size_t)n));
    recording = 0;
    printf(" length=%zu hash=%016llx sequence-sections=%d\n", out_length, (unsigned long long)out_hash, section_count);
#ifdef ZSD_REFERENCE
    reference = ZSTD_createDCtx();
    ZSTD_DCtx_setParameter(reference, ZSTD_d_forceIgnoreChecksum, 1);
    ZSTD_DCtx_setParameter(reference, ZSTD_d_windowLogMax, 27);
    reference_out = malloc(REFERENCE_CAPACITY);
#endif
    uint8_t *mutant = malloc((size_t)n);
    int counts[16] = {0};
    for (int i = 0; i < iterations; i++) {
        memcpy(mutant, data, (size_t)n);
        size_t m = (size_t)n;
        int kind = rand() % 7;
        if (kind >= 5 && section_count > 0) {
            mutate_sequences(mutant);
        } else {
            if (kind >= 5) kind = 0;
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
        }
        int rc = frame(mutant, m);
        counts[-rc & 15]++;
        if (verbose) printf("%d rc=%d %zu %016llx %s\n", i, rc, out_length, (unsigned long long)out_hash, out_message);
#ifdef ZSD_REFERENCE
        compare(mutant, m, rc, i);
#endif
    }
    printf("mutants=%d ok=%d", iterations, counts[0]);
    for (int c = 1; c < 16; c++)
        if (counts[c]) printf(" rc-%d=%d", c, counts[c]);
#ifdef ZSD_REFERENCE
    printf(" differs=%d only-ours=%d", differs, only_ours);
#endif
    printf("\n");
    free(mutant);
    free(data);
    return 0;
}
