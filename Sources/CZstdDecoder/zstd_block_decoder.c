// Written from RFC 8878 for Sluice. See include/zstd_block_decoder.h for the division of
// labour with the Swift stage. Conventions here:
// - Every stream is fully buffered with padding around it (ZSD_INPUT_*_PAD), so bit reads
//   are plain unaligned 64-bit loads with no end-of-input branches; overruns are detected
//   by the bit position going negative and checked once per symbol or sequence.
// - Any inconsistency returns -1 with a message; nothing here trusts a length it read.
#include "zstd_block_decoder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "zstd_block_decoder.c assumes a little-endian host"
#endif

#define HUF_MAX_BITS 11
#define LL_MAX_SYMBOL 35
#define ML_MAX_SYMBOL 52
#define OF_MAX_SYMBOL 31
#define FSE_MAX_SYMBOLS 256

typedef struct HufCell { uint8_t symbol; uint8_t bits; } HufCell;

/// One state of a sequence table: the value it stands for (baseline + extra bits to read)
/// and how to reach the next state (next_base + read(bits)).
typedef struct SeqCell {
    uint32_t baseline;
    uint16_t next_base;
    uint8_t bits;
    uint8_t extra;
} SeqCell;

typedef struct SeqTable {
    SeqCell cells[512];
    uint32_t log;
    uint8_t kind;
    uint8_t rle_symbol;
    uint8_t description_length;
    uint8_t description[ZSD_MAX_SEQ_DESCRIPTION];
} SeqTable;

struct ZsdDecoder {
    HufCell huffman[1 << HUF_MAX_BITS];
    uint32_t huffman_bits;  // 0: no table yet
    uint32_t huffman_description_length;
    uint8_t huffman_description[ZSD_MAX_HUF_DESCRIPTION];
    SeqTable tables[3];
    uint32_t rep[3];
    char message[200];
};

/// A block decoded down to what its execution needs: its literals, and its sequences with
/// repeat offsets resolved to real ones. Lengths are checked against the literals and the
/// block's maximum already; only the offsets' reach depends on the output before the block.
struct ZsdPlan {
    size_t literal_count;
    size_t sequence_count;
    size_t output_size;
    ZsdSequence sequences[ZSD_MAX_SEQUENCES];
    uint8_t literals[ZSD_BLOCK_MAX + ZSD_OUTPUT_SLACK];
    char message[200];
};

static int fail(ZsdDecoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ZsdDecoder *d, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(d->message, sizeof d->message, fmt, args);
    va_end(args);
    return -1;
}

static inline uint64_t load64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t highbit32(uint32_t v) { return 31u - (uint32_t)__builtin_clz(v); }

// ---- Backward bit streams (RFC 8878 §4.1, §4.2.2): read from the end towards the start.
// `pos` counts the bits not yet read; bits [pos - n, pos) are the next n. The last byte's
// highest set bit marks the end and is not data.

static int backward_init(ZsdDecoder *d, const uint8_t *stream, size_t size, int64_t *pos, const char *what) {
    if (size == 0) return fail(d, "%s is empty", what);
    uint8_t last = stream[size - 1];
    if (last == 0) return fail(d, "%s does not end with a marker bit (last byte is 0)", what);
    *pos = (int64_t)(size - 1) * 8 + (int64_t)highbit32(last);
    return 0;
}

static inline uint64_t backward_read(const uint8_t *stream, int64_t *pos, uint32_t n) {
    int64_t p = *pos - (int64_t)n;
    *pos = p;
    return (load64(stream + (p >> 3)) >> (p & 7)) & ((1ull << n) - 1);
}

// ---- FSE table descriptions (§4.1.1) and decoding tables.

static const int16_t LL_DEFAULT[36] = {4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2,
                                       2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1};
static const int16_t ML_DEFAULT[53] = {1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1};
static const int16_t OF_DEFAULT[29] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1};

static const uint32_t LL_BASE[36] = {0,  1,  2,  3,  4,  5,  6,   7,   8,   9,    10,   11,
                                     12, 13, 14, 15, 16, 18, 20,  22,  24,  28,   32,   40,
                                     48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
static const uint8_t LL_EXTRA[36] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  0,  0,  0,  0,  0,  1,  1,
                                     1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint32_t ML_BASE[53] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  12,  13,  14,   15,   16,
                                     17, 18, 19, 20, 21, 22, 23, 24, 25,  26,  27,  28,   29,   30,
                                     31, 32, 33, 34, 35, 37, 39, 41, 43,  47,  51,  59,   67,   83,
                                     99, 131, 259, 515, 1027, 2051, 4099, 8195, 16387, 32771, 65539};
static const uint8_t ML_EXTRA[53] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1,
                                     2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/// Parses a table description: fills `counts[0..<symbols]` (-1: "less than one"), the
/// accuracy log, and the bytes used. `src` has at least 8 readable bytes past `size`.
static int fse_parse(ZsdDecoder *d, const uint8_t *src, size_t size, uint32_t max_symbol, uint32_t max_log,
                     int16_t *counts, uint32_t *symbols, uint32_t *log_out, size_t *used, const char *what) {
    if (size == 0) return fail(d, "%s table description is missing", what);
    const uint64_t limit = (uint64_t)size * 8;
    uint64_t bp = 0;
#define PEEK(n) ((uint32_t)((load64(src + (bp >> 3)) >> (bp & 7)) & ((1ull << (n)) - 1)))
    uint32_t log = PEEK(4) + 5;
    bp += 4;
    if (log > max_log) return fail(d, "%s table accuracy log %u exceeds the maximum %u", what, log, max_log);
    int32_t remaining = (1 << log) + 1;
    int32_t threshold = 1 << log;
    uint32_t bits = log + 1;
    uint32_t symbol = 0;
    int previous_zero = 0;
    while (remaining > 1) {
        if (previous_zero) {
            for (;;) {
                uint32_t repeat = PEEK(2);
                bp += 2;
                if (bp > limit || symbol + repeat > max_symbol + 1)
                    return fail(d, "%s table description is truncated or names too many symbols", what);
                for (uint32_t i = 0; i < repeat; i++) counts[symbol++] = 0;
                if (repeat != 3) break;
            }
            previous_zero = 0;
        }
        if (symbol > max_symbol) return fail(d, "%s table description names more than %u symbols", what, max_symbol + 1);
        int32_t small_limit = (2 * threshold - 1) - remaining;
        uint32_t value = PEEK(bits);
        int32_t count;
        if ((int32_t)(value & (uint32_t)(threshold - 1)) < small_limit) {
            count = (int32_t)(value & (uint32_t)(threshold - 1));
            bp += bits - 1;
        } else {
            count = (int32_t)(value & (uint32_t)(2 * threshold - 1));
            if (count >= threshold) count -= small_limit;
            bp += bits;
        }
        count -= 1;
        remaining -= count < 0 ? -count : count;
        counts[symbol++] = (int16_t)count;
        previous_zero = count == 0;
        if (bp > limit) return fail(d, "%s table description is truncated", what);
        if (remaining < 1) return fail(d, "%s table description's probabilities exceed the table", what);
        while (remaining < threshold) {
            bits--;
            threshold >>= 1;
        }
    }
#undef PEEK
    *symbols = symbol;
    *log_out = log;
    *used = (size_t)((bp + 7) / 8);
    return 0;
}

