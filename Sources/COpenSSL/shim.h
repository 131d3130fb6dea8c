#ifndef SIWA_COPENSSL_SHIM_H
#define SIWA_COPENSSL_SHIM_H

// Keep the code on the EVP API and deprecation warnings out of the build.
#define OPENSSL_NO_DEPRECATED 1

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <string.h>

// Pass-through only: the OpenSSL headers the Swift wrappers (SIWACrypto, SIWATLS) call into. The
// few helpers written in C are declared in COpenSSLShim/include/siwa_openssl.h.

#endif
