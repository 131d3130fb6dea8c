#ifndef SIWA_SOCKET_H
#define SIWA_SOCKET_H

/// accept4(2) without the peer's address, which Glibc declares only under _GNU_SOURCE:
/// the accepted socket gets `flags` (SOCK_NONBLOCK, SOCK_CLOEXEC) in the same call.
/// (No system header here: one included from this module would hide its names from
/// Swift files that import Glibc alone.)
int siwa_accept4(int fd, int flags);

#endif
