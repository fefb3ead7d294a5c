/* The request loop of http_ranges in C (Linux): byte ranges of plain http:// URLs over
 * keep-alive, non-blocking sockets watched by one epoll, with the GIL released while it runs.
 *
 * _http_native_loop.py builds a Fetch of (server, target, start, end) requests and calls run()
 * until nothing is left; each run() returns the ranges finished since the last one as (request
 * number, body) pairs, where a body is a memoryview of the received bytes (no copy: an answer is
 * received into one buffer of the range's length plus HEAD_ROOM, and the body is the part after
 * the head) or an int saying why the range failed (a status other than 206, or one of the ERR_
 * codes, or -errno); _http_native_loop.py turns those into the exceptions the Python loop
 * (_http_loop.py) gives, and http_ranges.py retries them alike. The rules are the Python loop's:
 * a 206 answer is taken only with a Content-Length, a Content-Range equal to the range asked (or a
 * prefix of it: the file ends sooner), no Transfer-Encoding and an identity Content-Encoding; a
 * connection taken from the idle ones that fails before any byte of its answer is replaced once
 * by a fresh one; no progress on any connection for `timeout` seconds fails every range still
 * open; an answer head is at most MAX_HEAD bytes. Connections still open and keep-alive at the
 * end are handed back by idle().
 * run(wait) returns after at least one range finished or after `wait` seconds, so the caller
 * handles signals (Ctrl-C) and the ranges' bytes while the other requests are in flight.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef __linux__
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_ROOM 4096
#define MAX_HEAD 65536
#define MAX_EVENTS 256

/* Why a range failed, besides an HTTP status (> 0) and -errno (> -4096). */
#define ERR_FALLBACK -100000   /* a 206 answer this client does not take: fsspec reads it */
#define ERR_CLOSED -100001     /* the server closed the connection */
#define ERR_NOT_HTTP -100002   /* the answer is not HTTP */
#define ERR_TOO_MUCH -100003   /* more bytes than the range */
#define ERR_LONG_HEAD -100004  /* an answer head over MAX_HEAD */
#define ERR_TIMEOUT -100005    /* no progress on any connection for the timeout */

/* ----------------------------------------------------------------------------------------- */
/* Body: the received bytes of one range (owns its buffer; exports [off, off + len)).          */

typedef struct {
    PyObject_HEAD
    char *mem;
    Py_ssize_t off, len;
} Body;

static int body_getbuffer(PyObject *obj, Py_buffer *view, int flags) {
    Body *self = (Body *)obj;
    return PyBuffer_FillInfo(view, obj, self->mem + self->off, self->len, 0, flags);
}

static void body_dealloc(PyObject *obj) {
    free(((Body *)obj)->mem);
    Py_TYPE(obj)->tp_free(obj);
}

static PyBufferProcs body_as_buffer = {body_getbuffer, NULL};

static PyTypeObject BodyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "grain_plugin_arrayrecord._http_native.Body",
    .tp_basicsize = sizeof(Body),
    .tp_dealloc = body_dealloc,
    .tp_as_buffer = &body_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The bytes of one range (read them through memoryview).",
};

/* ----------------------------------------------------------------------------------------- */

typedef struct {
    int family;
    socklen_t addrlen;
    struct sockaddr_storage addr;
    char *host; /* the Host header's value */
    Py_ssize_t host_len;
    int *idle; /* idle keep-alive connections: given at the start, kept ones at the end */
    int nidle, idle_cap;
    Py_ssize_t *queue; /* requests not started yet, in order */
    Py_ssize_t qhead, qlen;
} Server;

typedef struct {
    int server;
    const char *target;
    Py_ssize_t target_len;
    long long start, end;
    int code;      /* 0: ok (once done) */
    char *buf;     /* head and body; handed to a Body when reported */
    size_t cap, got; /* got: bytes of buf received before the head is parsed, of the body after */
    long long skip;  /* where the body starts in buf; -1 until the head is parsed */
    size_t n;        /* the body's length */
    int keep, reused;
} Req;

typedef struct {
    int fd;            /* -1: free */
    Py_ssize_t req;
    unsigned gen;      /* changes whenever the slot's socket does (stale events are skipped) */
    char *out;         /* the request's bytes not sent yet */
    size_t out_len, out_pos, out_cap;
    int writing, registered;
} Conn;

