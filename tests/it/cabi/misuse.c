/*
 * The C ABI's edges, driven from C (tests/it/cabi.rs builds this against
 * libportcullis.a under AddressSanitizer): bad arguments come back as
 * statuses with messages, never as crashes; ownership as the header says
 * (LeakSanitizer fails the run if a string or a proxy is leaked); the event
 * callback runs on `portcullis-evt` and may call back into the API.
 *
 * Prints one `ok NAME` line per check; exits 1 at the first failure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "portcullis.h"

static int failures;

static void check(int cond, const char *name, PortcullisStatus got) {
    const char *why = portcullis_last_error();
    if (cond) {
        printf("ok %s: %s\n", name, why ? why : "-");
    } else {
        printf("FAIL %s: status %d: %s\n", name, (int)got, why ? why : "(no message)");
        failures++;
    }
}

/* The call returned `want`, with a message containing `needle` (or, for
 * NULL, no message at all). */
static void expect(const char *name, PortcullisStatus got, PortcullisStatus want, const char *needle) {
    const char *why = portcullis_last_error();
    int message_ok = needle == NULL ? why == NULL : (why != NULL && strstr(why, needle) != NULL);
    check(got == want && message_ok, name, got);
}

#define EXPECT(name, call, want, needle) expect(name, (call), want, needle)

struct seen {
    atomic_int events;
    atomic_int on_events_thread;
    atomic_int stats_ok;
    PortcullisProxy *proxy;
};

static void on_event(void *user_data, const char *event_json) {
    struct seen *seen = user_data;
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (strcmp(name, "portcullis-evt") == 0)
        atomic_fetch_add(&seen->on_events_thread, 1);
    /* Calling back into the proxy from the callback works (no lock held). */
    char *stats = NULL;
    if (portcullis_stats_json(seen->proxy, &stats) == PORTCULLIS_STATUS_OK && strstr(stats, "\"accepted\""))
        atomic_fetch_add(&seen->stats_ok, 1);
    portcullis_string_free(stats);
    if (strstr(event_json, "\"event\":\"session\""))
        atomic_fetch_add(&seen->events, 1);
}

/* A refused CONNECT through the proxy at `addr` ("127.0.0.1:PORT"): one
 * session event. Returns the first byte of the status code, or 0. */
static char refused_connect(const char *addr) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(strrchr(addr, ':') + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char resp[64] = "";
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        const char req[] = "CONNECT 10.1.2.3:80 HTTP/1.1\r\n\r\n";
        if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1))
            (void)read(fd, resp, sizeof resp - 1);
    }
    if (fd >= 0)
        close(fd);
    return strncmp(resp, "HTTP/1.1 ", 9) == 0 ? resp[9] : 0;
}

/* Stops the proxy from inside its own callback, as the header allows. */
static void stop_from_callback(void *user_data, const char *event_json) {
    struct seen *seen = user_data;
    (void)event_json;
    if (portcullis_stop(seen->proxy, 0) == PORTCULLIS_STATUS_OK)
        atomic_fetch_add(&seen->events, 1);
}

