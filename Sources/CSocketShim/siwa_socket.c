#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include "siwa_socket.h"

int siwa_accept4(int fd, int flags) { return accept4(fd, NULL, NULL, flags); }

int siwa_name_this_thread(const char *name) {
    char kept[16];
    strncpy(kept, name, sizeof kept - 1);
    kept[sizeof kept - 1] = 0;
    return pthread_setname_np(pthread_self(), kept);
}

int siwa_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int siwa_epoll_add(int epoll, int fd, unsigned long long token, int one_shot) {
    struct epoll_event event = {.events = EPOLLIN | (one_shot ? EPOLLONESHOT : 0), .data.u64 = token};
    return epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}

int siwa_epoll_rearm(int epoll, int fd, unsigned long long token) {
    struct epoll_event event = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = token};
    return epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event);
}

int siwa_epoll_wait_one(int epoll, int timeout_milliseconds, unsigned long long *token) {
    struct epoll_event event;
    int count = epoll_wait(epoll, &event, 1, timeout_milliseconds);
    if (count == 1) *token = event.data.u64;
    return count;
}