/// Builds decoding states from normalized counts (§4.1.1: symbols "less than one" at the
/// top, the others spread with the fixed step). Outputs per-state symbol, bits and next base.
static int fse_build(ZsdDecoder *d, const int16_t *counts, uint32_t symbols, uint32_t log,
                     uint8_t *symbol_out, uint8_t *bits_out, uint16_t *next_out, const char *what) {
    const uint32_t size = 1u << log;
    const uint32_t mask = size - 1;
    uint32_t high = size - 1;
    uint16_t next_count[FSE_MAX_SYMBOLS];
    uint32_t total = 0;
    for (uint32_t s = 0; s < symbols; s++) {
        if (counts[s] == -1) {
            symbol_out[high] = (uint8_t)s;
            if (high == 0) return fail(d, "%s table has too many low-probability symbols", what);
            high--;
            next_count[s] = 1;
            total += 1;
        } else {
            next_count[s] = (uint16_t)counts[s];
            total += (uint32_t)counts[s];
        }
    }
    if (total != size) return fail(d, "%s table probabilities sum to %u, not %u", what, total, size);
    const uint32_t step = (size >> 1) + (size >> 3) + 3;
    uint32_t position = 0;
    for (uint32_t s = 0; s < symbols; s++) {
        for (int32_t i = 0; i < counts[s]; i++) {
            symbol_out[position] = (uint8_t)s;
            do {
                position = (position + step) & mask;
            } while (position > high);
        }
    }
    if (position != 0) return fail(d, "%s table could not be spread", what);
    for (uint32_t state = 0; state < size; state++) {
        uint32_t s = symbol_out[state];
        uint32_t x = next_count[s]++;
        uint32_t nb = log - highbit32(x);
        bits_out[state] = (uint8_t)nb;
        next_out[state] = (uint16_t)((x << nb) - size);
    }
    return 0;
}

static const char *table_name(int which) {
    return which == ZSD_LITERAL_LENGTHS ? "literal lengths" : which == ZSD_OFFSETS ? "offsets" : "match lengths";
}

static void seq_fill(SeqTable *t, int which, const uint8_t *symbols, const uint8_t *bits, const uint16_t *next, uint32_t log) {
    uint32_t size = 1u << log;
    for (uint32_t i = 0; i < size; i++) {
        uint32_t s = symbols[i];
        SeqCell c;
        if (which == ZSD_LITERAL_LENGTHS) { c.baseline = LL_BASE[s]; c.extra = LL_EXTRA[s]; }
        else if (which == ZSD_MATCH_LENGTHS) { c.baseline = ML_BASE[s]; c.extra = ML_EXTRA[s]; }
        else { c.baseline = 1u << s; c.extra = (uint8_t)s; }
        c.bits = bits[i];
        c.next_base = next[i];
        t->cells[i] = c;
    }
    t->log = log;
}

static uint32_t max_symbol_of(int which) {
    return which == ZSD_LITERAL_LENGTHS ? LL_MAX_SYMBOL : which == ZSD_OFFSETS ? OF_MAX_SYMBOL : ML_MAX_SYMBOL;
}

static int seq_build_predefined(ZsdDecoder *d, int which) {
    SeqTable *t = &d->tables[which];
    if (t->kind == ZSD_TABLE_PREDEFINED) return 0;
    uint8_t symbols[64], bits[64];
    uint16_t next[64];
    const int16_t *counts = which == ZSD_LITERAL_LENGTHS ? LL_DEFAULT : which == ZSD_OFFSETS ? OF_DEFAULT : ML_DEFAULT;
    uint32_t n = which == ZSD_LITERAL_LENGTHS ? 36 : which == ZSD_OFFSETS ? 29 : 53;
    uint32_t log = which == ZSD_OFFSETS ? 5 : 6;
    if (fse_build(d, counts, n, log, symbols, bits, next, table_name(which)) != 0) return -1;
    seq_fill(t, which, symbols, bits, next, log);
    t->kind = ZSD_TABLE_PREDEFINED;
    t->description_length = 0;
    return 0;
}

static int seq_build_rle(ZsdDecoder *d, int which, uint8_t symbol) {
    if (symbol > max_symbol_of(which))
        return fail(d, "%s RLE symbol %u is out of range", table_name(which), symbol);
    SeqTable *t = &d->tables[which];
    uint8_t s = symbol, b = 0;
    uint16_t n = 0;
    seq_fill(t, which, &s, &b, &n, 0);
    t->kind = ZSD_TABLE_RLE;
    t->rle_symbol = symbol;
    t->description_length = 0;
    return 0;
}

/// `src` has 8 readable bytes past `size`. Sets `*used`.
static int seq_build_compressed(ZsdDecoder *d, int which, const uint8_t *src, size_t size, size_t *used) {
    int16_t counts[FSE_MAX_SYMBOLS];
    uint32_t symbols, log;
    uint32_t max_log = which == ZSD_OFFSETS ? 8 : 9;
    if (fse_parse(d, src, size, max_symbol_of(which), max_log, counts, &symbols, &log, used, table_name(which)) != 0)
        return -1;
    if (*used > ZSD_MAX_SEQ_DESCRIPTION) return fail(d, "%s table description is too long", table_name(which));
    uint8_t sym[512], bits[512];
    uint16_t next[512];
    if (fse_build(d, counts, symbols, log, sym, bits, next, table_name(which)) != 0) return -1;
    SeqTable *t = &d->tables[which];
    seq_fill(t, which, sym, bits, next, log);
    t->kind = ZSD_TABLE_COMPRESSED;
    memcpy(t->description, src, *used);
    t->description_length = (uint8_t)*used;
    return 0;
}

