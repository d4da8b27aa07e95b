#!/usr/bin/env python3
"""Regenerates the fixtures and SHA256SUMS. Deterministic: same bytes every run."""
import hashlib, io, random, struct, tarfile, zlib

random.seed(2026)

def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1767225600, 0o644
    info.uname = info.gname = "sluice"
    tar.addfile(info, io.BytesIO(data))

buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    add(tar, "sample/README.txt", b"Sluice sample data: a small tarball for the quick start.\n" * 200)
    add(tar, "sample/records.csv", "".join(f"{i},{random.randint(0,10**6)},{'abcdefgh'[i%8]*3}\n" for i in range(20000)).encode())
    add(tar, "sample/noise.bin", bytes(random.getrandbits(8) for _ in range(40000)))
tar_bytes = buf.getvalue()

def member(data, level=6, name=None, comment=None, extra=None, hcrc=False):
    """One gzip member with exactly the header fields asked for (RFC 1952)."""
    flags = (2 if hcrc else 0) | (4 if extra is not None else 0) | (8 if name else 0) | (16 if comment else 0)
    h = bytearray([0x1f, 0x8b, 8, flags, 0, 0, 0, 0, 0, 3])
    if extra is not None: h += struct.pack("<H", len(extra)) + extra
    if name: h += name.encode() + b"\0"
    if comment: h += comment.encode() + b"\0"
    if hcrc: h += struct.pack("<H", zlib.crc32(h) & 0xffff)
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    return bytes(h) + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xffffffff)

files = {
    "sample.tar.gz": (member(tar_bytes, 6, name="sample.tar"), tar_bytes),
    "multi-member.gz": (member(tar_bytes[:30000]) + member(b"") + member(tar_bytes[30000:], 9), tar_bytes),
    "header-fields.gz": (member(tar_bytes[:50000], 6, name="fields.bin", comment="FEXTRA, FNAME, FCOMMENT and FHCRC all set",
                                extra=b"SL\x04\x00abcd", hcrc=True), tar_bytes[:50000]),
    "stored-blocks.gz": (member(tar_bytes[:100000], 0), tar_bytes[:100000]),
}
with open("SHA256SUMS", "w") as sums:
    sums.write("# sha256 of each fixture, then of its decompressed content (name.out)\n")
    for name, (gz, plain) in files.items():
        open(name, "wb").write(gz)
        sums.write(f"{hashlib.sha256(gz).hexdigest()}  {name}\n")
        sums.write(f"{hashlib.sha256(plain).hexdigest()}  {name}.out\n")
