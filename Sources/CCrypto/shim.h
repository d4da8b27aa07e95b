// The low-level SHA256_* API is deprecated in OpenSSL 3 but is the only one whose
// midstate (SHA256_CTX) can be read and restored; it still uses the CPU's SHA extensions.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/sha.h>
#include <openssl/opensslv.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/evp.h>
// getrandom(2), for the checkpoint key; Glibc's Swift overlay does not export it.
#include <sys/random.h>
