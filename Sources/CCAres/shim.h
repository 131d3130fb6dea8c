#ifndef SIWA_CCARES_SHIM_H
#define SIWA_CCARES_SHIM_H
// c-ares: host names resolved with a deadline (glibc's getaddrinfo has none a blocking
// caller can use). Debian's libc-ares-dev; no pkgConfig needed.
#include <ares.h>
#endif