int main(void) {
    PortcullisProxy *p = (PortcullisProxy *)0x1; /* must be reset to NULL on failure */
    char *s = NULL;

    EXPECT("null out", portcullis_start_toml("", NULL), PORTCULLIS_STATUS_INVALID_ARGUMENT, "out is NULL");
    EXPECT("null toml", portcullis_start_toml(NULL, &p), PORTCULLIS_STATUS_INVALID_ARGUMENT, "toml is NULL");
    check(p == NULL, "failed start clears out", PORTCULLIS_STATUS_OK);
    EXPECT("bad toml names the key",
           portcullis_start_toml("[limits]\nmax_sessoins = 3\n", &p), PORTCULLIS_STATUS_CONFIG, "max_sessoins");
    EXPECT("not utf-8", portcullis_start_toml("\xff\xfe", &p), PORTCULLIS_STATUS_INVALID_ARGUMENT, "UTF-8");
    EXPECT("missing file", portcullis_start_file("/nonexistent/portcullis.toml", &p),
           PORTCULLIS_STATUS_CONFIG, "/nonexistent/portcullis.toml");
    const char *bad_rule[] = {"https://github.com"};
    EXPECT("url as a rule names the fix", portcullis_start("127.0.0.1:0", bad_rule, 1, NULL, 0, &p),
           PORTCULLIS_STATUS_CONFIG, "github.com:443");
    EXPECT("rules NULL with a length", portcullis_start("127.0.0.1:0", NULL, 2, NULL, 0, &p),
           PORTCULLIS_STATUS_INVALID_ARGUMENT, "allow is NULL");
    const char *null_rule[] = {NULL};
    EXPECT("a NULL rule", portcullis_start("127.0.0.1:0", NULL, 0, null_rule, 1, &p),
           PORTCULLIS_STATUS_INVALID_ARGUMENT, "deny[0] is NULL");
    EXPECT("bad listen", portcullis_start("localhost", NULL, 0, NULL, 0, &p), PORTCULLIS_STATUS_CONFIG, "listen");
    EXPECT("null proxy", portcullis_stats_json(NULL, &s), PORTCULLIS_STATUS_INVALID_ARGUMENT, "proxy is NULL");
    portcullis_free(NULL);
    portcullis_string_free(NULL);

    /* A real proxy from TOML. */
    EXPECT("start from toml",
           portcullis_start_toml("[[listen]]\naddress = \"127.0.0.1:0\"\n", &p), PORTCULLIS_STATUS_OK, NULL);
    if (!p)
        return 1;
    EXPECT("local_addr", portcullis_local_addr(p, 0, &s), PORTCULLIS_STATUS_OK, NULL);
    check(s && strncmp(s, "127.0.0.1:", 10) == 0 && strcmp(s, "127.0.0.1:0") != 0, "port resolved",
          PORTCULLIS_STATUS_OK);
    char addr[64];
    snprintf(addr, sizeof addr, "%s", s);
    /* Binding the same address again fails with the OS's answer. */
    char toml[128];
    snprintf(toml, sizeof toml, "[[listen]]\naddress = \"%s\"\n", s);
    PortcullisProxy *q = NULL;
    EXPECT("address in use", portcullis_start_toml(toml, &q), PORTCULLIS_STATUS_IO, "in use");
    portcullis_string_free(s);
    s = (char *)0x1;
    EXPECT("no such listener", portcullis_local_addr(p, 1, &s), PORTCULLIS_STATUS_INVALID_ARGUMENT,
           "the proxy has 1");
    check(s == NULL, "failed local_addr clears out", PORTCULLIS_STATUS_OK);
    EXPECT("bad policy refused", portcullis_replace_policy(p, "[[rules]]\nhots = [\"a.test\"]\n"),
           PORTCULLIS_STATUS_CONFIG, "hots");
    EXPECT("good policy", portcullis_replace_policy(p, "default = true\n"), PORTCULLIS_STATUS_OK, NULL);

    struct seen seen = {.proxy = p};
    EXPECT("subscribe", portcullis_subscribe(p, on_event, &seen), PORTCULLIS_STATUS_OK, NULL);
    EXPECT("unsubscribe", portcullis_subscribe(p, NULL, NULL), PORTCULLIS_STATUS_OK, NULL);
    EXPECT("subscribe again", portcullis_subscribe(p, on_event, &seen), PORTCULLIS_STATUS_OK, NULL);
    check(refused_connect(addr) == '4', "CONNECT to a private address refused", PORTCULLIS_STATUS_OK);
    check(refused_connect(addr) == '4', "and again", PORTCULLIS_STATUS_OK);

    EXPECT("stop", portcullis_stop(p, 1), PORTCULLIS_STATUS_OK, NULL);
    /* Stopping delivered every queued event, each on the events thread,
     * each able to read the stats from inside the callback. */
    int n = atomic_load(&seen.events);
    check(n == 2, "both session events delivered by stop", PORTCULLIS_STATUS_OK);
    check(atomic_load(&seen.on_events_thread) == n, "callback on portcullis-evt", PORTCULLIS_STATUS_OK);
    check(atomic_load(&seen.stats_ok) == n, "stats from the callback", PORTCULLIS_STATUS_OK);
    EXPECT("stop twice", portcullis_stop(p, 0), PORTCULLIS_STATUS_OK, NULL);
    EXPECT("policy after stop", portcullis_replace_policy(p, "default = true\n"),
           PORTCULLIS_STATUS_NOT_RUNNING, "not running");
    EXPECT("stats after stop", portcullis_stats_json(p, &s), PORTCULLIS_STATUS_OK, NULL);
    portcullis_string_free(s);
    portcullis_free(p);

    /* The callback may stop its proxy; stopping it again from here then
     * waits for that callback, and neither deadlocks. */
    p = NULL;
    EXPECT("second proxy", portcullis_start("127.0.0.1:0", NULL, 0, NULL, 0, &p), PORTCULLIS_STATUS_OK, NULL);
    if (!p)
        return 1;
    struct seen stopper = {.proxy = p};
    EXPECT("subscribe a stopper", portcullis_subscribe(p, stop_from_callback, &stopper), PORTCULLIS_STATUS_OK,
           NULL);
    EXPECT("local_addr 2", portcullis_local_addr(p, 0, &s), PORTCULLIS_STATUS_OK, NULL);
    snprintf(addr, sizeof addr, "%s", s);
    portcullis_string_free(s);
    check(refused_connect(addr) == '4', "refused on the second proxy", PORTCULLIS_STATUS_OK);
    EXPECT("stop after the callback's stop", portcullis_stop(p, 0), PORTCULLIS_STATUS_OK, NULL);
    check(atomic_load(&stopper.events) >= 1, "the callback stopped it", PORTCULLIS_STATUS_OK);
    EXPECT("stopped", portcullis_replace_policy(p, "default = true\n"), PORTCULLIS_STATUS_NOT_RUNNING,
           "not running");
    portcullis_free(p);

    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