typedef struct {
    PyObject_HEAD
    int ep;
    Server *servers;
    int nservers;
    Req *reqs;
    Py_ssize_t nreqs, left;
    Conn *conns;
    int nconns, open;
    int *free_slots;
    int nfree;
    Py_ssize_t *done; /* finished since the last run() */
    Py_ssize_t ndone;
    PyObject *keep_alive; /* the tuple of targets (their bytes are pointed at) */
    double timeout, last;
    int closed;
    /* A call opens at most initial_new new connections at first; more (up to nconns) once no
     * answer came for grow_after seconds while requests wait (http_ranges.INITIAL_CONNECTIONS,
     * GROW_AFTER_S). */
    int initial_new, opened_new, grown;
    double grow_after;
} Fetch;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void finish(Fetch *f, Py_ssize_t r, int code) {
    f->reqs[r].code = code;
    if (code != 0) {
        free(f->reqs[r].buf);
        f->reqs[r].buf = NULL;
    }
    f->done[f->ndone++] = r;
    f->left--;
}

static int set_events(Fetch *f, int slot, int writing) {
    Conn *c = &f->conns[slot];
    struct epoll_event ev;
    ev.events = writing ? EPOLLOUT : EPOLLIN;
    ev.data.u64 = ((uint64_t)c->gen << 32) | (uint32_t)slot;
    if (c->registered && c->writing == writing)
        return 0;
    if (epoll_ctl(f->ep, c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev) < 0)
        return -errno;
    c->registered = 1;
    c->writing = writing;
    return 0;
}

/* Frees the slot: its socket kept idle for later requests of its server, or closed. */
static void release(Fetch *f, int slot, int keep) {
    Conn *c = &f->conns[slot];
    if (c->fd < 0)
        return;
    if (c->registered)
        epoll_ctl(f->ep, EPOLL_CTL_DEL, c->fd, NULL);
    Server *s = &f->servers[f->reqs[c->req].server];
    if (keep && s->nidle < s->idle_cap)
        s->idle[s->nidle++] = c->fd;
    else
        close(c->fd);
    c->fd = -1;
    c->registered = 0;
    c->gen++;
    f->free_slots[f->nfree++] = slot;
    f->open--;
}

