#ifndef SIWA_COPENSSL_HELPERS_H
#define SIWA_COPENSSL_HELPERS_H

// Declarations only, of one-line pass-throughs (siwa_openssl.c) for what Swift cannot
// call: OpenSSL macros and composite macro constants. Every other OpenSSL call is made
// from Swift (SIWACrypto, SIWATLS).

#define OPENSSL_NO_DEPRECATED 1

#include <openssl/bio.h>
#include <openssl/ssl.h>

/// EVP_PKEY_PUBLIC_KEY, the selection for EVP_PKEY_fromdata (a composite macro).
extern const int siwa_evp_pkey_public_key;

/// BIO_get_mem_data(bio, data): the length of a memory BIO's contents, *data pointing at them.
long siwa_bio_get_mem_data(BIO *bio, char **data);

/// SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION): 1 on success.
int siwa_ssl_ctx_require_tls12(SSL_CTX *context);

/// SSL_set_tlsext_host_name (SNI): 1 on success.
int siwa_ssl_set_server_name_indication(SSL *ssl, const char *name);

#endif
