#define _GNU_SOURCE
#include <stddef.h>
#include <sys/socket.h>
#include "siwa_socket.h"

int siwa_accept4(int fd, int flags) { return accept4(fd, NULL, NULL, flags); }
