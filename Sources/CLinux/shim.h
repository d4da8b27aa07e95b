// Linux calls glibc has no wrapper for (openat2) or that Swift cannot reach (variadic syscall).
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <errno.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <stdint.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#define SLUICE_RESOLVE_NO_MAGICLINKS 0x02
#define SLUICE_RESOLVE_NO_SYMLINKS 0x04
#define SLUICE_RESOLVE_BENEATH 0x08

struct sluice_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

// openat2(2): returns the fd, or -1 with errno set (ENOSYS on kernels before 5.6).
static inline int sluice_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve) {
    struct sluice_open_how how = { flags, mode, resolve };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

static inline int sluice_syncfs(int fd) {
    return syncfs(fd);
}

#include <sys/stat.h>
// UTIME_OMIT is a macro built from an expression Swift does not import.
static const long SLUICE_UTIME_OMIT = UTIME_OMIT;

#include <pthread.h>
// pthread_setname_np is a GNU extension the Glibc module does not show: names the calling
// thread (at most 15 bytes; a longer name is refused with ERANGE).
static inline int sluice_name_this_thread(const char *name) {
    return pthread_setname_np(pthread_self(), name);
}

#include <string.h>
// memmem (a GNU extension, hidden from the Glibc module): a linear-time substring search.
static inline void *sluice_memmem(const void *haystack, size_t haystackLength, const void *needle, size_t needleLength) {
    return memmem(haystack, haystackLength, needle, needleLength);
}

// O_TMPFILE is built from other macros Swift does not import: an unnamed file in a directory.
static const int SLUICE_O_TMPFILE = O_TMPFILE;

// copy_file_range(2) from `in` at *inOffset (advanced) to `out` at its file position: the
// kernel copies, no buffer in the process. Returns bytes copied, or -1 with errno set.
static inline long sluice_copy_file_range(int in, int64_t *inOffset, int out, size_t length) {
    __off64_t offset = *inOffset;
    ssize_t n = copy_file_range(in, &offset, out, NULL, length, 0);
    *inOffset = offset;
    return n;
}

// Frees the blocks of [offset, offset + length) of `fd` and keeps its size: the range reads
// as zeros afterwards. Returns 0, or -1 with errno set (EOPNOTSUPP where the filesystem cannot).
static inline int sluice_punch_hole(int fd, int64_t offset, int64_t length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}