static int open_socket(Server *s) {
    int fd = socket(s->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&s->addr, s->addrlen) < 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

static void fail_slot(Fetch *f, int slot, int code);

/* Sends request r on the slot's socket `fd` (reused: it answered before). */
static void start(Fetch *f, int slot, Py_ssize_t r, int fd, int reused) {
    Conn *c = &f->conns[slot];
    Req *q = &f->reqs[r];
    Server *s = &f->servers[q->server];
    if (c->fd != fd) {
        if (c->fd >= 0 && c->registered)
            epoll_ctl(f->ep, EPOLL_CTL_DEL, c->fd, NULL);
        c->fd = fd;
        c->registered = 0;
        c->gen++;
    }
    c->req = r;
    q->reused = reused;
    q->got = 0;
    q->skip = -1;
    size_t need = q->target_len + s->host_len + 128;
    if (c->out_cap < need) {
        char *out = realloc(c->out, need);
        if (out == NULL) {
            fail_slot(f, slot, -ENOMEM);
            return;
        }
        c->out = out;
        c->out_cap = need;
    }
    int len = snprintf(c->out, c->out_cap,
                       "GET %.*s HTTP/1.1\r\nHost: %.*s\r\nRange: bytes=%lld-%lld\r\n"
                       "Accept-Encoding: identity\r\n\r\n",
                       (int)q->target_len, q->target, (int)s->host_len, s->host, q->start,
                       q->end - 1);
    c->out_len = (size_t)len;
    c->out_pos = 0;
    if (reused) { /* connected: the request (a few hundred bytes) usually goes out at once */
        ssize_t sent = send(fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (sent > 0)
            c->out_pos = (size_t)sent;
    }
    int err = set_events(f, slot, c->out_pos < c->out_len);
    if (err)
        fail_slot(f, slot, err);
}

/* The slot's request failed with `code` on its connection: once more on a fresh connection if
 * the connection came from the idle ones and nothing of the answer came (the server had shut it),
 * else the request fails. The connection is closed either way. */
static void fail_slot(Fetch *f, int slot, int code) {
    Conn *c = &f->conns[slot];
    Py_ssize_t r = c->req;
    Req *q = &f->reqs[r];
    int retry = q->reused && q->skip < 0 && q->got == 0;
    if (c->registered)
        epoll_ctl(f->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->registered = 0;
    c->gen++;
    if (retry) {
        int fd = open_socket(&f->servers[q->server]);
        if (fd >= 0) {
            start(f, slot, r, fd, 0);
            return;
        }
        code = fd;
    }
    f->free_slots[f->nfree++] = slot;
    f->open--;
    finish(f, r, code);
}

static int queued(Fetch *f) {
    for (int k = 0; k < f->nservers; k++)
        if (f->servers[k].qhead < f->servers[k].qlen)
            return 1;
    return 0;
}

static void fill(Fetch *f) {
    for (int k = 0; k < f->nservers; k++) {
        Server *s = &f->servers[k];
        while (s->qhead < s->qlen && f->open < f->nconns) {
            if (!s->nidle && !f->grown && f->opened_new >= f->initial_new && f->open > 0)
                break; /* more connections only once answers are slow (grow_after) */
            Py_ssize_t r = s->queue[s->qhead++];
            int fd = s->nidle ? s->idle[--s->nidle] : -1;
            int reused = fd >= 0;
            if (!reused) {
                f->opened_new++;
                fd = open_socket(s);
                if (fd < 0) {
                    finish(f, r, fd);
                    continue;
                }
            }
            int slot = f->free_slots[--f->nfree];
            f->open++;
            f->conns[slot].fd = -1;
            start(f, slot, r, fd, reused);
        }
    }
}

static int digits(const char *p, size_t n, long long *value) {
    if (n == 0 || n > 18)
        return 0;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (p[i] - '0');
    }
    *value = v;
    return 1;
}

static void trim(const char **p, size_t *n) {
    while (*n && (**p == ' ' || **p == '\t')) {
        (*p)++;
        (*n)--;
    }
    while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t'))
        (*n)--;
}

/* 0 with *body (the body's length) and q->keep set for an answer head `h` (without its final
 * blank line) this client takes for request q; else why not (an HTTP status, or ERR_NOT_HTTP,
 * ERR_FALLBACK). Mirrors _http_loop.parse_head. */
static int parse_head(Req *q, const char *h, size_t len, long long *body) {
    const char *eol = memmem(h, len, "\r\n", 2);
    size_t first = eol ? (size_t)(eol - h) : len;
    /* the status line: VERSION SP STATUS [SP reason] */
    const char *sp = memchr(h, ' ', first);
    if (sp == NULL)
        return ERR_NOT_HTTP;
    size_t vlen = (size_t)(sp - h);
    const char *st = sp + 1;
    size_t slen = first - vlen - 1;
    const char *sp2 = memchr(st, ' ', slen);
    if (sp2)
        slen = (size_t)(sp2 - st);
    long long status;
    if (!digits(st, slen, &status))
        return ERR_NOT_HTTP;
    const char *cl = NULL, *cr = NULL, *conn = NULL, *ce = NULL;
    size_t cl_n = 0, cr_n = 0, conn_n = 0, ce_n = 0;
    int chunked = 0;
    size_t pos = eol ? first + 2 : len;
    while (pos < len) {
        const char *line = h + pos;
        const char *e = memmem(line, len - pos, "\r\n", 2);
        size_t n = e ? (size_t)(e - line) : len - pos;
        pos += n + 2;
        const char *colon = memchr(line, ':', n);
        const char *name = line, *value = colon ? colon + 1 : line + n;
        size_t name_n = colon ? (size_t)(colon - line) : n;
        size_t value_n = colon ? n - name_n - 1 : 0;
        trim(&name, &name_n);
        trim(&value, &value_n);
#define IS(lit) (name_n == sizeof(lit) - 1 && strncasecmp(name, lit, name_n) == 0)
        if (IS("content-length")) {
            cl = value;
            cl_n = value_n;
        } else if (IS("content-range")) {
            cr = value;
            cr_n = value_n;
        } else if (IS("connection")) {
            conn = value;
            conn_n = value_n;
        } else if (IS("content-encoding")) {
            ce = value;
            ce_n = value_n;
        } else if (IS("transfer-encoding")) {
            chunked = 1;
        }
#undef IS
    }
    if (status == 404 || status >= 500 || status == 408 || status == 429)
        return (int)status;
    long long n;
    if (status != 206 || cl == NULL || !digits(cl, cl_n, &n) || chunked)
        return status != 206 ? (int)status : ERR_FALLBACK;
    if (ce != NULL && !(ce_n == 8 && strncasecmp(ce, "identity", 8) == 0))
        return ERR_FALLBACK;
    /* Content-Range: bytes FIRST-LAST/(SIZE|*) */
    if (cr == NULL || cr_n < 6 || strncmp(cr, "bytes ", 6) != 0)
        return ERR_FALLBACK;
    const char *span = cr + 6;
    size_t span_n = cr_n - 6;
    const char *slash = memchr(span, '/', span_n);
    if (slash)
        span_n = (size_t)(slash - span);
    const char *dash = memchr(span, '-', span_n);
    long long a, b;
    if (dash == NULL || !digits(span, (size_t)(dash - span), &a)
        || !digits(dash + 1, span_n - (size_t)(dash - span) - 1, &b))
        return ERR_FALLBACK;
    if (a != q->start || b >= q->end || n != b - a + 1)
        return ERR_FALLBACK;
    q->keep = vlen == 8 && memcmp(h, "HTTP/1.1", 8) == 0
              && !(conn != NULL && conn_n == 5 && strncasecmp(conn, "close", 5) == 0);
    *body = n;
    return 0;
}

/* The range on `slot` is complete: reported, and the slot's socket goes on to its server's next
 * request, or back to the idle ones, or is closed. */
static void complete(Fetch *f, int slot) {
    Conn *c = &f->conns[slot];
    Py_ssize_t r = c->req;
    Req *q = &f->reqs[r];
    finish(f, r, 0);
    Server *s = &f->servers[q->server];
    if (q->keep && s->qhead < s->qlen) { /* keep-alive: the next range of this server */
        start(f, slot, s->queue[s->qhead++], c->fd, 1);
        return;
    }
    release(f, slot, q->keep);
    fill(f);
}

static void on_event(Fetch *f, int slot) {
    Conn *c = &f->conns[slot];
    Req *q = &f->reqs[c->req];
    if (c->writing) {
        int err = 0;
        socklen_t errlen = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) == 0 && err) {
            fail_slot(f, slot, -err);
            return;
        }
        ssize_t sent = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail_slot(f, slot, -errno);
            return;
        }
        c->out_pos += (size_t)sent;
        if (c->out_pos == c->out_len && (err = set_events(f, slot, 0)))
            fail_slot(f, slot, err);
        return;
    }
    size_t want = (size_t)(q->end - q->start);
    if (q->skip < 0) { /* the head is not in yet */
        if (q->buf == NULL) {
            q->cap = want + HEAD_ROOM;
            q->buf = malloc(q->cap);
            if (q->buf == NULL) {
                fail_slot(f, slot, -ENOMEM);
                return;
            }
        } else if (q->got == q->cap) { /* a long head: more room (it is bounded) */
            if (q->cap > MAX_HEAD + want) {
                fail_slot(f, slot, ERR_LONG_HEAD);
                return;
            }
            char *more = realloc(q->buf, q->cap + MAX_HEAD);
            if (more == NULL) {
                fail_slot(f, slot, -ENOMEM);
                return;
            }
            q->buf = more;
            q->cap += MAX_HEAD;
        }
        ssize_t got = recv(c->fd, q->buf + q->got, q->cap - q->got, 0);
        if (got <= 0) {
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            fail_slot(f, slot, got == 0 ? ERR_CLOSED : -errno);
            return;
        }
        size_t from = q->got > 3 ? q->got - 3 : 0;
        q->got += (size_t)got;
        const char *end = memmem(q->buf + from, q->got - from, "\r\n\r\n", 4);
        if (end == NULL)
            return;
        size_t head = (size_t)(end - q->buf);
        long long n = 0;
        int why = parse_head(q, q->buf, head, &n);
        if (why != 0) { /* an answer this client does not take, or an error status */
            fail_slot(f, slot, why);
            return;
        }
        size_t skip = head + 4, rest = q->got - skip;
        if (rest > (size_t)n) {
            fail_slot(f, slot, ERR_TOO_MUCH);
            return;
        }
        if (skip + (size_t)n > q->cap) { /* the head took the body's room: a new buffer */
            char *body = malloc(n ? (size_t)n : 1);
            if (body == NULL) {
                fail_slot(f, slot, -ENOMEM);
                return;
            }
            memcpy(body, q->buf + skip, rest);
            free(q->buf);
            q->buf = body;
            q->cap = n ? (size_t)n : 1;
            skip = 0;
        }
        q->skip = (long long)skip;
        q->n = (size_t)n;
        q->got = rest;
    } else {
        ssize_t got = recv(c->fd, q->buf + q->skip + q->got, q->n - q->got, 0);
        if (got <= 0) {
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            fail_slot(f, slot, got == 0 ? ERR_CLOSED : -errno);
            return;
        }
        q->got += (size_t)got;
    }
    if (q->got == q->n)
        complete(f, slot);
}

