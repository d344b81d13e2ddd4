/*
 * Embedding portcullis from C: start a proxy that allows one origin, relay
 * one real HTTP request through it, read the counters, replace the policy
 * (the same request is then refused), watch the session events, shut down.
 *
 *   cargo rustc --release --lib --crate-type staticlib
 *   cc -I include examples/c/embed.c target/release/libportcullis.a \
 *      -lpthread -ldl -lm -o embed
 *   ./embed 127.0.0.1:8080      # an HTTP server to reach
 *
 * Exit status 0 when every step behaved as expected.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "portcullis.h"

static atomic_int sessions;

/* Runs on the proxy's `portcullis-evt` thread; `event_json` is ours only
 * for the call. */
static void on_event(void *user_data, const char *event_json) {
    (void)user_data;
    if (strstr(event_json, "\"event\":\"session\""))
        atomic_fetch_add(&sessions, 1);
    printf("event: %s\n", event_json);
    fflush(stdout);
}

static int fail(const char *what) {
    const char *why = portcullis_last_error();
    fprintf(stderr, "%s failed: %s\n", what, why ? why : "(no message)");
    return 1;
}

/* Sends `GET http://ORIGIN/hello` to the proxy at `proxy_addr` (IPv4
 * "a.b.c.d:port") and returns the status code, or -1. */
static int get_through(const char *proxy_addr, const char *origin) {
    char host[64];
    const char *colon = strrchr(proxy_addr, ':');
    if (!colon || (size_t)(colon - proxy_addr) >= sizeof host)
        return -1;
    memcpy(host, proxy_addr, colon - proxy_addr);
    host[colon - proxy_addr] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("connect to the proxy");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req,
                     "GET http://%s/hello HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     origin, origin);
    if (write(fd, req, n) != n) {
        close(fd);
        return -1;
    }
    char resp[4096];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof resp - 1 && (r = read(fd, resp + got, sizeof resp - 1 - got)) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    close(fd);
    char *eol = strstr(resp, "\r\n");
    char *body = strstr(resp, "\r\n\r\n");
    if (eol)
        printf("response: %.*s | body: %s\n", (int)(eol - resp), resp, body ? body + 4 : "");
    int status = -1;
    if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    return status;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s HOST:PORT   (an HTTP origin to reach)\n", argv[0]);
        return 2;
    }
    const char *origin = argv[1];
    printf("portcullis %s\n", portcullis_version());

    /* Loopback is refused unless a rule names it: allow exactly the origin. */
    const char *allow[] = {origin};
    PortcullisProxy *proxy = NULL;
    if (portcullis_start("127.0.0.1:0", allow, 1, NULL, 0, &proxy) != PORTCULLIS_STATUS_OK)
        return fail("portcullis_start");
    if (portcullis_subscribe(proxy, on_event, NULL) != PORTCULLIS_STATUS_OK)
        return fail("portcullis_subscribe");

    char *addr = NULL;
    if (portcullis_local_addr(proxy, 0, &addr) != PORTCULLIS_STATUS_OK)
        return fail("portcullis_local_addr");
    printf("proxy on %s\n", addr);

    int first = get_through(addr, origin);

    char *stats = NULL;
    if (portcullis_stats_json(proxy, &stats) != PORTCULLIS_STATUS_OK)
        return fail("portcullis_stats_json");
    printf("stats: %s\n", stats);
    portcullis_string_free(stats);

    /* A bad policy is refused with a message; the old one stays. */
    if (portcullis_replace_policy(proxy, "[[rules]]\nactoin = \"allow\"\n") == PORTCULLIS_STATUS_CONFIG)
        printf("bad policy refused: %s\n", portcullis_last_error());
    /* A policy that allows something else: the origin is refused now. */
    const char *policy = "[[rules]]\nname = \"example-only\"\naction = \"allow\"\n"
                         "hosts = [\"example.com\"]\nports = [443]\n";
    if (portcullis_replace_policy(proxy, policy) != PORTCULLIS_STATUS_OK)
        return fail("portcullis_replace_policy");
    int second = get_through(addr, origin);
    portcullis_string_free(addr);

    /* Stopping delivers the events still queued before it returns. */
    if (portcullis_stop(proxy, 0) != PORTCULLIS_STATUS_OK)
        return fail("portcullis_stop");
    portcullis_free(proxy);

    printf("first=%d second=%d sessions=%d\n", first, second, atomic_load(&sessions));
    return first == 200 && second == 403 && atomic_load(&sessions) == 2 ? 0 : 1;
}
