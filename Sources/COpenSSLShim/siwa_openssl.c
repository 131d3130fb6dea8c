// One-line pass-throughs for the OpenSSL macros Swift cannot call, declared in
// include/siwa_openssl.h. Every other OpenSSL call is made from Swift.
#include "siwa_openssl.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

const int siwa_evp_pkey_public_key = EVP_PKEY_PUBLIC_KEY;

long siwa_bio_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }

int siwa_ssl_ctx_require_tls12(SSL_CTX *context) { return (int)SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION); }

int siwa_ssl_set_server_name_indication(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
