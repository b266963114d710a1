#ifndef ROOST_CCRYPTO_SHIM_H
#define ROOST_CCRYPTO_SHIM_H
#include <openssl/sha.h>
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#endif
