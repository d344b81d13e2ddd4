/*
 * relay: the yardstick for scripts/bench.sh. A minimal single-threaded epoll
 * copy relay: accept on 127.0.0.1:LISTEN_PORT, connect each client to
 * 127.0.0.1:BACKEND_PORT, copy bytes both ways through one 256 KiB buffer per
 * direction. Nothing else: no parsing, no CONNECT, no policy, no timers, no
 * logging (a plain relay like the haproxy and socat rows).
 *
 * With -c it speaks the least of HTTP CONNECT, the lower bound of what a
 * CONNECT tunnel costs: it reads the client's request head (up to the blank
 * line, nothing parsed), connects to the same fixed backend, answers
 * "HTTP/1.1 200" once connected, then relays (bytes after the head included).
 *
 *   cc -O2 -o relay relay.c && ./relay 20001 20002      # port relay
 *   ./relay -c 20001 20002                               # CONNECT, fixed backend
 *
 * Honest about the edges, so its numbers can be compared:
 *   - edge-triggered epoll, every fd registered once (EPOLLIN|EPOLLOUT|
 *     EPOLLRDHUP): no epoll_ctl after setup; close() removes an fd from epoll;
 *   - reads until EAGAIN (what edge triggering requires), writes until the
 *     buffer is empty or EAGAIN (then EPOLLOUT resumes it);
 *   - EINTR retries; EAGAIN waits; EPIPE/ECONNRESET/any other error closes
 *     the pair; SIGPIPE ignored, sends with MSG_NOSIGNAL;
 *   - half-close: EOF from one side is passed on with shutdown(SHUT_WR) once
 *     that direction's buffer is flushed; the pair closes when both
 *     directions have finished;
 *   - a backend that refuses or fails closes the pair;
 *   - pairs closed during one epoll_wait batch are freed after the batch, so
 *     a later event of the same batch never touches freed memory.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_SIZE (256 * 1024)
#define MAX_EVENTS 256

/* One direction: bytes read from `from`, written to `to`. */
struct dir {
    char *buf;
    size_t off, len; /* pending bytes are buf[off..len) */
    int eof;         /* `from` sent EOF */
    int done;        /* EOF passed on with shutdown(to, SHUT_WR) */
};

struct pair;

/* What epoll_event.data points at: one socket of a pair. */
struct side {
    struct pair *pair;
    int fd;
};

enum stage { HEAD, CONNECTING, RELAY };

struct pair {
    struct side client, backend; /* backend.fd is -1 while the head is read */
    struct dir up, down; /* up: client -> backend; down: backend -> client */
    enum stage stage;
    int dead;
    struct pair *next_dead;
};

static int ep;
static struct sockaddr_in backend_addr;
static struct pair *dead_list;
static int connect_mode; /* -c */

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void kill_pair(struct pair *p) {
    if (p->dead)
        return;
    p->dead = 1;
    close(p->client.fd); /* also leaves the epoll set */
    if (p->backend.fd >= 0)
        close(p->backend.fd);
    p->next_dead = dead_list;
    dead_list = p;
}

/*
 * Moves what can move from `from` to `to` through d. Returns -1 if the pair
 * must close (an error), 0 otherwise.
 */
static int pump(struct dir *d, int from, int to) {
    for (;;) {
        while (d->off < d->len) {
            ssize_t n = send(to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN)
                    return 0; /* EPOLLOUT on `to` resumes */
                return -1;    /* EPIPE, ECONNRESET, ... */
            }
            d->off += (size_t)n;
        }
        d->off = d->len = 0;
        if (d->eof) {
            if (!d->done) {
                if (shutdown(to, SHUT_WR) < 0 && errno != ENOTCONN)
                    return -1;
                d->done = 1;
            }
            return 0;
        }
        ssize_t n = recv(from, d->buf, BUF_SIZE, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0; /* EPOLLIN on `from` resumes */
            return -1;
        }
        if (n == 0)
            d->eof = 1;
        d->len = (size_t)n;
    }
}

static void drive(struct pair *p) {
    if (p->dead)
        return;
    if (pump(&p->up, p->client.fd, p->backend.fd) < 0 ||
        pump(&p->down, p->backend.fd, p->client.fd) < 0 || (p->up.done && p->down.done))
        kill_pair(p);
}

static int add(struct side *s) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = s};
    return epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
}

