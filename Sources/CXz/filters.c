// The filters that may precede LZMA2 in an .xz block, decoding direction: delta and the
// x86 and ARM64 branch converters (which turn absolute call targets back into relative ones).
#include "cxz.h"
#include <string.h>

void cxz_filter_init(cxz_filter *f, uint32_t kind, uint32_t start_or_distance) {
    memset(f, 0, sizeof *f);
    f->kind = kind;
    if (kind == CXZ_FILTER_DELTA) {
        f->delta_dist = start_or_distance;
    } else {
        f->pos = start_or_distance;
        // As if the last E8/E9 lay far behind the start.
        f->x86_prev = start_or_distance - 5;
    }
}

// Each byte is the sum of its coded value and the byte `dist` before it.
static size_t delta_run(cxz_filter *f, uint8_t *buf, size_t len) {
    const uint32_t dist = f->delta_dist;
    uint32_t index = f->delta_index;
    for (size_t i = 0; i < len; i++) {
        const uint8_t value = (uint8_t)(buf[i] + f->delta_ring[(index - dist) & 0xFF]);
        f->delta_ring[index & 0xFF] = value;
        buf[i] = value;
        index++;
    }
    f->delta_index = index & 0xFF;
    return len;
}

static inline int x86_is_extension_byte(uint8_t b) { return b == 0x00 || b == 0xFF; }

// x86: after an E8 (call) or E9 (jmp) opcode, a 32-bit operand whose top byte is 00 or FF
// was made absolute by the encoder. The mask of recent candidate opcodes suppresses
// conversions the encoder skipped, exactly as the encoder decided them.
static size_t x86_run(cxz_filter *f, uint8_t *buf, size_t len) {
    static const uint8_t allowed[8] = { 1, 1, 1, 0, 1, 0, 0, 0 };
    static const uint8_t byte_of_mask[8] = { 0, 1, 2, 2, 3, 3, 3, 3 };
    if (len < 5) return 0;
    uint32_t mask = f->x86_mask;
    uint32_t prev = f->x86_prev;
    const uint32_t start = f->pos;
    if (start - prev > 5) prev = start - 5;
    size_t i = 0;
    while (i + 5 <= len) {
        if (buf[i] != 0xE8 && buf[i] != 0xE9) { i++; continue; }
        const uint32_t here = start + (uint32_t)i;
        const uint32_t gap = here - prev;
        prev = here;
        if (gap > 5) mask = 0;
        else for (uint32_t k = 0; k < gap; k++) mask = (mask & 0x77) << 1;
        uint8_t top = buf[i + 4];
        if (x86_is_extension_byte(top) && allowed[(mask >> 1) & 7] && (mask >> 1) < 0x10) {
            uint32_t value = (uint32_t)top << 24 | (uint32_t)buf[i + 3] << 16 | (uint32_t)buf[i + 2] << 8 | buf[i + 1];
            uint32_t target;
            for (;;) {
                target = value - (here + 5);
                if (mask == 0) break;
                const uint32_t shift = 24 - byte_of_mask[(mask >> 1) & 7] * 8;
                if (!x86_is_extension_byte((uint8_t)(target >> shift))) break;
                value = target ^ (uint32_t)((1ull << (shift + 8)) - 1);
            }
            buf[i + 1] = (uint8_t)target;
            buf[i + 2] = (uint8_t)(target >> 8);
            buf[i + 3] = (uint8_t)(target >> 16);
            buf[i + 4] = (uint8_t)(0u - ((target >> 24) & 1));
            i += 5;
            mask = 0;
        } else {
            i++;
            mask |= 1;
            if (x86_is_extension_byte(top)) mask |= 0x10;
        }
    }
    f->x86_mask = mask;
    f->x86_prev = prev;
    f->pos = start + (uint32_t)i;
    return i;
}

static inline uint32_t load32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

// ARM64: BL's 26-bit word offset and ADRP's 21-bit page offset (when small enough that
// the encoder converted it) were made absolute; subtract the instruction's position back.
static size_t arm64_run(cxz_filter *f, uint8_t *buf, size_t len) {
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        const uint32_t pc = f->pos + (uint32_t)i;
        uint32_t insn = load32le(buf + i);
        if ((insn >> 26) == 0x25) {
            insn = 0x94000000u | ((insn - (pc >> 2)) & 0x03FFFFFFu);
            store32le(buf + i, insn);
        } else if ((insn & 0x9F000000u) == 0x90000000u) {
            const uint32_t page = ((insn >> 29) & 3) | ((insn >> 3) & 0x001FFFFCu);
            if (((page + 0x00020000u) & 0x001C0000u) != 0) continue;
            const uint32_t back = page - (pc >> 12);
            insn &= 0x9000001Fu;
            insn |= (back & 3) << 29;
            insn |= (back & 0x0003FFFCu) << 3;
            insn |= (0u - (back & 0x00020000u)) & 0x00E00000u;
            store32le(buf + i, insn);
        }
    }
    f->pos += (uint32_t)i;
    return i;
}

size_t cxz_filters_run(cxz_filter *filters, int count, uint8_t *buf, size_t len, int final) {
    for (int n = 0; n < count; n++) {
        cxz_filter *f = &filters[n];
        if (f->held_count) {
            memmove(buf + f->held_count, buf, len);
            memcpy(buf, f->held, f->held_count);
            len += f->held_count;
            f->held_count = 0;
        }
        size_t done;
        switch (f->kind) {
        case CXZ_FILTER_DELTA: done = delta_run(f, buf, len); break;
        case CXZ_FILTER_X86: done = x86_run(f, buf, len); break;
        case CXZ_FILTER_ARM64: done = arm64_run(f, buf, len); break;
        default: done = len; break;
        }
        if (final) {
            done = len;   // the unconvertible tail passes through unchanged
        } else if (len - done > sizeof f->held) {
            done = len - sizeof f->held;   // never: the converters stop within 4 bytes of the end
        }
        f->held_count = (uint32_t)(len - done);
        memcpy(f->held, buf + done, f->held_count);
        len = done;
    }
    return len;
}