// ---- Huffman literals (§4.2).

/// Builds the decoding table from the explicit weights (the last one is implied).
static int huf_build(ZsdDecoder *d, uint8_t *weights, uint32_t count) {
    if (count == 0 || count > 255) return fail(d, "Huffman tree has %u weights", count);
    uint32_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (weights[i] > HUF_MAX_BITS) return fail(d, "Huffman weight %u is over %u", weights[i], HUF_MAX_BITS);
        if (weights[i]) total += 1u << (weights[i] - 1);
    }
    if (total == 0) return fail(d, "Huffman tree has only zero weights");
    uint32_t max_bits = highbit32(total) + 1;
    if (max_bits > HUF_MAX_BITS) return fail(d, "Huffman codes would be longer than %u bits", HUF_MAX_BITS);
    uint32_t rest = (1u << max_bits) - total;
    if (rest & (rest - 1)) return fail(d, "Huffman weights do not complete a prefix code");
    weights[count] = (uint8_t)(highbit32(rest) + 1);
    uint32_t symbols = count + 1;
    uint32_t position = 0;
    for (uint32_t w = 1; w <= max_bits; w++) {
        uint32_t span = 1u << (w - 1);
        HufCell cell = {0, (uint8_t)(max_bits + 1 - w)};
        for (uint32_t s = 0; s < symbols; s++) {
            if (weights[s] != w) continue;
            cell.symbol = (uint8_t)s;
            for (uint32_t i = 0; i < span; i++) d->huffman[position + i] = cell;
            position += span;
        }
    }
    d->huffman_bits = max_bits;
    return 0;
}

/// Reads a tree description at `src` (8 readable bytes past `size`); sets `*used`.
static int huf_read_tree(ZsdDecoder *d, const uint8_t *src, size_t size, size_t *used) {
    if (size < 1) return fail(d, "Huffman tree description is missing");
    uint8_t weights[257];
    uint32_t count = 0;
    uint32_t header = src[0];
    if (header >= 128) {
        count = header - 127;
        size_t bytes = (count + 1) / 2;
        if (1 + bytes > size) return fail(d, "Huffman tree description is truncated");
        for (uint32_t i = 0; i < count; i++) {
            uint8_t b = src[1 + i / 2];
            weights[i] = (i & 1) ? (b & 15) : (b >> 4);
        }
        *used = 1 + bytes;
    } else {
        if (header == 0 || 1 + (size_t)header > size) return fail(d, "Huffman tree description is truncated");
        const uint8_t *fse = src + 1;
        int16_t counts[FSE_MAX_SYMBOLS];
        uint32_t symbols, log;
        size_t table_bytes;
        if (fse_parse(d, fse, header, 255, 6, counts, &symbols, &log, &table_bytes, "Huffman weights") != 0) return -1;
        if (table_bytes >= header) return fail(d, "Huffman weights have no bitstream");
        uint8_t sym[64], bits[64];
        uint16_t next[64];
        if (fse_build(d, counts, symbols, log, sym, bits, next, "Huffman weights") != 0) return -1;
        const uint8_t *stream = fse + table_bytes;
        int64_t pos = 0;
        if (backward_init(d, stream, header - table_bytes, &pos, "Huffman weights bitstream") != 0) return -1;
        // Two interleaved states; missing bits at the very end read as zero, and the
        // stream ends once an update needed more bits than were left (§4.2.1.2).
        uint32_t s1 = (uint32_t)backward_read(stream, &pos, log);
        uint32_t s2 = (uint32_t)backward_read(stream, &pos, log);
        if (pos < 0) return fail(d, "Huffman weights bitstream is too short");
        for (;;) {
            if (count > 253) return fail(d, "Huffman tree has too many weights");
            weights[count++] = sym[s1];
            s1 = next[s1] + (uint32_t)backward_read(stream, &pos, bits[s1]);
            if (pos < 0) { weights[count++] = sym[s2]; break; }
            weights[count++] = sym[s2];
            s2 = next[s2] + (uint32_t)backward_read(stream, &pos, bits[s2]);
            if (pos < 0) { weights[count++] = sym[s1]; break; }
        }
        *used = 1 + header;
    }
    if (huf_build(d, weights, count) != 0) return -1;
    memcpy(d->huffman_description, src, *used);
    d->huffman_description_length = (uint32_t)*used;
    return 0;
}

static inline uint8_t huf_decode(const HufCell *table, const uint8_t *stream, int64_t *pos, uint32_t bits) {
    int64_t q = *pos - (int64_t)bits;
    uint32_t index = (uint32_t)(load64(stream + (q >> 3)) >> (q & 7)) & ((1u << bits) - 1);
    HufCell c = table[index];
    *pos -= c.bits;
    return c.symbol;
}

static int huf_stream(ZsdDecoder *d, const uint8_t *stream, size_t size, uint8_t *out, size_t count) {
    int64_t pos;
    if (backward_init(d, stream, size, &pos, "Huffman literal stream") != 0) return -1;
    const HufCell *table = d->huffman;
    const uint32_t bits = d->huffman_bits;
    size_t i = 0;
    // Up to 4 symbols of at most 11 bits each can be taken while 44 bits remain.
    while (i + 4 <= count && pos >= 44) {
        out[i] = huf_decode(table, stream, &pos, bits);
        out[i + 1] = huf_decode(table, stream, &pos, bits);
        out[i + 2] = huf_decode(table, stream, &pos, bits);
        out[i + 3] = huf_decode(table, stream, &pos, bits);
        i += 4;
    }
    for (; i < count; i++) {
        if (pos < 0) break;
        out[i] = huf_decode(table, stream, &pos, bits);
    }
    if (pos != 0) return fail(d, "Huffman literal stream is %s", pos < 0 ? "too short" : "longer than its literals");
    return 0;
}