/* Fails every range still open or not started (no progress for the timeout). */
static void time_out(Fetch *f) {
    for (int slot = 0; slot < f->nconns; slot++) {
        Conn *c = &f->conns[slot];
        if (c->fd < 0)
            continue;
        Py_ssize_t r = c->req;
        release(f, slot, 0);
        finish(f, r, ERR_TIMEOUT);
    }
    for (int k = 0; k < f->nservers; k++) {
        Server *s = &f->servers[k];
        while (s->qhead < s->qlen)
            finish(f, s->queue[s->qhead++], ERR_TIMEOUT);
    }
}

/* ----------------------------------------------------------------------------------------- */

static void fetch_close(Fetch *f) {
    if (f->closed)
        return;
    f->closed = 1;
    for (int slot = 0; slot < f->nconns; slot++)
        if (f->conns[slot].fd >= 0)
            close(f->conns[slot].fd);
    for (int k = 0; k < f->nservers; k++)
        for (int i = 0; i < f->servers[k].nidle; i++)
            close(f->servers[k].idle[i]);
    if (f->ep >= 0)
        close(f->ep);
    f->ep = -1;
}

static void fetch_dealloc(PyObject *obj) {
    Fetch *f = (Fetch *)obj;
    fetch_close(f);
    if (f->servers) {
        for (int k = 0; k < f->nservers; k++) {
            free(f->servers[k].idle);
            free(f->servers[k].queue);
            free(f->servers[k].host);
        }
        free(f->servers);
    }
    if (f->reqs) {
        for (Py_ssize_t r = 0; r < f->nreqs; r++)
            free(f->reqs[r].buf);
        free(f->reqs);
    }
    if (f->conns) {
        for (int slot = 0; slot < f->nconns; slot++)
            free(f->conns[slot].out);
        free(f->conns);
    }
    free(f->free_slots);
    free(f->done);
    Py_XDECREF(f->keep_alive);
    Py_TYPE(obj)->tp_free(obj);
}

