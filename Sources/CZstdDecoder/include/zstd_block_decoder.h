// A Zstandard (RFC 8878) block decoder written for Sluice: it decodes one complete
// compressed block at a time and keeps everything that carries over between blocks
// (entropy tables, the descriptions they were built from, repeat offsets) in a plain
// struct, so that the Swift stage can save it and rebuild it in another process.
//
// Frames, block headers, raw/RLE blocks, the window and the checksum bookkeeping live
// in Swift (Sources/Sluice/Stages/ZstdDecoder.swift); only the per-byte work is here.
#ifndef SLUICE_ZSTD_BLOCK_DECODER_H
#define SLUICE_ZSTD_BLOCK_DECODER_H

#include <stddef.h>
#include <stdint.h>

/// Largest block content, compressed or not (RFC 8878 §3.1.1.2.3).
#define ZSD_BLOCK_MAX (128 * 1024)
/// Readable bytes the caller guarantees before a block's first byte (the bit readers
/// may load a word that starts there when a stream is nearly exhausted).
#define ZSD_INPUT_FRONT_PAD 16
/// Readable bytes the caller guarantees after a block's last byte.
#define ZSD_INPUT_TAIL_PAD 32
/// Writable bytes the caller guarantees after the output limit (copies run in 16-byte steps).
#define ZSD_OUTPUT_SLACK 32
/// Longest table description kept for a checkpoint (real ones are under 100 bytes).
#define ZSD_MAX_SEQ_DESCRIPTION 192
/// Longest Huffman tree description: one header byte and up to 128 more.
#define ZSD_MAX_HUF_DESCRIPTION 130

enum {
    ZSD_TABLE_NONE = 0,        // not defined yet in this frame: a repeat is corrupt
    ZSD_TABLE_PREDEFINED = 1,
    ZSD_TABLE_RLE = 2,
    ZSD_TABLE_COMPRESSED = 3,
};

enum { ZSD_LITERAL_LENGTHS = 0, ZSD_OFFSETS = 1, ZSD_MATCH_LENGTHS = 2 };

/// Where a block's output goes. The output is a ring made of two segments: the current one
/// starts at `segment_start` and ends at `op`; older output, if any, ends at `previous_end`.
typedef struct ZsdOutput {
    uint8_t *op;                  // where the block's first byte goes; advanced past its output
    uint8_t *limit;               // the block may not produce past here (slack follows)
    const uint8_t *segment_start;
    const uint8_t *previous_end;  // == segment_start when there is no older segment
    uint64_t history;             // bytes of this frame before the block that matches may reach
    uint64_t window_size;
} ZsdOutput;

typedef struct ZsdDecoder ZsdDecoder;

ZsdDecoder *zsd_create(void);
void zsd_destroy(ZsdDecoder *d);

/// Starts a frame: no tables, repeat offsets 1, 4, 8.
void zsd_reset_frame(ZsdDecoder *d);

/// Most sequences a block can hold: each writes a match of at least 3 bytes.
#define ZSD_MAX_SEQUENCES (ZSD_BLOCK_MAX / 3)

/// One sequence with its repeat offset resolved: copy `literal_length` literals, then
/// `match_length` bytes from `offset` bytes back.
typedef struct ZsdSequence {
    uint32_t literal_length;
    uint32_t match_length;
    uint32_t offset;
} ZsdSequence;

/// A compressed block decoded as far as it can be without its output history (literals
/// and resolved sequences). Decoding a block's plan needs only the previous block's
/// tables and repeat offsets, never output, so it can run ahead on another thread.
typedef struct ZsdPlan ZsdPlan;

ZsdPlan *zsd_plan_create(void);
void zsd_plan_destroy(ZsdPlan *plan);

/// Decodes the compressed block `src[0..<size]` into `plan`, which may produce at most
/// `block_max` bytes; advances the decoder's tables and repeat offsets. Returns 0, or -1
/// with `zsd_message` set.
int zsd_plan_block(ZsdDecoder *d, const uint8_t *src, size_t size, size_t block_max, ZsdPlan *plan);

/// Bytes the planned block produces.
size_t zsd_plan_output_size(const ZsdPlan *plan);

/// Executes a plan into `out` (literal and match copies). Only the offsets' reach is checked
/// here. Returns 0, or -1 with `zsd_plan_message` set. Touches no decoder state.
int zsd_execute_plan(ZsdPlan *plan, ZsdOutput *out);
const char *zsd_plan_message(const ZsdPlan *plan);

/// Both halves in one call, with `plan` as scratch. Returns 0, or -1 with `zsd_message` set.
int zsd_decode_block(ZsdDecoder *d, ZsdPlan *plan, const uint8_t *src, size_t size, ZsdOutput *out);

const char *zsd_message(const ZsdDecoder *d);

// State a checkpoint keeps, and rebuilding from it. Rebuilding checks the descriptions as
// strictly as decoding does: a restored state is untrusted input.
void zsd_repeat_offsets(const ZsdDecoder *d, uint32_t out[3]);
int zsd_set_repeat_offsets(ZsdDecoder *d, const uint32_t rep[3]);
/// The Huffman tree description in force (length 0: none yet).
const uint8_t *zsd_huffman_description(const ZsdDecoder *d, size_t *length);
int zsd_restore_huffman(ZsdDecoder *d, const uint8_t *description, size_t length);
/// Kind (ZSD_TABLE_*), RLE symbol, and compressed description of a sequence table.
int zsd_sequence_table(const ZsdDecoder *d, int which, uint8_t *symbol, const uint8_t **description, size_t *length);
int zsd_restore_sequence_table(ZsdDecoder *d, int which, int kind, uint8_t symbol,
                               const uint8_t *description, size_t length);

/// XXH64 with seed 0, streaming; a plain struct so a checkpoint can store it.
typedef struct ZsdXXH64 {
    uint64_t lanes[4];
    uint64_t total;
    uint8_t buffer[32];
    uint32_t buffered;
} ZsdXXH64;

void zsd_xxh64_reset(ZsdXXH64 *h);
void zsd_xxh64_update(ZsdXXH64 *h, const uint8_t *bytes, size_t count);
/// zsd_xxh64_update that also copies the bytes to `dst` (not overlapping them), reading
/// each byte once: the stage hashes its output while it moves it into the next stage's buffer.
void zsd_xxh64_update_copy(ZsdXXH64 *h, uint8_t *dst, const uint8_t *bytes, size_t count);
uint64_t zsd_xxh64_digest(const ZsdXXH64 *h);

#endif
