// The OpenSSL helpers declared in include/siwa_openssl.h.
#include "siwa_openssl.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/// An RSA public key from big-endian modulus and exponent bytes; NULL on failure.
EVP_PKEY *siwa_rsa_public_key_from_components(
    const unsigned char *modulus, size_t modulus_length,
    const unsigned char *exponent, size_t exponent_length) {
    EVP_PKEY *key = NULL;
    BIGNUM *n = BN_bin2bn(modulus, (int)modulus_length, NULL);
    BIGNUM *e = BN_bin2bn(exponent, (int)exponent_length, NULL);
    OSSL_PARAM_BLD *builder = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *context = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    if (n == NULL || e == NULL || builder == NULL || context == NULL) goto done;
    if (!OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_N, n)) goto done;
    if (!OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_E, e)) goto done;
    params = OSSL_PARAM_BLD_to_param(builder);
    if (params == NULL) goto done;
    if (EVP_PKEY_fromdata_init(context) <= 0) goto done;
    if (EVP_PKEY_fromdata(context, &key, EVP_PKEY_PUBLIC_KEY, params) <= 0) key = NULL;
done:
    EVP_PKEY_CTX_free(context);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(builder);
    BN_free(n);
    BN_free(e);
    // Failures leave entries on this thread's error queue, which libcurl shares.
    ERR_clear_error();
    return key;
}

/// A new RSA key pair of `bits` bits with exponent 65537; NULL on failure.
EVP_PKEY *siwa_rsa_generate(unsigned int bits) {
    EVP_PKEY *key = NULL;
    EVP_PKEY_CTX *context = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    if (context == NULL) return NULL;
    if (EVP_PKEY_keygen_init(context) <= 0 || EVP_PKEY_CTX_set_rsa_keygen_bits(context, (int)bits) <= 0 ||
        EVP_PKEY_generate(context, &key) <= 0) {
        key = NULL;
    }
    EVP_PKEY_CTX_free(context);
    ERR_clear_error();
    return key;
}

/// 1 when `key` is an RSA key.
int siwa_pkey_is_rsa(const EVP_PKEY *key) { return EVP_PKEY_is_a(key, "RSA"); }

/// Writes the big-endian bytes of an RSA key's modulus ("n") or exponent ("e")
/// into `out` (capacity `capacity`); returns the length, or -1.
int siwa_rsa_component(const EVP_PKEY *key, int want_modulus, unsigned char *out, size_t capacity) {
    BIGNUM *value = NULL;
    const char *name = want_modulus ? OSSL_PKEY_PARAM_RSA_N : OSSL_PKEY_PARAM_RSA_E;
    if (!EVP_PKEY_get_bn_param(key, name, &value)) {
        ERR_clear_error();
        return -1;
    }
    int length = BN_num_bytes(value);
    if (length < 0 || (size_t)length > capacity) {
        BN_free(value);
        return -1;
    }
    int written = BN_bn2bin(value, out);
    BN_free(value);
    return written;
}

/// A verification context for RS256 with `key`, initialised once (the SHA-256 and RSA
/// implementations fetched, PKCS#1 v1.5 padding set); NULL on failure. Free it with
/// siwa_rs256_verifier_free.
EVP_MD_CTX *siwa_rs256_verifier_new(EVP_PKEY *key) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context == NULL) return NULL;
    EVP_PKEY_CTX *key_context = NULL;
    if (EVP_DigestVerifyInit_ex(context, &key_context, "SHA256", NULL, NULL, key, NULL) != 1 ||
        EVP_PKEY_CTX_set_rsa_padding(key_context, RSA_PKCS1_PADDING) != 1) {
        EVP_MD_CTX_free(context);
        context = NULL;
    }
    ERR_clear_error();
    return context;
}

void siwa_rs256_verifier_free(EVP_MD_CTX *verifier) { EVP_MD_CTX_free(verifier); }

/// RSASSA-PKCS1-v1_5 with SHA-256 on a copy of `verifier` (which is only read, so threads
/// may share it): 1 valid, 0 invalid, negative on error. The copy skips the algorithm
/// look-ups an initialisation makes.
int siwa_rs256_verify_with(const EVP_MD_CTX *verifier, const unsigned char *message, size_t message_length,
                           const unsigned char *signature, size_t signature_length) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context == NULL) return -1;
    int result = -1;
    if (EVP_MD_CTX_copy_ex(context, verifier) == 1) {
        result = EVP_DigestVerify(context, signature, signature_length, message, message_length);
    }
    EVP_MD_CTX_free(context);
    ERR_clear_error();
    return result == 1 ? 1 : (result == 0 ? 0 : result);
}

/// RSASSA-PKCS1-v1_5 with SHA-256 signing; returns the signature length or -1.
int siwa_rs256_sign(EVP_PKEY *key, const unsigned char *message, size_t message_length,
                                  unsigned char *signature, size_t capacity) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context == NULL) return -1;
    EVP_PKEY_CTX *key_context = NULL;
    size_t length = capacity;
    int ok = EVP_DigestSignInit_ex(context, &key_context, "SHA256", NULL, NULL, key, NULL) == 1 &&
             EVP_PKEY_CTX_set_rsa_padding(key_context, RSA_PKCS1_PADDING) == 1 &&
             EVP_DigestSign(context, signature, &length, message, message_length) == 1;
    EVP_MD_CTX_free(context);
    ERR_clear_error();
    return ok ? (int)length : -1;
}

/// HMAC-SHA256 into `out` (32 bytes); returns 1 on success.
int siwa_hmac_sha256(const unsigned char *key, size_t key_length, const unsigned char *message,
                                   size_t message_length, unsigned char *out) {
    unsigned int length = 32;
    return HMAC(EVP_sha256(), key, (int)key_length, message, message_length, out, &length) != NULL;
}

/// PEM (PKCS#8) text of a private key in a malloc'd buffer the caller frees; NULL on failure.
char *siwa_private_key_pem(EVP_PKEY *key, size_t *length) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    char *copy = NULL;
    if (PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) == 1) {
        char *data = NULL;
        long size = BIO_get_mem_data(bio, &data);
        if (size > 0 && (copy = (char *)malloc((size_t)size)) != NULL) {
            memcpy(copy, data, (size_t)size);
            *length = (size_t)size;
        }
    }
    BIO_free(bio);
    return copy;
}

/// A private key from PEM text; NULL on failure.
EVP_PKEY *siwa_private_key_from_pem(const char *pem, size_t length) {
    BIO *bio = BIO_new_mem_buf(pem, (int)length);
    if (bio == NULL) return NULL;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    BIO_free(bio);
    ERR_clear_error();
    return key;
}

int siwa_ssl_ctx_require_tls12(SSL_CTX *context) { return (int)SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION); }

int siwa_ssl_set_server_name_indication(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
