#ifndef SIWA_COPENSSL_HELPERS_H
#define SIWA_COPENSSL_HELPERS_H

// Declarations only: the logic is in siwa_openssl.c. Helpers live in C where OpenSSL
// keeps pointers past the call (OSSL_PARAM_BLD keeps parameter names) or where the API
// is a macro or variadic; every other OpenSSL call is made from Swift (SIWACrypto).

#define OPENSSL_NO_DEPRECATED 1

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <stddef.h>

/// An RSA public key from big-endian modulus and exponent bytes; NULL on failure.
EVP_PKEY *siwa_rsa_public_key_from_components(const unsigned char *modulus, size_t modulus_length,
                                               const unsigned char *exponent, size_t exponent_length);

/// A new RSA key pair of `bits` bits with exponent 65537; NULL on failure.
EVP_PKEY *siwa_rsa_generate(unsigned int bits);

/// 1 when `key` is an RSA key.
int siwa_pkey_is_rsa(const EVP_PKEY *key);

/// Writes the big-endian bytes of an RSA key's modulus ("n") or exponent ("e")
/// into `out` (capacity `capacity`); returns the length, or -1.
int siwa_rsa_component(const EVP_PKEY *key, int want_modulus, unsigned char *out, size_t capacity);

/// A verification context for RS256 with `key`, initialised once; NULL on failure.
EVP_MD_CTX *siwa_rs256_verifier_new(EVP_PKEY *key);

void siwa_rs256_verifier_free(EVP_MD_CTX *verifier);

/// RSASSA-PKCS1-v1_5 with SHA-256 on a copy of `verifier` (only read: threads may share
/// it): 1 valid, 0 invalid, negative on error.
int siwa_rs256_verify_with(const EVP_MD_CTX *verifier, const unsigned char *message, size_t message_length,
                           const unsigned char *signature, size_t signature_length);

/// RSASSA-PKCS1-v1_5 with SHA-256 signing; returns the signature length or -1.
int siwa_rs256_sign(EVP_PKEY *key, const unsigned char *message, size_t message_length, unsigned char *signature,
                    size_t capacity);

/// HMAC-SHA256 into `out` (32 bytes); returns 1 on success.
int siwa_hmac_sha256(const unsigned char *key, size_t key_length, const unsigned char *message,
                     size_t message_length, unsigned char *out);

/// PEM (PKCS#8) text of a private key in a malloc'd buffer the caller frees; NULL on failure.
char *siwa_private_key_pem(EVP_PKEY *key, size_t *length);

/// A private key from PEM text; NULL on failure.
EVP_PKEY *siwa_private_key_from_pem(const char *pem, size_t length);

/// One-line pass-throughs for OpenSSL macros Swift cannot call (SIWATLS).
/// SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION): 1 on success.
int siwa_ssl_ctx_require_tls12(SSL_CTX *context);

/// SSL_set_tlsext_host_name (SNI): 1 on success.
int siwa_ssl_set_server_name_indication(SSL *ssl, const char *name);

#endif
