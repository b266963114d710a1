#ifndef ROOST_CCRYPTO_SHIM_H
#define ROOST_CCRYPTO_SHIM_H
#include <openssl/sha.h>
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
/* SHA-256 with its state on the caller's stack: no allocation (issue 25).
   The low-level calls are deprecated in OpenSSL 3 in favour of EVP, whose
   init allocates the provider's state each time; they still compute in place. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline int roost_sha256(const void *data, size_t count, unsigned char out[32]) {
    SHA256_CTX state;
    return SHA256_Init(&state) == 1 && SHA256_Update(&state, data, count) == 1 && SHA256_Final(out, &state) == 1;
}
#pragma GCC diagnostic pop
#endif
