/*
 * The architecture's ceiling for scripts/bench-e2e: a libfcgi responder that does
 * nothing. Same threading as siwa-endpoint serve (N threads, each looping
 * FCGX_Accept_r / FCGX_Finish_r on its own request), reads the whole body, and
 * answers every request 200 with a fixed JSON body. No verification, no Redis,
 * no log line: what nginx, TLS and FastCGI cost on their own.
 *
 *   empty-responder SOCKET_PATH THREADS
 */
#include <fcgiapp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int listen_fd;

static const char response[] =
    "Status: 200 OK\r\n"
    "Content-Type: application/json\r\n"
    "Cache-Control: no-store\r\n"
    "Content-Length: 20\r\n"
    "\r\n"
    "{\"status\":\"applied\"}";

static void *serve(void *unused) {
    (void)unused;
    FCGX_Request request;
    char body[16384];
    if (FCGX_InitRequest(&request, listen_fd, 0) != 0) return NULL;
    while (FCGX_Accept_r(&request) >= 0) {
        while (FCGX_GetStr(body, sizeof body, request.in) > 0) {
        }
        FCGX_PutStr(response, sizeof response - 1, request.out);
        FCGX_Finish_r(&request);
    }
    return NULL;
}

/* Before FCGX_Init, which installs its own SIGTERM handler only where none is set:
 * a plain SIGTERM stops the benchmark's ceiling at once. */
static void stop(int signal_number) {
    (void)signal_number;
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: empty-responder SOCKET_PATH THREADS\n");
        return 2;
    }
    int threads = atoi(argv[2]);
    if (threads < 1 || threads > 256) return 2;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, stop);
    if (FCGX_Init() != 0) return 1;
    listen_fd = FCGX_OpenSocket(argv[1], 1024);
    if (listen_fd < 0) return 1;
    chmod(argv[1], 0660);
    pthread_t ids[256];
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, serve, NULL);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
