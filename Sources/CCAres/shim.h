#ifndef SIWA_CCARES_SHIM_H
#define SIWA_CCARES_SHIM_H
// c-ares: host names resolved with a deadline (glibc's getaddrinfo has none a blocking
// caller can use). Debian's libc-ares-dev; no pkgConfig needed.
#include <ares.h>

// ARES_SUCCESS is a macro of type int in c-ares 1.18 (Debian 12) and a member of the enum
// ares_status_t in 1.34 (Debian 13), while the calls return int in both: one int constant
// that Swift compares the same way with either.
static const int CCAres_success = ARES_SUCCESS;
#endif