static int huf_four_streams(ZsdDecoder *d, const uint8_t *src, size_t size, uint8_t *out, size_t count) {
    if (size < 10) return fail(d, "Huffman jump table is truncated");
    size_t s1 = (size_t)src[0] | (size_t)src[1] << 8;
    size_t s2 = (size_t)src[2] | (size_t)src[3] << 8;
    size_t s3 = (size_t)src[4] | (size_t)src[5] << 8;
    if (6 + s1 + s2 + s3 >= size) return fail(d, "Huffman jump table points past the literals");
    size_t s4 = size - 6 - s1 - s2 - s3;
    size_t segment = (count + 3) / 4;
    if (3 * segment > count) return fail(d, "%zu literals cannot be split into four streams", count);
    const uint8_t *p1 = src + 6, *p2 = p1 + s1, *p3 = p2 + s2, *p4 = p3 + s3;
    int64_t q1, q2, q3, q4;
    if (backward_init(d, p1, s1, &q1, "Huffman literal stream 1") || backward_init(d, p2, s2, &q2, "Huffman literal stream 2") ||
        backward_init(d, p3, s3, &q3, "Huffman literal stream 3") || backward_init(d, p4, s4, &q4, "Huffman literal stream 4"))
        return -1;
    const HufCell *table = d->huffman;
    const uint32_t bits = d->huffman_bits;
    uint8_t *o1 = out, *o2 = out + segment, *o3 = out + 2 * segment, *o4 = out + 3 * segment;
    size_t last = count - 3 * segment;
    size_t common = last < segment ? last : segment;
    size_t i = 0;
    // Interleaving the four streams hides each table lookup's latency behind the others.
    while (i + 2 <= common && q1 >= 22 && q2 >= 22 && q3 >= 22 && q4 >= 22) {
        o1[i] = huf_decode(table, p1, &q1, bits);
        o2[i] = huf_decode(table, p2, &q2, bits);
        o3[i] = huf_decode(table, p3, &q3, bits);
        o4[i] = huf_decode(table, p4, &q4, bits);
        o1[i + 1] = huf_decode(table, p1, &q1, bits);
        o2[i + 1] = huf_decode(table, p2, &q2, bits);
        o3[i + 1] = huf_decode(table, p3, &q3, bits);
        o4[i + 1] = huf_decode(table, p4, &q4, bits);
        i += 2;
    }
    size_t j;
    for (j = i; j < segment && q1 >= 0; j++) o1[j] = huf_decode(table, p1, &q1, bits);
    for (j = i; j < segment && q2 >= 0; j++) o2[j] = huf_decode(table, p2, &q2, bits);
    for (j = i; j < segment && q3 >= 0; j++) o3[j] = huf_decode(table, p3, &q3, bits);
    for (j = i; j < last && q4 >= 0; j++) o4[j] = huf_decode(table, p4, &q4, bits);
    // The format requires each stream to be consumed exactly ("the decoding process is
    // considered faulty" otherwise). libzstd's fast 4-stream loop does not check this, so it
    // passes some corrupt streams (without a content checksum) that we refuse; no encoder
    // writes them.
    if (q1 != 0 || q2 != 0 || q3 != 0 || q4 != 0) return fail(d, "a Huffman literal stream does not end where its literals do");
    return 0;
}

/// Decodes the literals section; sets where the literals are and how many; returns bytes used.
/// The literals always land in `dst` (ZSD_BLOCK_MAX + slack bytes), raw ones too: the
/// input buffer is reused for the next block while this one is executed.
static int literals_section(ZsdDecoder *d, const uint8_t *src, size_t size, uint8_t *dst, size_t *count, size_t *used) {
    if (size < 1) return fail(d, "block has no literals section");
    uint32_t type = src[0] & 3;
    uint32_t format = (src[0] >> 2) & 3;
    if (type <= 1) {
        size_t header, regenerated;
        if (format == 0 || format == 2) { header = 1; regenerated = src[0] >> 3; }
        else if (format == 1) {
            header = 2;
            if (size < 2) return fail(d, "literals header is truncated");
            regenerated = (src[0] >> 4) | ((size_t)src[1] << 4);
        } else {
            header = 3;
            if (size < 3) return fail(d, "literals header is truncated");
            regenerated = (src[0] >> 4) | ((size_t)src[1] << 4) | ((size_t)src[2] << 12);
        }
        if (regenerated > ZSD_BLOCK_MAX) return fail(d, "literals section claims %zu bytes", regenerated);
        if (type == 0) {
            if (header + regenerated > size) return fail(d, "raw literals run past the block");
            memcpy(dst, src + header, regenerated);
            *used = header + regenerated;
        } else {
            if (header + 1 > size) return fail(d, "RLE literals byte is missing");
            memset(dst, src[header], regenerated);
            *used = header + 1;
        }
        *count = regenerated;
        return 0;
    }
    size_t header, regenerated, compressed;
    int four = format != 0;
    if (format <= 1) {
        header = 3;
        if (size < 3) return fail(d, "literals header is truncated");
        uint32_t h = src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16;
        regenerated = (h >> 4) & 0x3FF;
        compressed = (h >> 14) & 0x3FF;
    } else if (format == 2) {
        header = 4;
        if (size < 4) return fail(d, "literals header is truncated");
        uint32_t h = src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16 | (uint32_t)src[3] << 24;
        regenerated = (h >> 4) & 0x3FFF;
        compressed = h >> 18;
    } else {
        header = 5;
        if (size < 5) return fail(d, "literals header is truncated");
        uint64_t h = src[0] | (uint64_t)src[1] << 8 | (uint64_t)src[2] << 16 | (uint64_t)src[3] << 24 | (uint64_t)src[4] << 32;
        regenerated = (h >> 4) & 0x3FFFF;
        compressed = (h >> 22) & 0x3FFFF;
    }
    if (regenerated > ZSD_BLOCK_MAX) return fail(d, "literals section claims %zu bytes", regenerated);
    if (header + compressed > size) return fail(d, "compressed literals run past the block");
    const uint8_t *p = src + header;
    size_t rest = compressed;
    if (type == 2) {
        size_t tree;
        if (huf_read_tree(d, p, rest, &tree) != 0) return -1;
        p += tree;
        rest -= tree;
    } else if (d->huffman_bits == 0) {
        return fail(d, "treeless literals but no Huffman table in force");
    }
    int r = four ? huf_four_streams(d, p, rest, dst, regenerated) : huf_stream(d, p, rest, dst, regenerated);
    if (r != 0) return -1;
    *count = regenerated;
    *used = header + compressed;
    return 0;
}