static int parse_server(PyObject *item, Server *s, int max_idle) {
    int family, port;
    const char *ip;
    const char *host;
    Py_ssize_t host_len;
    PyObject *idle;
    if (!PyArg_ParseTuple(item, "isis#O", &family, &ip, &port, &host, &host_len, &idle))
        return -1;
    memset(&s->addr, 0, sizeof s->addr);
    s->family = family;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&s->addr;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        s->addrlen = sizeof *a;
        if (inet_pton(AF_INET, ip, &a->sin_addr) != 1)
            goto bad;
    } else if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&s->addr;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        s->addrlen = sizeof *a;
        if (inet_pton(AF_INET6, ip, &a->sin6_addr) != 1)
            goto bad;
    } else {
        goto bad;
    }
    s->host = malloc(host_len + 1);
    if (s->host == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(s->host, host, host_len);
    s->host_len = host_len;
    PyObject *fast = PySequence_Fast(idle, "idle sockets must be a sequence of ints");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    s->idle_cap = max_idle > n ? max_idle : (int)n;
    s->idle = malloc(sizeof(int) * (s->idle_cap ? s->idle_cap : 1));
    if (s->idle == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (fd < 0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        s->idle[s->nidle++] = fd; /* owned from now on: closed unless handed back */
    }
    Py_DECREF(fast);
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "not a numeric IPv4/IPv6 address: %s", ip);
    return -1;
}

