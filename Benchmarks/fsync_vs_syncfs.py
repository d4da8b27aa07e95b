# Per-file fsync (what makeDurable would do for the files since the last cut) against one
# syncfs, for N small files written like an extraction.
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
base, n = sys.argv[1], int(sys.argv[2])
def write_files(tag):
    d = os.path.join(base, tag); os.makedirs(d)
    for i in range(n):
        with open(os.path.join(d, "f%d" % i), "wb") as f: f.write(b"x" * 6000)
    return d
os.sync()
d = write_files("fsync")
t = time.time()
for i in range(n):
    fd = os.open(os.path.join(d, "f%d" % i), os.O_RDONLY); os.fsync(fd); os.close(fd)
fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
per_file = time.time() - t
os.sync()
d = write_files("syncfs")
t = time.time()
fd = os.open(d, os.O_RDONLY); libc.syncfs(fd); os.close(fd)
one = time.time() - t
print("%d files of 6000 B: fsync each %.3f s, one syncfs %.3f s" % (n, per_file, one))