// ---- Sequences (§3.1.1.3.2) and their execution.

static inline void copy16(uint8_t *dst, const uint8_t *src) { memcpy(dst, src, 16); }

/// Copies `n` bytes in 16-byte steps; may write up to 15 bytes past dst + n.
static inline __attribute__((always_inline)) void wildcopy(uint8_t *dst, const uint8_t *src, size_t n) {
    uint8_t *end = dst + n;
    do {
        copy16(dst, src);
        dst += 16;
        src += 16;
    } while (dst < end);
}

/// Copies a match whose source lies in the current segment, `offset` bytes back; may write
/// up to 15 bytes past op + length.
static inline __attribute__((always_inline)) void match_copy(uint8_t *op, size_t offset, size_t length) {
    const uint8_t *m = op - offset;
    if (offset >= 16) {
        wildcopy(op, m, length);
        return;
    }
    uint8_t *end = op + length;
    if (offset < 8) {
        // Lay down the first 8 bytes one at a time; after that the pattern repeats with a
        // period that is a multiple of `offset` and at least 8, so 8-byte copies are safe.
        for (int i = 0; i < 8; i++) op[i] = m[i];
        static const uint8_t period[8] = {0, 8, 8, 9, 8, 10, 12, 14};
        op += 8;
        m = op - period[offset];
    }
    while (op < end) {
        memcpy(op, m, 8);
        op += 8;
        m += 8;
    }
}

/// The low `n` bits of `w` (n < 64).
static inline __attribute__((always_inline)) uint64_t low_bits(uint64_t w, uint32_t n) { return w & ((1ull << n) - 1); }

/// The sequence loop (§3.1.1.3.2.1): three FSE states, extra bits, repeat offsets.
/// Lengths are added up and checked once at the end (a plan is executed only if all of it
/// passes); an offset of 0 (a repeat of offset 1, minus one) is left for the execution, whose
/// reach check refuses it. The bit position is checked once per sequence, before it can reach
/// under the stream's start by more than the front padding.
static inline __attribute__((always_inline)) int sequence_loop(ZsdDecoder *d, const uint8_t *stream, size_t size,
                                                               size_t nb_seq, ZsdSequence *sequences,
                                                               size_t *literals_left, size_t *room) {
    int64_t pos;
    if (backward_init(d, stream, size, &pos, "sequences bitstream") != 0) return -1;
    const SeqCell *ll_t = d->tables[ZSD_LITERAL_LENGTHS].cells;
    const SeqCell *of_t = d->tables[ZSD_OFFSETS].cells;
    const SeqCell *ml_t = d->tables[ZSD_MATCH_LENGTHS].cells;
    uint32_t ll_s = (uint32_t)backward_read(stream, &pos, d->tables[ZSD_LITERAL_LENGTHS].log);
    uint32_t of_s = (uint32_t)backward_read(stream, &pos, d->tables[ZSD_OFFSETS].log);
    uint32_t ml_s = (uint32_t)backward_read(stream, &pos, d->tables[ZSD_MATCH_LENGTHS].log);
    uint32_t r0 = d->rep[0], r1 = d->rep[1], r2 = d->rep[2];
    uint64_t literal_total = 0, output_total = 0;
    ZsdSequence *seq = sequences;
    ZsdSequence *const end = sequences + nb_seq;
    for (;;) {
        if (pos < 0) return fail(d, "sequences bitstream is too short for %zu sequences", nb_seq);
        const SeqCell ll_c = ll_t[ll_s], of_c = of_t[of_s], ml_c = ml_t[ml_s];
        // Extra bits are read offset, match length, literal length: one load serves all three
        // unless a long offset makes them too many for one word.
        uint32_t offset_value, ml, ll;
        const uint32_t extra = (uint32_t)of_c.extra + ml_c.extra + ll_c.extra;
        if (__builtin_expect(extra <= 56, 1)) {
            pos -= extra;
            uint64_t w = load64(stream + (pos >> 3)) >> (pos & 7);
            ll = ll_c.baseline + (uint32_t)low_bits(w, ll_c.extra);
            w >>= ll_c.extra;
            ml = ml_c.baseline + (uint32_t)low_bits(w, ml_c.extra);
            w >>= ml_c.extra;
            offset_value = of_c.baseline + (uint32_t)low_bits(w, of_c.extra);
        } else {
            offset_value = of_c.baseline + (uint32_t)backward_read(stream, &pos, of_c.extra);
            ml = ml_c.baseline + (uint32_t)backward_read(stream, &pos, ml_c.extra);
            ll = ll_c.baseline + (uint32_t)backward_read(stream, &pos, ll_c.extra);
        }
        uint32_t offset;
        if (offset_value > 3) {
            offset = offset_value - 3;
            r2 = r1; r1 = r0; r0 = offset;
        } else {
            const uint32_t index = offset_value - 1 + (ll == 0);
            if (index == 0) offset = r0;
            else {
                // index 1: r1, 2: r2, 3: r0 - 1; the chosen one moves to the front.
                offset = index == 1 ? r1 : index == 2 ? r2 : r0 - 1;
                if (index != 1) r2 = r1;
                r1 = r0;
                r0 = offset;
            }
        }
        literal_total += ll;
        output_total += (uint64_t)ll + ml;
        seq->literal_length = ll;
        seq->match_length = ml;
        seq->offset = offset;
        if (++seq == end) break;
        // State updates read literal length, match length, offset: at most 26 bits.
        pos -= (int64_t)(ll_c.bits + ml_c.bits + of_c.bits);
        uint64_t w = load64(stream + (pos >> 3)) >> (pos & 7);
        of_s = of_c.next_base + (uint32_t)low_bits(w, of_c.bits);
        w >>= of_c.bits;
        ml_s = ml_c.next_base + (uint32_t)low_bits(w, ml_c.bits);
        w >>= ml_c.bits;
        ll_s = ll_c.next_base + (uint32_t)low_bits(w, ll_c.bits);
    }
    if (pos != 0) return fail(d, "sequences bitstream has %s", pos < 0 ? "too few bits" : "bits left over");
    if (literal_total > *literals_left)
        return fail(d, "sequences take %llu literals, the block has %zu", (unsigned long long)literal_total, *literals_left);
    if (output_total > *room) return fail(d, "sequences write past the block's maximum size");
    *literals_left -= (size_t)literal_total;
    *room -= (size_t)output_total;
    d->rep[0] = r0; d->rep[1] = r1; d->rep[2] = r2;
    return 0;
}