static PyObject *fetch_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"servers",  "requests",    "concurrency", "timeout",
                             "max_idle", "initial_new", "grow_after",  NULL};
    PyObject *servers, *requests;
    int concurrency, max_idle, initial_new;
    double timeout, grow_after;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOidiid", kwlist, &servers, &requests,
                                     &concurrency, &timeout, &max_idle, &initial_new,
                                     &grow_after))
        return NULL;
    if (!PyList_Check(servers) || !PyList_Check(requests) || concurrency < 1) {
        PyErr_SetString(PyExc_ValueError, "Fetch(servers: list, requests: list, concurrency >= 1)");
        return NULL;
    }
    Fetch *f = (Fetch *)type->tp_alloc(type, 0);
    if (f == NULL)
        return NULL;
    f->ep = -1;
    f->timeout = timeout;
    f->initial_new = initial_new;
    f->grow_after = grow_after;
    f->nservers = (int)PyList_GET_SIZE(servers);
    f->servers = calloc(f->nservers ? f->nservers : 1, sizeof(Server));
    f->nreqs = PyList_GET_SIZE(requests);
    f->reqs = calloc(f->nreqs ? f->nreqs : 1, sizeof(Req));
    f->done = malloc(sizeof(Py_ssize_t) * (f->nreqs ? f->nreqs : 1));
    f->nconns = concurrency < f->nreqs ? concurrency : (int)(f->nreqs ? f->nreqs : 1);
    f->conns = calloc(f->nconns, sizeof(Conn));
    f->free_slots = malloc(sizeof(int) * f->nconns);
    f->keep_alive = PyTuple_New(f->nreqs);
    if (!f->servers || !f->reqs || !f->done || !f->conns || !f->free_slots || !f->keep_alive) {
        Py_DECREF(f);
        return PyErr_NoMemory();
    }
    for (int slot = 0; slot < f->nconns; slot++) {
        f->conns[slot].fd = -1;
        f->free_slots[f->nfree++] = f->nconns - 1 - slot;
    }
    for (int k = 0; k < f->nservers; k++) {
        if (parse_server(PyList_GET_ITEM(servers, k), &f->servers[k], max_idle) < 0) {
            Py_DECREF(f);
            return NULL;
        }
        f->servers[k].queue = malloc(sizeof(Py_ssize_t) * (f->nreqs ? f->nreqs : 1));
        if (f->servers[k].queue == NULL) {
            Py_DECREF(f);
            return PyErr_NoMemory();
        }
    }
    for (Py_ssize_t r = 0; r < f->nreqs; r++) {
        Req *q = &f->reqs[r];
        PyObject *target;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(requests, r), "iSLL", &q->server, &target,
                              &q->start, &q->end)) {
            Py_DECREF(f);
            return NULL;
        }
        if (q->server < 0 || q->server >= f->nservers || q->end <= q->start || q->start < 0) {
            PyErr_SetString(PyExc_ValueError, "a request needs a known server and start < end");
            Py_DECREF(f);
            return NULL;
        }
        Py_INCREF(target);
        PyTuple_SET_ITEM(f->keep_alive, r, target);
        q->target = PyBytes_AS_STRING(target);
        q->target_len = PyBytes_GET_SIZE(target);
        q->skip = -1;
        Server *s = &f->servers[q->server];
        s->queue[s->qlen++] = r;
    }
    f->left = f->nreqs;
    f->ep = epoll_create1(EPOLL_CLOEXEC);
    if (f->ep < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(f);
        return NULL;
    }
    f->last = now_s();
    fill(f);
    return (PyObject *)f;
}

static PyObject *fetch_run(PyObject *obj, PyObject *args) {
    Fetch *f = (Fetch *)obj;
    double wait;
    if (!PyArg_ParseTuple(args, "d", &wait))
        return NULL;
    if (f->closed) {
        PyErr_SetString(PyExc_ValueError, "the fetch is closed");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    struct epoll_event events[MAX_EVENTS];
    double deadline = now_s() + wait;
    while (f->left > 0 && f->ndone == 0) {
        double now = now_s();
        double until = deadline < f->last + f->timeout ? deadline : f->last + f->timeout;
        int waiting = !f->grown && f->open < f->nconns && queued(f);
        if (waiting && f->last + f->grow_after < until)
            until = f->last + f->grow_after;
        int ms = until > now ? (int)((until - now) * 1000) + 1 : 0;
        int n = epoll_wait(f->ep, events, MAX_EVENTS, ms);
        if (n < 0) {
            if (errno == EINTR)
                break; /* a signal: the caller handles it */
            n = 0;
        }
        now = now_s();
        if (n > 0) {
            f->last = now;
            for (int i = 0; i < n; i++) {
                int slot = (int)(uint32_t)events[i].data.u64;
                unsigned gen = (unsigned)(events[i].data.u64 >> 32);
                if (f->conns[slot].fd >= 0 && f->conns[slot].gen == gen)
                    on_event(f, slot);
            }
        } else if (now - f->last > f->timeout) {
            time_out(f);
        }
        if (waiting && now - f->last >= f->grow_after) { /* answers are slow: more connections */
            f->grown = 1;
            fill(f);
        }
        if (now >= deadline)
            break;
    }
    Py_END_ALLOW_THREADS
    PyObject *out = PyList_New(f->ndone);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < f->ndone; k++) {
        Py_ssize_t r = f->done[k];
        Req *q = &f->reqs[r];
        PyObject *value;
        if (q->code == 0) {
            Body *body = PyObject_New(Body, &BodyType);
            if (body == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            body->mem = q->buf;
            body->off = (Py_ssize_t)q->skip;
            body->len = (Py_ssize_t)q->n;
            q->buf = NULL;
            q->code = 1; /* reported */
            value = PyMemoryView_FromObject((PyObject *)body);
            Py_DECREF(body);
        } else {
            value = PyLong_FromLong(q->code);
        }
        PyObject *pair = value ? Py_BuildValue("(nN)", r, value) : NULL;
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, pair);
    }
    f->ndone = 0;
    return out;
}

