/*
 * test_http_shutdown.c - http_server_stop() while the polling threads are
 * busy must not abort.
 *
 * The race (seen once as `status 134` from test_server_api's
 * sigterm_busy_exit_0): libmicrohttpd 0.9.75's MHD_quiesce_daemon() with a
 * thread pool under epoll deletes the listen socket from each worker's epoll
 * set while that worker, awake, may be deleting it itself; the loser gets
 * ENOENT and MHD_PANIC()s (abort). Here client threads connect as fast as
 * they can (every connect wakes the workers) and the server is stopped a few
 * milliseconds in, many times over. With epoll this died within a few hundred
 * rounds (about a second); the loop is bounded by rounds and by time.
 */
/* checks: 1 */
/* tags: tsan */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "server/http.h"

static atomic_bool stop_clients;
static atomic_int num_answers;

static void handle(void *ud, http_request *r) {
    (void)ud;
    http_respond(r, 200, "text/plain", "ok", 2);
}

/* Connects, asks, reads, closes; until told to stop. */
static void *client_main(void *arg) {
    int port = *(int *)arg;
    while (!atomic_load(&stop_clients)) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) continue;
        struct timeval tv = {0, 20000}; /* the listen socket may be quiesced: no wait on it */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
            char buf[256];
            if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1) && read(fd, buf, sizeof buf) > 0)
                atomic_fetch_add(&num_answers, 1);
        }
        close(fd);
    }
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

TEST(test_stop_while_busy) {
    http_server_config cfg = {.host = "127.0.0.1", .port = 0, .max_body_bytes = 1 << 16,
                              .num_threads = 2, .handler = handle};
    double t0 = now_s();
    int rounds = 0;
    srand(1);
    for (; rounds < 600 && now_s() - t0 < 3.0; rounds++) {
        http_server *s = NULL;
        CHECK(http_server_start(&cfg, &s) == VLLM_OK);
        int port = http_server_port(s);
        atomic_store(&stop_clients, false);
        pthread_t t[2];
        for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, client_main, &port) == 0);
        usleep(500 + (useconds_t)(rand() % 2500));
        http_server_stop(s, 1.0); /* aborted here when the race was lost */
        atomic_store(&stop_clients, true);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    }
    CHECK(rounds >= 50, "only %d rounds", rounds);
    CHECK(atomic_load(&num_answers) > 0, "the clients never got an answer: the test tests nothing");
}

int main(void) {
    RUN(test_stop_while_busy);
    return harness_done();
}