static int decode_sequences_portable(ZsdDecoder *d, const uint8_t *stream, size_t size, size_t nb_seq,
                                     ZsdSequence *sequences, size_t *literals_left, size_t *room) {
    return sequence_loop(d, stream, size, nb_seq, sequences, literals_left, room);
}

#if defined(__x86_64__) && defined(__clang__)
// The same loop compiled for BMI2 (bzhi/shrx: a mask and a variable shift in one instruction
// each, no flags), chosen at run time: 15% less planning time on the zstd -19 corpus.
__attribute__((target("bmi,bmi2"))) static int decode_sequences_bmi2(ZsdDecoder *d, const uint8_t *stream, size_t size,
                                                                    size_t nb_seq, ZsdSequence *sequences,
                                                                    size_t *literals_left, size_t *room) {
    return sequence_loop(d, stream, size, nb_seq, sequences, literals_left, room);
}
#endif

static int decode_sequences(ZsdDecoder *d, const uint8_t *stream, size_t size, size_t nb_seq, ZsdSequence *sequences,
                            size_t *literals_left, size_t *room) {
#if defined(__x86_64__) && defined(__clang__)
    if (__builtin_cpu_supports("bmi2")) return decode_sequences_bmi2(d, stream, size, nb_seq, sequences, literals_left, room);
#endif
    return decode_sequences_portable(d, stream, size, nb_seq, sequences, literals_left, room);
}

/// Decodes the sequences section into `plan` (whose literals are decoded already), checking
/// every length against the literals and `block_max`, and resolving repeat offsets.
static int sequences_section(ZsdDecoder *d, const uint8_t *src, size_t size, size_t block_max, ZsdPlan *plan) {
    size_t literals_left = plan->literal_count;
    size_t room = block_max;
    if (size < 1) return fail(d, "sequences section is missing");
    size_t nb_seq;
    size_t header;
    uint32_t b0 = src[0];
    if (b0 < 128) { nb_seq = b0; header = 1; }
    else if (b0 < 255) {
        if (size < 2) return fail(d, "sequences header is truncated");
        nb_seq = ((b0 - 128) << 8) + src[1];
        header = 2;
    } else {
        if (size < 3) return fail(d, "sequences header is truncated");
        nb_seq = src[1] + ((size_t)src[2] << 8) + 0x7F00;
        header = 3;
    }
    // Every sequence writes at least a 3-byte match, so more cannot fit in a block.
    if (nb_seq > ZSD_MAX_SEQUENCES) return fail(d, "block claims %zu sequences, more than a block can hold", nb_seq);
    if (nb_seq == 0) {
        if (header != size) return fail(d, "block has bytes after an empty sequences section");
    } else {
        if (header + 1 > size) return fail(d, "sequences compression modes are missing");
        uint32_t modes = src[header];
        if (modes & 3) return fail(d, "sequences compression modes use reserved bits");
        size_t at = header + 1;
        static const int order[3] = {ZSD_LITERAL_LENGTHS, ZSD_OFFSETS, ZSD_MATCH_LENGTHS};
        for (int k = 0; k < 3; k++) {
            int which = order[k];
            uint32_t mode = (modes >> (6 - 2 * k)) & 3;
            if (mode == 0) {
                if (seq_build_predefined(d, which) != 0) return -1;
            } else if (mode == 1) {
                if (at >= size) return fail(d, "%s RLE symbol is missing", table_name(which));
                if (seq_build_rle(d, which, src[at]) != 0) return -1;
                at += 1;
            } else if (mode == 2) {
                size_t used;
                if (seq_build_compressed(d, which, src + at, size - at, &used) != 0) return -1;
                at += used;
            } else if (d->tables[which].kind == ZSD_TABLE_NONE) {
                return fail(d, "%s table is repeated but none was defined in this frame", table_name(which));
            }
        }
        if (decode_sequences(d, src + at, size - at, nb_seq, plan->sequences, &literals_left, &room) != 0) return -1;
    }
    if (literals_left > room) return fail(d, "literals write past the block's maximum size");
    plan->sequence_count = nb_seq;
    plan->output_size = block_max - room + literals_left;
    return 0;
}

int zsd_plan_block(ZsdDecoder *d, const uint8_t *src, size_t size, size_t block_max, ZsdPlan *plan) {
    size_t used = 0;
    plan->literal_count = 0;
    plan->sequence_count = 0;
    plan->output_size = 0;
    if (block_max > ZSD_BLOCK_MAX) return fail(d, "block maximum %zu is over %d", block_max, ZSD_BLOCK_MAX);
    if (literals_section(d, src, size, plan->literals, &plan->literal_count, &used) != 0) return -1;
    return sequences_section(d, src + used, size - used, block_max, plan);
}