static PyObject *fetch_idle(PyObject *obj, PyObject *unused) {
    /* The kept-alive connections of each server, handed to the caller (no longer closed here). */
    Fetch *f = (Fetch *)obj;
    PyObject *out = PyList_New(f->nservers);
    if (out == NULL)
        return NULL;
    for (int k = 0; k < f->nservers; k++) {
        Server *s = &f->servers[k];
        PyObject *fds = PyList_New(s->nidle);
        if (fds == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        for (int i = 0; i < s->nidle; i++) {
            PyObject *fd = PyLong_FromLong(s->idle[i]);
            if (fd == NULL) {
                Py_DECREF(fds);
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(fds, i, fd);
        }
        s->nidle = 0;
        PyList_SET_ITEM(out, k, fds);
    }
    return out;
}

static PyObject *fetch_close_py(PyObject *obj, PyObject *unused) {
    fetch_close((Fetch *)obj);
    Py_RETURN_NONE;
}

static PyObject *fetch_left(PyObject *obj, void *closure) {
    return PyLong_FromSsize_t(((Fetch *)obj)->left);
}

static PyMethodDef fetch_methods[] = {
    {"run", fetch_run, METH_VARARGS,
     "run(wait) -> [(request, memoryview | int)]: the ranges finished, after at least one did or "
     "`wait` seconds passed (the GIL is released meanwhile)."},
    {"idle", fetch_idle, METH_NOARGS,
     "idle() -> [[fd]]: each server's kept-alive sockets, now the caller's to keep or close."},
    {"close", fetch_close_py, METH_NOARGS, "Closes every socket still held."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fetch_getset[] = {
    {"left", fetch_left, NULL, "Ranges not finished yet.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FetchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "grain_plugin_arrayrecord._http_native.Fetch",
    .tp_basicsize = sizeof(Fetch),
    .tp_dealloc = fetch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Fetch(servers, requests, concurrency, timeout, max_idle, initial_new, grow_after): "
              "one call's ranges.",
    .tp_methods = fetch_methods,
    .tp_getset = fetch_getset,
    .tp_new = fetch_new,
};
#endif /* __linux__ */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_http_native",
    "The request loop of http_ranges in C (Linux only; elsewhere the module has no Fetch).", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__http_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
#ifdef __linux__
    if (PyType_Ready(&BodyType) < 0 || PyType_Ready(&FetchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FetchType);
    if (PyModule_AddObject(m, "Fetch", (PyObject *)&FetchType) < 0
        || PyModule_AddIntConstant(m, "ERR_FALLBACK", ERR_FALLBACK) < 0
        || PyModule_AddIntConstant(m, "ERR_CLOSED", ERR_CLOSED) < 0
        || PyModule_AddIntConstant(m, "ERR_NOT_HTTP", ERR_NOT_HTTP) < 0
        || PyModule_AddIntConstant(m, "ERR_TOO_MUCH", ERR_TOO_MUCH) < 0
        || PyModule_AddIntConstant(m, "ERR_LONG_HEAD", ERR_LONG_HEAD) < 0
        || PyModule_AddIntConstant(m, "ERR_TIMEOUT", ERR_TIMEOUT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