/* The backend socket: non-blocking connect, registered. -1 on failure. */
static int dial(struct pair *p) {
    int b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (b < 0) {
        perror("socket");
        return -1;
    }
    if (connect(b, (struct sockaddr *)&backend_addr, sizeof backend_addr) < 0 &&
        errno != EINPROGRESS) {
        close(b);
        return -1;
    }
    p->backend = (struct side){p, b};
    if (add(&p->backend) < 0) {
        perror("epoll_ctl");
        return -1; /* kill_pair closes b */
    }
    return 0;
}

/* -c: reads the request head into up.buf; once its blank line is in, dials.
 * Bytes after the head stay in up.buf, relayed once the 200 is sent. */
static void read_head(struct pair *p) {
    struct dir *d = &p->up;
    for (;;) {
        if (d->len == BUF_SIZE) {
            kill_pair(p); /* a head that fills the buffer */
            return;
        }
        ssize_t n = recv(p->client.fd, d->buf + d->len, BUF_SIZE - d->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            kill_pair(p);
            return;
        }
        /* Only where the blank line can end now: not quadratic in a head
         * that comes a byte at a time. */
        size_t from = d->len > 3 ? d->len - 3 : 0;
        d->len += (size_t)n;
        char *end = memmem(d->buf + from, d->len - from, "\r\n\r\n", 4);
        if (end) {
            d->off = (size_t)(end + 4 - d->buf);
            p->stage = CONNECTING;
            if (dial(p) < 0)
                kill_pair(p);
            return;
        }
    }
}

/* -c: the backend is connected: the answer, then relaying. */
static void connected(struct pair *p) {
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    ssize_t n;
    do
        n = send(p->client.fd, ok, sizeof ok - 1, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)(sizeof ok - 1)) {
        kill_pair(p); /* a fresh socket takes 39 bytes, or the client is gone */
        return;
    }
    p->stage = RELAY;
    drive(p);
}

static void on_event(struct side *s, uint32_t events) {
    struct pair *p = s->pair;
    if (events & EPOLLERR) {
        kill_pair(p); /* refused connect, reset */
        return;
    }
    switch (p->stage) {
    case HEAD:
        read_head(p);
        break;
    case CONNECTING:
        /* The client's events wait: relaying reads until EAGAIN anyway. */
        if (s == &p->backend)
            connected(p);
        break;
    case RELAY:
        drive(p);
        break;
    }
}

static void accept_all(int lfd) {
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN)
                perror("accept4"); /* EMFILE and the like: try again on the next event */
            return;
        }
        struct pair *p = calloc(1, sizeof *p);
        char *bufs = malloc(2 * BUF_SIZE); /* mmap'd: pages cost nothing until touched */
        if (!p || !bufs) {
            free(p);
            free(bufs);
            close(c);
            continue;
        }
        p->client = (struct side){p, c};
        p->backend = (struct side){p, -1};
        p->up.buf = bufs;
        p->down.buf = bufs + BUF_SIZE;
        p->stage = connect_mode ? HEAD : RELAY;
        if (add(&p->client) < 0) {
            perror("epoll_ctl");
            close(c);
            free(bufs);
            free(p);
            continue;
        }
        if (connect_mode) {
            read_head(p); /* at once, as the proxies measured do: it is usually there */
        } else if (dial(p) < 0) {
            kill_pair(p);
        }
        /* No relay read yet: edge triggering reports whatever is already queued. */
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "-c") == 0) {
        connect_mode = 1;
        argv++;
        argc--;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s [-c] LISTEN_PORT BACKEND_PORT (both on 127.0.0.1)\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    backend_addr.sin_family = AF_INET;
    backend_addr.sin_port = htons((unsigned short)atoi(argv[2]));
    backend_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* Accepted sockets inherit TCP_NODELAY, as the proxies measured set it. */
    setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in la = {.sin_family = AF_INET,
                             .sin_port = htons((unsigned short)atoi(argv[1])),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0)
        die("bind");
    if (listen(lfd, 4096) < 0)
        die("listen");
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN | EPOLLET, .data.ptr = NULL};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0)
        die("epoll_ctl");

    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct side *s = evs[i].data.ptr;
            if (!s)
                accept_all(lfd);
            else if (!s->pair->dead)
                on_event(s, evs[i].events);
        }
        while (dead_list) {
            struct pair *p = dead_list;
            dead_list = p->next_dead;
            free(p->up.buf);
            free(p);
        }
    }
}