static int plan_fail(ZsdPlan *plan, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int plan_fail(ZsdPlan *plan, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(plan->message, sizeof plan->message, fmt, args);
    va_end(args);
    return -1;
}

int zsd_execute_plan(ZsdPlan *plan, ZsdOutput *out) {
    uint8_t *op = out->op;
    uint8_t *const block_start = op;
    if (plan->output_size > (size_t)(out->limit - op)) return plan_fail(plan, "block writes past its maximum size");
    const uint8_t *lit = plan->literals;
    const ZsdSequence *sequences = plan->sequences;
    const size_t count = plan->sequence_count;
    const uint64_t window = out->window_size;
    const uint64_t history = out->history;
    const uint8_t *segment_start = out->segment_start;
    const uint8_t *previous_end = out->previous_end;
    // Each match's source is prefetched AHEAD sequences before it is copied: with a window of
    // megabytes most match sources are cache misses, and this hides them behind the copies
    // in between.
    enum { AHEAD = 8 };
    uintptr_t future = (uintptr_t)op;  // where the next prefetched sequence's literals go
    for (size_t n = 0; n < count + AHEAD; n++) {
        if (n < count) {
            future += sequences[n].literal_length;
            // Integer arithmetic: a corrupt offset may point anywhere, and a prefetch cannot fault.
            uintptr_t offset = sequences[n].offset;
            uintptr_t in_segment = future - (uintptr_t)segment_start;
            uintptr_t source = offset <= in_segment ? future - offset : (uintptr_t)previous_end - (offset - in_segment);
            // Two lines: most matches of a high level are longer than one (-19 corpus: 20% less CPU).
            __builtin_prefetch((const void *)source);
            __builtin_prefetch((const void *)(source + 64));
            future += sequences[n].match_length;
        }
        if (n < AHEAD) continue;
        const size_t k = n - AHEAD;
        const size_t ll = sequences[k].literal_length, ml = sequences[k].match_length;
        const uint32_t offset = sequences[k].offset;
        wildcopy(op, lit, ll);
        op += ll;
        lit += ll;
        uint64_t reach = history + (uint64_t)(op - block_start);
        // Offset 0 (a repeat of offset 1, minus one) wraps around and is refused here too.
        if ((uint64_t)offset - 1 >= reach || offset > window) {
            if (offset == 0) return plan_fail(plan, "sequence %zu repeats an offset of 0", k);
            return plan_fail(plan, "sequence %zu refers %u bytes back, before the start of the %s", k, offset,
                             offset > window ? "window" : "frame");
        }
        size_t in_segment = (size_t)(op - segment_start);
        if (offset <= in_segment) {
            match_copy(op, offset, ml);
            op += ml;
        } else {
            // The match starts in the older segment of the ring: copy that part exactly.
            const uint8_t *m = previous_end - (offset - in_segment);
            size_t first = (size_t)(previous_end - m);
            if (first > ml) first = ml;
            memcpy(op, m, first);
            op += first;
            if (ml > first) {
                match_copy(op, offset, ml - first);
                op += ml - first;
            }
        }
    }
    size_t tail = plan->literal_count - (size_t)(lit - plan->literals);
    memcpy(op, lit, tail);
    op += tail;
    out->op = op;
    return 0;
}

int zsd_decode_block(ZsdDecoder *d, ZsdPlan *plan, const uint8_t *src, size_t size, ZsdOutput *out) {
    if (zsd_plan_block(d, src, size, (size_t)(out->limit - out->op), plan) != 0) return -1;
    if (zsd_execute_plan(plan, out) != 0) return fail(d, "%s", plan->message);
    return 0;
}

ZsdPlan *zsd_plan_create(void) {
    ZsdPlan *plan = malloc(sizeof *plan);
    if (plan) {
        plan->literal_count = plan->sequence_count = plan->output_size = 0;
        plan->message[0] = 0;
    }
    return plan;
}

void zsd_plan_destroy(ZsdPlan *plan) { free(plan); }

size_t zsd_plan_output_size(const ZsdPlan *plan) { return plan->output_size; }

const char *zsd_plan_message(const ZsdPlan *plan) { return plan->message; }

// ---- Lifetime and checkpoint state.

ZsdDecoder *zsd_create(void) {
    ZsdDecoder *d = calloc(1, sizeof *d);
    if (d) zsd_reset_frame(d);
    return d;
}

void zsd_destroy(ZsdDecoder *d) { free(d); }

void zsd_reset_frame(ZsdDecoder *d) {
    d->huffman_bits = 0;
    d->huffman_description_length = 0;
    for (int i = 0; i < 3; i++) {
        d->tables[i].kind = ZSD_TABLE_NONE;
        d->tables[i].description_length = 0;
        d->tables[i].log = 0;
        memset(&d->tables[i].cells[0], 0, sizeof(SeqCell));
    }
    d->rep[0] = 1; d->rep[1] = 4; d->rep[2] = 8;
    d->message[0] = 0;
}

const char *zsd_message(const ZsdDecoder *d) { return d->message; }

void zsd_repeat_offsets(const ZsdDecoder *d, uint32_t out[3]) { memcpy(out, d->rep, sizeof d->rep); }

int zsd_set_repeat_offsets(ZsdDecoder *d, const uint32_t rep[3]) {
    for (int i = 0; i < 3; i++)
        if (rep[i] == 0) return fail(d, "repeat offset %d is 0", i + 1);
    memcpy(d->rep, rep, sizeof d->rep);
    return 0;
}

const uint8_t *zsd_huffman_description(const ZsdDecoder *d, size_t *length) {
    *length = d->huffman_description_length;
    return d->huffman_description;
}

int zsd_restore_huffman(ZsdDecoder *d, const uint8_t *description, size_t length) {
    d->huffman_bits = 0;
    d->huffman_description_length = 0;
    if (length == 0) return 0;
    if (length > ZSD_MAX_HUF_DESCRIPTION) return fail(d, "Huffman tree description is too long");
    // Padded copy: the readers may look a word past either end.
    uint8_t padded[ZSD_INPUT_FRONT_PAD + ZSD_MAX_HUF_DESCRIPTION + ZSD_INPUT_TAIL_PAD] = {0};
    memcpy(padded + ZSD_INPUT_FRONT_PAD, description, length);
    size_t used;
    if (huf_read_tree(d, padded + ZSD_INPUT_FRONT_PAD, length, &used) != 0) { d->huffman_bits = 0; return -1; }
    if (used != length) { d->huffman_bits = 0; return fail(d, "Huffman tree description has trailing bytes"); }
    return 0;
}

int zsd_sequence_table(const ZsdDecoder *d, int which, uint8_t *symbol, const uint8_t **description, size_t *length) {
    const SeqTable *t = &d->tables[which < 0 || which > 2 ? 0 : which];
    *symbol = t->rle_symbol;
    *description = t->description;
    *length = t->description_length;
    return t->kind;
}

int zsd_restore_sequence_table(ZsdDecoder *d, int which, int kind, uint8_t symbol,
                               const uint8_t *description, size_t length) {
    if (which < 0 || which > 2) return fail(d, "no sequence table %d", which);
    SeqTable *t = &d->tables[which];
    t->kind = ZSD_TABLE_NONE;
    switch (kind) {
    case ZSD_TABLE_NONE: return 0;
    case ZSD_TABLE_PREDEFINED: return seq_build_predefined(d, which);
    case ZSD_TABLE_RLE: return seq_build_rle(d, which, symbol);
    case ZSD_TABLE_COMPRESSED: {
        if (length == 0 || length > ZSD_MAX_SEQ_DESCRIPTION) return fail(d, "%s table description has %zu bytes", table_name(which), length);
        uint8_t padded[ZSD_MAX_SEQ_DESCRIPTION + ZSD_INPUT_TAIL_PAD] = {0};
        memcpy(padded, description, length);
        size_t used;
        if (seq_build_compressed(d, which, padded, length, &used) != 0) { t->kind = ZSD_TABLE_NONE; return -1; }
        if (used != length) { t->kind = ZSD_TABLE_NONE; return fail(d, "%s table description has trailing bytes", table_name(which)); }
        return 0;
    }
    default: return fail(d, "unknown table kind %d", kind);
    }
}

// ---- XXH64 (the content checksum, §3.1.1), seed 0.

#define P1 11400714785074694791ull
#define P2 14029467366897019727ull
#define P3 1609587929392839161ull
#define P4 9650029242287828579ull
#define P5 2870177450012600261ull

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
    acc += input * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}
