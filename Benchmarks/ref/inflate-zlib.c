/* Single-thread zlib inflate of a gzip file (every member) to stdout, 256 KiB buffers.
   zlib checks CRC-32 and ISIZE of each member.
   The reference for (g) --engine zlib: row e-zlib in Benchmarks/commands.tsv.
   link: -lz */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define BUF_SIZE (256u * 1024u)

static void write_all(const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, p, n);
        if (w < 0) { if (errno == EINTR) continue; perror("inflate-zlib: write"); exit(1); }
        p += w; n -= (size_t)w;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE.gz > OUT\n", argv[0]); return 2; }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror(argv[1]); return 1; }
    unsigned char *in = malloc(BUF_SIZE), *out = malloc(BUF_SIZE);
    if (in == NULL || out == NULL) { fputs("inflate-zlib: out of memory\n", stderr); return 1; }
    z_stream s;
    memset(&s, 0, sizeof s);
    if (inflateInit2(&s, 15 + 16) != Z_OK) { fputs("inflate-zlib: inflateInit2 failed\n", stderr); return 1; }
    int ended = 0;
    for (;;) {
        ssize_t n = read(fd, in, BUF_SIZE);
        if (n < 0) { if (errno == EINTR) continue; perror("inflate-zlib: read"); return 1; }
        if (n == 0) break;
        s.next_in = in;
        s.avail_in = (uInt)n;
        do {
            if (ended) {                       /* next gzip member */
                if (s.avail_in == 0) break;
                if (inflateReset(&s) != Z_OK) { fputs("inflate-zlib: inflateReset failed\n", stderr); return 1; }
                ended = 0;
            }
            s.next_out = out;
            s.avail_out = BUF_SIZE;
            int ret = inflate(&s, Z_NO_FLUSH);
            if (ret == Z_STREAM_END) ended = 1;
            else if (ret != Z_OK && ret != Z_BUF_ERROR) {
                fprintf(stderr, "inflate-zlib: %s\n", s.msg ? s.msg : "inflate error");
                return 1;
            }
            write_all(out, BUF_SIZE - s.avail_out);
        } while (s.avail_in > 0 || s.avail_out == 0);
    }
    if (!ended) { fputs("inflate-zlib: truncated gzip input\n", stderr); return 1; }
    inflateEnd(&s);
    return 0;
}
