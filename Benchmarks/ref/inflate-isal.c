/* Single-thread ISA-L inflate (isal_inflate, gzip wrapper: CRC-32 and ISIZE checked) of a
   gzip file (every member) to stdout, 256 KiB buffers.
   The limit of the gunzip stage: row e-isal in Benchmarks/commands.tsv.
   link: -lisal */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <isa-l/igzip_lib.h>

#define BUF_SIZE (256u * 1024u)

static void write_all(const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, p, n);
        if (w < 0) { if (errno == EINTR) continue; perror("inflate-isal: write"); exit(1); }
        p += w; n -= (size_t)w;
    }
}

static struct inflate_state st;   /* ~87 KB: static, not on the stack */

static void step(unsigned char *out) {
    st.next_out = out;
    st.avail_out = BUF_SIZE;
    int ret = isal_inflate(&st);
    if (ret < 0 || ret == ISAL_NEED_DICT) {
        fprintf(stderr, "inflate-isal: isal_inflate failed (%d)\n", ret);
        exit(1);
    }
    write_all(out, BUF_SIZE - st.avail_out);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE.gz > OUT\n", argv[0]); return 2; }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror(argv[1]); return 1; }
    unsigned char *in = malloc(BUF_SIZE), *out = malloc(BUF_SIZE);
    if (in == NULL || out == NULL) { fputs("inflate-isal: out of memory\n", stderr); return 1; }
    isal_inflate_init(&st);
    st.crc_flag = ISAL_GZIP;
    for (;;) {
        ssize_t n = read(fd, in, BUF_SIZE);
        if (n < 0) { if (errno == EINTR) continue; perror("inflate-isal: read"); return 1; }
        if (n == 0) break;
        st.next_in = in;
        st.avail_in = (uint32_t)n;
        do {
            if (st.block_state == ISAL_BLOCK_FINISH) {   /* next gzip member */
                if (st.avail_in == 0) break;
                uint8_t *next_in = st.next_in;
                uint32_t avail_in = st.avail_in;
                isal_inflate_reset(&st);
                st.crc_flag = ISAL_GZIP;
                st.next_in = next_in;
                st.avail_in = avail_in;
            }
            step(out);
        } while (st.avail_in > 0 || st.avail_out == 0);
    }
    for (int i = 0; i < 4 && st.block_state != ISAL_BLOCK_FINISH; i++) step(out);   /* drain */
    if (st.block_state != ISAL_BLOCK_FINISH) { fputs("inflate-isal: truncated gzip input\n", stderr); return 1; }
    return 0;
}