static inline uint64_t xxh_merge(uint64_t acc, uint64_t lane) {
    acc ^= xxh_round(0, lane);
    return acc * P1 + P4;
}

void zsd_xxh64_reset(ZsdXXH64 *h) {
    memset(h, 0, sizeof *h);
    h->lanes[0] = P1 + P2;
    h->lanes[1] = P2;
    h->lanes[2] = 0;
    h->lanes[3] = 0 - P1;
}

void zsd_xxh64_update(ZsdXXH64 *h, const uint8_t *p, size_t n) {
    if (h->buffered > 31) h->buffered = 0;  // only an edited state could hold this
    h->total += n;
    if (h->buffered + n < 32) {
        memcpy(h->buffer + h->buffered, p, n);
        h->buffered += (uint32_t)n;
        return;
    }
    uint64_t v0 = h->lanes[0], v1 = h->lanes[1], v2 = h->lanes[2], v3 = h->lanes[3];
    if (h->buffered) {
        size_t fill = 32 - h->buffered;
        memcpy(h->buffer + h->buffered, p, fill);
        p += fill;
        n -= fill;
        v0 = xxh_round(v0, load64(h->buffer));
        v1 = xxh_round(v1, load64(h->buffer + 8));
        v2 = xxh_round(v2, load64(h->buffer + 16));
        v3 = xxh_round(v3, load64(h->buffer + 24));
        h->buffered = 0;
    }
    while (n >= 32) {
        v0 = xxh_round(v0, load64(p));
        v1 = xxh_round(v1, load64(p + 8));
        v2 = xxh_round(v2, load64(p + 16));
        v3 = xxh_round(v3, load64(p + 24));
        p += 32;
        n -= 32;
    }
    h->lanes[0] = v0; h->lanes[1] = v1; h->lanes[2] = v2; h->lanes[3] = v3;
    memcpy(h->buffer, p, n);
    h->buffered = (uint32_t)n;
}

void zsd_xxh64_update_copy(ZsdXXH64 *h, uint8_t *dst, const uint8_t *p, size_t n) {
    if (h->buffered > 31) h->buffered = 0;  // only an edited state could hold this
    if (h->buffered) {
        // Complete the partial stripe the ordinary way first.
        size_t fill = 32 - h->buffered;
        if (fill > n) fill = n;
        memcpy(dst, p, fill);
        zsd_xxh64_update(h, p, fill);
        dst += fill;
        p += fill;
        n -= fill;
    }
    // Now no bytes are buffered (or none are left): whole stripes are loaded once, stored
    // to dst and mixed into the lanes.
    uint64_t v0 = h->lanes[0], v1 = h->lanes[1], v2 = h->lanes[2], v3 = h->lanes[3];
    const size_t stripes = n / 32;
    for (size_t i = 0; i < stripes; i++) {
        const uint64_t a = load64(p), b = load64(p + 8), c = load64(p + 16), e = load64(p + 24);
        memcpy(dst, &a, 8);
        memcpy(dst + 8, &b, 8);
        memcpy(dst + 16, &c, 8);
        memcpy(dst + 24, &e, 8);
        v0 = xxh_round(v0, a);
        v1 = xxh_round(v1, b);
        v2 = xxh_round(v2, c);
        v3 = xxh_round(v3, e);
        p += 32;
        dst += 32;
    }
    h->lanes[0] = v0; h->lanes[1] = v1; h->lanes[2] = v2; h->lanes[3] = v3;
    h->total += stripes * 32;
    n -= stripes * 32;
    memcpy(dst, p, n);
    zsd_xxh64_update(h, p, n);  // under a stripe: buffered
}

uint64_t zsd_xxh64_digest(const ZsdXXH64 *h) {
    uint64_t acc;
    if (h->total >= 32) {
        acc = rotl64(h->lanes[0], 1) + rotl64(h->lanes[1], 7) + rotl64(h->lanes[2], 12) + rotl64(h->lanes[3], 18);
        for (int i = 0; i < 4; i++) acc = xxh_merge(acc, h->lanes[i]);
    } else {
        acc = P5;
    }
    acc += h->total;
    const uint8_t *p = h->buffer;
    size_t n = h->buffered > 31 ? 0 : h->buffered;
    while (n >= 8) {
        acc ^= xxh_round(0, load64(p));
        acc = rotl64(acc, 27) * P1 + P4;
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        acc ^= (uint64_t)v * P1;
        acc = rotl64(acc, 23) * P2 + P3;
        p += 4;
        n -= 4;
    }
    while (n > 0) {
        acc ^= (*p) * P5;
        acc = rotl64(acc, 11) * P1;
        p++;
        n--;
    }
    acc ^= acc >> 33;
    acc *= P2;
    acc ^= acc >> 29;
    acc *= P3;
    acc ^= acc >> 32;
    return acc;
}
