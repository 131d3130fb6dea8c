#ifndef SIWA_SOCKET_H
#define SIWA_SOCKET_H

// One-line pass-throughs to what Glibc's Swift module does not declare: accept4(2) and
// pthread_setname_np(3) (only under _GNU_SOURCE) and epoll(7) (not in the module). No system header is included here:
// one included from this module would hide its names from Swift files that import Glibc
// alone.

/// accept4(2) without the peer's address: the accepted socket gets `flags`
/// (SOCK_NONBLOCK, SOCK_CLOEXEC) in the same call.
int siwa_accept4(int fd, int flags);

/// pthread_setname_np(pthread_self(), name) (under _GNU_SOURCE only): the name `top -H`,
/// `ps -L` and perf show for the calling thread; at most 15 bytes are kept.
int siwa_name_this_thread(const char *name);

/// epoll_create1(EPOLL_CLOEXEC).
int siwa_epoll_create(void);

/// epoll_ctl(ADD) of `fd` for reading, `token` its event's data; one-shot (disarmed once
/// reported, until `siwa_epoll_rearm`) when `one_shot` is non-zero.
int siwa_epoll_add(int epoll, int fd, unsigned long long token, int one_shot);

/// epoll_ctl(MOD): `fd`, added one-shot, reported once more.
int siwa_epoll_rearm(int epoll, int fd, unsigned long long token);

/// epoll_wait(2) for one event: 1 with its token in `token`, 0 at the timeout, -1 on error.
int siwa_epoll_wait_one(int epoll, int timeout_milliseconds, unsigned long long *token);

#endif
