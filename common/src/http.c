/* The HTTP endpoint (libmicrohttpd): /metrics, /healthz, /readyz and the routes a role adds. */
#include "sparrow/http.h"
#include "sparrow/config.h"
#include "sparrow/log.h"
#include "sparrow/time.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/*
 * Threads: libmicrohttpd runs a pool of threads, each with its own epoll set over its share of the
 * connections (MHD_USE_EPOLL_INTERNAL_THREAD + MHD_OPTION_THREAD_POOL_SIZE), so that thousands of
 * connections cost descriptors and a little memory, not a thread each; route handlers run on
 * those threads and must not block for long. The memory limit bounds the request line and
 * headers; libmicrohttpd answers malformed requests itself (400, 413 for huge headers, ...).
 *
 * Hostile and slow clients (issue 17): every connection is on one list (conn_lock, in accept
 * order) with its phase and the time the phase began:
 *
 *   phase     from                                      deadline        evictable
 *   HEADERS   accept, or the end of the previous request header_timeout  yes
 *   BODY      headers complete (first access call)      body_timeout    yes
 *   ACTIVE    body complete (handler, response)          (idle timeout)  no
 *
 * A reaper thread closes connections past their deadline (shutdown(2) on the socket; libmicrohttpd
 * then reads end-of-file and closes it as usual). The accept policy callback enforces the
 * per-address limit (refused) and the connection limit: at the limit a new connection evicts the
 * oldest one that has not delivered its request (never served first, then idle keep-alive ones),
 * so that slow clients cannot lock valid ones out; it is refused only when every connection is
 * ACTIVE. libmicrohttpd's own hard limit is max_connections plus slack for the evicted ones not
 * closed yet. The per-address limit is ours rather than MHD_OPTION_PER_IP_CONNECTION_LIMIT so that
 * its refusals are counted; it is off by default (behind a proxy every client has one address).
 *
 * Bodies: libmicrohttpd hands the body to the access handler in pieces; a route's body is
 * collected into one buffer of at most max_body bytes. A declared Content-Length above max_body
 * gets 413 before any of the body is read; a chunked body that grows past max_body is discarded
 * as it arrives (never buffered) and answered 413 at its end, or the connection is closed when
 * the client keeps sending far beyond the limit.
 */

#define HTTP_MAX_ROUTES      16
#define HTTP_MAX_PREFIX      128
#define HTTP_CONN_TIMEOUT_S  10    /* idle seconds before a connection is closed */
#define HTTP_FD_RESERVE      256   /* descriptors left to the rest of the process */
#define HTTP_REAP_MIN_MS     10    /* the reaper's period: a tenth of the shorter deadline, */
#define HTTP_REAP_MAX_MS     200   /* within these bounds */
#define HTTP_DRAIN_MS        10000 /* longest wait for requests in flight at stop */
#define HTTP_DRAIN_FRESH_MS  2000  /* longest wait at stop for an accepted connection's request */
#define HTTP_CONN_MEMORY     (32 * 1024) /* request line + headers + read buffer per connection */
#define HTTP_DISCARD_SLACK   (1u << 20) /* bytes of an oversized chunked body read before closing */
#define HTTP_READY_REASON    256
#define HTTP_MAX_TOKEN       SPW_HTTP_MAX_TOKEN
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_CONTENT_TYPE    "text/plain; charset=utf-8"

struct route {
    char prefix[HTTP_MAX_PREFIX];
    size_t prefix_len;
    spw_http_handler_fn fn;
    void *opaque;
};

struct spw_http {
    struct MHD_Daemon *daemon;
    spw_metrics_t *metrics; /* borrowed */
    size_t max_body;
    uint16_t port;

    /* Slots [0, n_routes) are immutable once published by the release store of n_routes. */
    struct route routes[HTTP_MAX_ROUTES];
    _Atomic size_t n_routes;

    /* Bearer token required on role routes (not on /metrics, /healthz, /readyz); empty: none.
     * Set before traffic arrives, read without a lock. */
    char token[HTTP_MAX_TOKEN + 1];
    size_t token_len;

    pthread_mutex_t ready_lock; /* guards ready_reason */
    _Atomic bool ready;
    char ready_reason[HTTP_READY_REASON];

    _Atomic size_t in_flight; /* requests begun and not completed (spw_http_stop drains them) */
    /* Connections accepted whose first request has not begun (its bytes may still be on the way):
     * spw_http_stop waits for them too, so that a connection accepted is never cut off unserved. */
    _Atomic size_t fresh;

    struct spw_http_limits limits;
    spw_counter_t *m_refused, *m_timed_out, *m_evicted; /* NULL without a registry */
    spw_counter_t *m_rejected; /* requests answered 4xx by this layer (404, 405, 401, 413) */
    _Atomic uint64_t n_refused, n_timed_out, n_evicted;

    pthread_mutex_t conn_lock;      /* guards the connection list and every struct connection */
    struct connection *head, *tail; /* accept order: head is the oldest */
    size_t n_open;                  /* on the list */
    size_t n_closing;               /* on the list with closing set */

    pthread_t reaper;
    pthread_mutex_t reaper_lock; /* with reaper_cond: the reaper's sleep and stop */
    pthread_cond_t reaper_cond;
    bool reaper_stop;
    bool reaper_started;
};

enum phase {
    PHASE_HEADERS, /* waiting for a request's headers */
    PHASE_BODY,    /* headers in, body not complete */
    PHASE_ACTIVE,  /* the request is complete: handled or being answered */
};

/* Per-connection state (MHD's socket_context), from MHD_CONNECTION_NOTIFY_STARTED to _CLOSED, on
 * http's connection list. Fields below `requested` are guarded by http->conn_lock (the reaper and
 * other pool threads read them); requested only by the connection's own thread. */
struct connection {
    bool requested; /* a request has begun on it: no longer counted in fresh */
    struct connection *prev, *next;
    MHD_socket fd;
    struct sockaddr_storage addr; /* the client's address (per-address limit) */
    socklen_t addr_len;
    enum phase phase;
    uint64_t phase_ms; /* spw_time_mono_ms when phase began */
    bool served;       /* a request completed on it */
    bool closing;      /* shut down by the reaper or an eviction, not yet closed */
};

enum target {
    TARGET_METRICS,
    TARGET_HEALTHZ,
    TARGET_READYZ,
    TARGET_ROUTE,
};

/* Per-request state (MHD's con_cls), freed by on_completed. */
struct request {
    enum target target;
    const struct route *route;
    bool responded; /* a response is queued; ignore whatever still arrives */
    bool too_big;   /* the body passed max_body: discarding the rest */
    size_t discarded;
    char *body;
    size_t len;
    size_t cap;
};

/* ---- connection bookkeeping (issue 17: slow and hostile clients) ---------------------------- */

static void count(spw_counter_t *c, _Atomic uint64_t *n)
{
    atomic_fetch_add(n, 1);
    if (c)
        spw_counter_inc(c);
}

static bool same_address(const struct sockaddr *a, socklen_t alen, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return false;
    if (a->sa_family == AF_INET && alen >= (socklen_t)sizeof(struct sockaddr_in))
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6 && alen >= (socklen_t)sizeof(struct sockaddr_in6))
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return false;
}

/* Closes c from outside its thread: shutdown(2) wakes libmicrohttpd with end-of-file and it closes
 * the connection (and its descriptor, after NOTIFY_CLOSED takes c off the list under conn_lock,
 * so fd is still c's here). */
static void close_locked(struct spw_http *http, struct connection *c)
{
    c->closing = true;
    http->n_closing++;
    shutdown(c->fd, SHUT_RDWR);
}

/* The connection to evict for a new one: the oldest that has not delivered a request (HEADERS
 * never served, or BODY), else the oldest idle keep-alive one; NULL when all are ACTIVE. */
static struct connection *victim_locked(struct spw_http *http, const struct sockaddr *addr,
                                        socklen_t addr_len)
{
    struct connection *idle = NULL;
    for (struct connection *c = http->head; c; c = c->next) {
        if (c->closing || c->phase == PHASE_ACTIVE)
            continue;
        if (addr && !same_address(addr, addr_len, &c->addr))
            continue;
        if (c->phase == PHASE_BODY || !c->served)
            return c;
        if (!idle)
            idle = c;
    }
    return idle;
}

/* libmicrohttpd's accept policy: the per-address limit refuses, the connection limit evicts. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addr_len)
{
    struct spw_http *http = cls;
    enum MHD_Result ok = MHD_YES;
    pthread_mutex_lock(&http->conn_lock);
    if (http->limits.per_ip_connections > 0 && addr) {
        size_t same = 0;
        for (struct connection *c = http->head; c; c = c->next)
            if (!c->closing && same_address(addr, addr_len, &c->addr))
                same++;
        if (same >= http->limits.per_ip_connections)
            ok = MHD_NO;
    }
    if (ok == MHD_YES && http->n_open - http->n_closing >= http->limits.max_connections) {
        struct connection *v = victim_locked(http, NULL, 0);
        if (v) {
            count(http->m_evicted, &http->n_evicted); /* before the client can see the close */
            close_locked(http, v);
        } else {
            ok = MHD_NO;
        }
    }
    pthread_mutex_unlock(&http->conn_lock);
    if (ok == MHD_NO) {
        count(http->m_refused, &http->n_refused);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 10000, "http: connection refused",
                            "reason=%s max_connections=%zu per_ip_connections=%zu",
                            http->limits.per_ip_connections ? "limit or per-address limit"
                                                            : "limit, every connection busy",
                            http->limits.max_connections, http->limits.per_ip_connections);
    }
    return ok;
}

static void set_phase(struct spw_http *http, struct connection *c, enum phase phase)
{
    if (!c)
        return;
    pthread_mutex_lock(&http->conn_lock);
    c->phase = phase;
    c->phase_ms = spw_time_mono_ms();
    pthread_mutex_unlock(&http->conn_lock);
}

static struct connection *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct spw_http *http = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        /* NULL: the connection is neither waited for nor bounded by our deadlines (out of memory
         * only; libmicrohttpd's idle timeout still closes it) */
        struct connection *c = calloc(1, sizeof(*c));
        *socket_context = c;
        if (!c)
            return;
        atomic_fetch_add(&http->fresh, 1);
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ca =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        c->fd = fd ? fd->connect_fd : MHD_INVALID_SOCKET;
        if (ca && ca->client_addr) {
            c->addr_len = ca->client_addr->sa_family == AF_INET6
                              ? (socklen_t)sizeof(struct sockaddr_in6)
                              : (socklen_t)sizeof(struct sockaddr_in);
            memcpy(&c->addr, ca->client_addr, c->addr_len);
        }
        c->phase = PHASE_HEADERS;
        c->phase_ms = spw_time_mono_ms();
        pthread_mutex_lock(&http->conn_lock);
        c->prev = http->tail;
        if (http->tail)
            http->tail->next = c;
        else
            http->head = c;
        http->tail = c;
        http->n_open++;
        pthread_mutex_unlock(&http->conn_lock);
        return;
    }
    struct connection *c = *socket_context;
    if (!c)
        return;
    if (!c->requested)
        atomic_fetch_sub(&http->fresh, 1);
    pthread_mutex_lock(&http->conn_lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        http->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        http->tail = c->prev;
    http->n_open--;
    if (c->closing)
        http->n_closing--;
    pthread_mutex_unlock(&http->conn_lock);
    free(c);
    *socket_context = NULL;
}

/* Closes the connections past their deadline, every period until spw_http_stop. */
static void *reaper_main(void *arg)
{
    struct spw_http *http = arg;
    uint64_t shorter = http->limits.header_timeout_ms < http->limits.body_timeout_ms
                           ? http->limits.header_timeout_ms
                           : http->limits.body_timeout_ms;
    uint64_t period = shorter / 10;
    if (period < HTTP_REAP_MIN_MS)
        period = HTTP_REAP_MIN_MS;
    if (period > HTTP_REAP_MAX_MS)
        period = HTTP_REAP_MAX_MS;
    pthread_mutex_lock(&http->reaper_lock);
    while (!http->reaper_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(period % 1000) * 1000000L;
        until.tv_sec += (time_t)(period / 1000) + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&http->reaper_cond, &http->reaper_lock, &until);
        if (http->reaper_stop)
            break;
        pthread_mutex_unlock(&http->reaper_lock);

        size_t headers = 0, bodies = 0;
        uint64_t now = spw_time_mono_ms();
        pthread_mutex_lock(&http->conn_lock);
        for (struct connection *c = http->head; c; c = c->next) {
            if (c->closing || c->phase == PHASE_ACTIVE)
                continue;
            uint64_t limit = c->phase == PHASE_BODY ? http->limits.body_timeout_ms
                                                    : http->limits.header_timeout_ms;
            if (now - c->phase_ms < limit)
                continue;
            count(http->m_timed_out, &http->n_timed_out); /* before the client sees the close */
            close_locked(http, c);
            if (c->phase == PHASE_BODY)
                bodies++;
            else
                headers++;
        }
        pthread_mutex_unlock(&http->conn_lock);
        if (headers + bodies > 0)
            SPW_LOG_RATELIMITED(SPW_LOG_INFO, 10000, "http: closed slow connections",
                                "headers_late=%zu body_late=%zu", headers, bodies);
        pthread_mutex_lock(&http->reaper_lock);
    }
    pthread_mutex_unlock(&http->reaper_lock);
    return NULL;
}

/* ---- responses ------------------------------------------------------------------------------- */

/* Queues status with body and content type. mode: PERSISTENT for static text, MUST_COPY for a
 * stack buffer, MUST_FREE to hand a malloc'd body over (freed here when that fails). */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *ctype,
                               char *body, size_t len, enum MHD_ResponseMemoryMode mode,
                               const char *allow)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype ? ctype : TEXT_CONTENT_TYPE);
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_text(struct spw_http *http, struct request *req,
                                    struct MHD_Connection *conn, unsigned status, const char *text,
                                    const char *allow)
{
    req->responded = true;
    if (http->m_rejected)
        spw_counter_inc(http->m_rejected);
    return respond(conn, status, TEXT_CONTENT_TYPE, (char *)text, strlen(text),
                   MHD_RESPMEM_PERSISTENT, allow);
}

static enum MHD_Result serve_metrics(struct spw_http *http, struct MHD_Connection *conn)
{
    size_t len = 0;
    char *body = NULL;
    if (http->metrics) {
        body = spw_metrics_render(http->metrics, &len);
        if (!body)
            return respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, TEXT_CONTENT_TYPE,
                           (char *)"out of memory\n", 14, MHD_RESPMEM_PERSISTENT, NULL);
    }
    if (!body) /* no registry: an empty exposition */
        return respond(conn, MHD_HTTP_OK, METRICS_CONTENT_TYPE, (char *)"", 0,
                       MHD_RESPMEM_PERSISTENT, NULL);
    return respond(conn, MHD_HTTP_OK, METRICS_CONTENT_TYPE, body, len, MHD_RESPMEM_MUST_FREE, NULL);
}

static enum MHD_Result serve_readyz(struct spw_http *http, struct MHD_Connection *conn)
{
    char text[HTTP_READY_REASON + 16];
    unsigned status;
    pthread_mutex_lock(&http->ready_lock);
    if (atomic_load(&http->ready)) {
        status = MHD_HTTP_OK;
        snprintf(text, sizeof(text), "ready\n");
    } else {
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        snprintf(text, sizeof(text), "%s\n",
                 http->ready_reason[0] ? http->ready_reason : "not ready");
    }
    pthread_mutex_unlock(&http->ready_lock);
    return respond(conn, status, TEXT_CONTENT_TYPE, text, strlen(text), MHD_RESPMEM_MUST_COPY,
                   NULL);
}

static enum MHD_Result serve_route(struct request *req, struct MHD_Connection *conn,
                                   const char *method, const char *url)
{
    struct spw_http_response resp = {0};
    const char *content_type =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    req->route->fn(req->route->opaque, method, url, content_type, req->len ? req->body : NULL,
                   req->len, &resp);
    int status = resp.status ? resp.status : MHD_HTTP_OK;
    if (status < 100 || status > 599) {
        SPW_LOG_RATELIMITED(SPW_LOG_ERROR, 10000, "http: handler returned an invalid status",
                            "path=%s status=%d", req->route->prefix, status);
        free(resp.body);
        return respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, TEXT_CONTENT_TYPE,
                       (char *)"internal error\n", 15, MHD_RESPMEM_PERSISTENT, NULL);
    }
    if (!resp.body || resp.body_len == 0) {
        free(resp.body); /* whether libmicrohttpd frees an empty MUST_FREE buffer is unclear */
        return respond(conn, (unsigned)status, resp.content_type, (char *)"", 0,
                       MHD_RESPMEM_PERSISTENT, NULL);
    }
    return respond(conn, (unsigned)status, resp.content_type, resp.body, resp.body_len,
                   MHD_RESPMEM_MUST_FREE, NULL);
}

/* ---- request handling ------------------------------------------------------------------------ */

/* The route with the longest prefix of path, or NULL. */
static const struct route *route_find(struct spw_http *http, const char *path)
{
    size_t n = atomic_load_explicit(&http->n_routes, memory_order_acquire);
    const struct route *best = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct route *r = &http->routes[i];
        if (strncmp(path, r->prefix, r->prefix_len) == 0 &&
            (!best || r->prefix_len > best->prefix_len))
            best = r;
    }
    return best;
}

/* Strict decimal parse of a Content-Length value; false when it is not one. */
static bool parse_length(const char *text, uint64_t *out)
{
    uint64_t v = 0;
    if (!text || !*text)
        return false;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

/* True when the request carries `Authorization: Bearer <token>` with the configured token. The
 * comparison takes the same time wherever the first difference is. */
static bool bearer_ok(const struct spw_http *http, struct MHD_Connection *conn)
{
    const char *auth =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    static const char scheme[] = "Bearer ";
    if (!auth || strncmp(auth, scheme, sizeof(scheme) - 1) != 0)
        return false;
    auth += sizeof(scheme) - 1;
    size_t len = strlen(auth);
    unsigned diff = len != http->token_len;
    for (size_t i = 0; i < http->token_len; i++)
        diff |= (unsigned)(unsigned char)http->token[i] ^ (unsigned char)(i < len ? auth[i] : 0);
    return diff == 0;
}

/* Decides what a new request gets; queues the answer at once for errors found from the headers. */
static enum MHD_Result on_headers(struct spw_http *http, struct request *req,
                                  struct MHD_Connection *conn, const char *url, const char *method)
{
    static const struct {
        const char *path;
        enum target target;
    } builtins[] = {
        {"/metrics", TARGET_METRICS},
        {"/healthz", TARGET_HEALTHZ},
        {"/readyz", TARGET_READYZ},
    };
    bool builtin = false;
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
        if (strcmp(url, builtins[i].path) == 0) {
            req->target = builtins[i].target;
            builtin = true;
            break;
        }
    }
    if (builtin) {
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
            return respond_text(http, req, conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                                "method not allowed\n", "GET, HEAD");
    } else {
        req->route = route_find(http, url);
        if (!req->route)
            return respond_text(http, req, conn, MHD_HTTP_NOT_FOUND, "not found\n", NULL);
        req->target = TARGET_ROUTE;
        if (http->token_len && !bearer_ok(http, conn))
            return respond_text(http, req, conn, MHD_HTTP_UNAUTHORIZED,
                                "missing or wrong bearer token\n", NULL);
    }

    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t declared;
    if (cl && parse_length(cl, &declared) && declared > http->max_body)
        return respond_text(http, req, conn, MHD_HTTP_CONTENT_TOO_LARGE, "body too large\n", NULL);
    return MHD_YES;
}

/* Takes one piece of the body: kept for routes while within max_body, else counted and dropped. */
static enum MHD_Result on_body(struct spw_http *http, struct request *req, const char *data,
                               size_t size)
{
    if (!req->too_big && size > http->max_body - req->len) {
        req->too_big = true;
        free(req->body);
        req->body = NULL;
        req->len = req->cap = 0;
    }
    if (req->too_big) {
        req->discarded += size;
        size_t slack = http->max_body > HTTP_DISCARD_SLACK ? http->max_body : HTTP_DISCARD_SLACK;
        return req->discarded > slack ? MHD_NO : MHD_YES;
    }
    if (req->target != TARGET_ROUTE) {
        req->len += size; /* built-ins ignore bodies; count them against the limit only */
        return MHD_YES;
    }
    if (req->len + size + 1 > req->cap) {
        size_t cap = req->cap ? req->cap : 1024;
        while (cap < req->len + size + 1)
            cap *= 2;
        if (cap > http->max_body + 1)
            cap = http->max_body + 1;
        char *body = realloc(req->body, cap);
        if (!body)
            return MHD_NO;
        req->body = body;
        req->cap = cap;
    }
    memcpy(req->body + req->len, data, size);
    req->len += size;
    req->body[req->len] = '\0'; /* handlers may treat a text body as a string */
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct spw_http *http = cls;
    struct request *req = *con_cls;
    (void)version;

    if (!req) {
        req = calloc(1, sizeof(*req));
        if (!req)
            return MHD_NO;
        *con_cls = req;
        atomic_fetch_add(&http->in_flight, 1);
        struct connection *c = conn_of(conn);
        if (c && !c->requested) {
            c->requested = true;
            atomic_fetch_sub(&http->fresh, 1);
        }
        set_phase(http, c, PHASE_BODY);
        return on_headers(http, req, conn, url, method);
    }
    if (*upload_data_size > 0) {
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        if (req->responded)
            return MHD_YES;
        return on_body(http, req, upload_data, size);
    }
    set_phase(http, conn_of(conn), PHASE_ACTIVE);
    if (req->responded)
        return MHD_YES;
    req->responded = true;
    if (req->too_big && http->m_rejected)
        spw_counter_inc(http->m_rejected);
    if (req->too_big)
        return respond(conn, MHD_HTTP_CONTENT_TOO_LARGE, TEXT_CONTENT_TYPE,
                       (char *)"body too large\n", 15, MHD_RESPMEM_PERSISTENT, NULL);
    switch (req->target) {
    case TARGET_METRICS:
        return serve_metrics(http, conn);
    case TARGET_HEALTHZ:
        return respond(conn, MHD_HTTP_OK, TEXT_CONTENT_TYPE, (char *)"ok\n", 3,
                       MHD_RESPMEM_PERSISTENT, NULL);
    case TARGET_READYZ:
        return serve_readyz(http, conn);
    case TARGET_ROUTE:
        return serve_route(req, conn, method, url);
    }
    return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct request *req = *con_cls;
    struct spw_http *http = cls;
    (void)toe;
    struct connection *c = conn_of(conn);
    if (c) { /* keep-alive: the next request's headers are due from now */
        pthread_mutex_lock(&http->conn_lock);
        c->phase = PHASE_HEADERS;
        c->phase_ms = spw_time_mono_ms();
        c->served = true;
        pthread_mutex_unlock(&http->conn_lock);
    }
    if (req) {
        free(req->body);
        free(req);
        *con_cls = NULL;
        atomic_fetch_sub(&http->in_flight, 1);
    }
}

/* libmicrohttpd's error log, routed to ours (rate-limited: clients can provoke it). */
__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char text[512];
    (void)cls;
    vsnprintf(text, sizeof(text), fmt, ap);
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    SPW_LOG_RATELIMITED(SPW_LOG_WARN, 10000, "http: libmicrohttpd", "detail=\"%s\"", text);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

void spw_http_limits_default(struct spw_http_limits *limits)
{
    *limits = (struct spw_http_limits){
        .max_connections = SPW_HTTP_DEFAULT_MAX_CONNECTIONS,
        .per_ip_connections = 0,
        .header_timeout_ms = SPW_HTTP_DEFAULT_HEADER_TIMEOUT_MS,
        .body_timeout_ms = SPW_HTTP_DEFAULT_BODY_TIMEOUT_MS,
        .threads = SPW_HTTP_DEFAULT_THREADS,
    };
}

/* Raises the soft open-file limit to the hard one (once per process, logged) and returns the soft
 * limit now in force (0: unknown). */
static uint64_t raise_fd_limit(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static bool raised;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    pthread_mutex_lock(&lock);
    if (!raised && rl.rlim_cur != rl.rlim_max) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            SPW_INFO("http: raised the open-file limit", "soft=%llu was=%llu",
                     (unsigned long long)rl.rlim_cur, (unsigned long long)old);
        else
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    raised = true;
    pthread_mutex_unlock(&lock);
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

spw_http_t *spw_http_start(const char *addr, uint16_t port, spw_metrics_t *metrics, size_t max_body,
                           char *errstr, size_t errstr_size)
{
    return spw_http_start_limits(addr, port, metrics, max_body, NULL, errstr, errstr_size);
}

spw_http_t *spw_http_start_limits(const char *addr, uint16_t port, spw_metrics_t *metrics,
                                  size_t max_body, const struct spw_http_limits *limits,
                                  char *errstr, size_t errstr_size)
{
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    struct sockaddr *sa;
    /* MHD_USE_ITC: MHD_quiesce_daemon (the drain at stop) needs it with internal threads */
    unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;

    memset(&sin, 0, sizeof(sin));
    memset(&sin6, 0, sizeof(sin6));
    if (inet_pton(AF_INET, addr, &sin.sin_addr) == 1) {
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        sa = (struct sockaddr *)&sin;
    } else if (inet_pton(AF_INET6, addr, &sin6.sin6_addr) == 1) {
        sin6.sin6_family = AF_INET6;
        sin6.sin6_port = htons(port);
        sa = (struct sockaddr *)&sin6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(errstr, errstr_size, "http: invalid listen address \"%s\"", addr);
        return NULL;
    }

    struct spw_http *http = calloc(1, sizeof(*http));
    if (!http) {
        snprintf(errstr, errstr_size, "http: out of memory");
        return NULL;
    }
    http->metrics = metrics;
    http->max_body = max_body;
    if (limits)
        http->limits = *limits;
    else
        spw_http_limits_default(&http->limits);
    struct spw_http_limits *lim = &http->limits;
    assert(lim->max_connections > 0 && lim->threads > 0 && lim->header_timeout_ms > 0 &&
           lim->body_timeout_ms > 0);
    atomic_init(&http->n_routes, 0);
    atomic_init(&http->ready, false);
    if (metrics) {
        spw_metrics_add_process(metrics); /* process_* and sparrow_build_info on every /metrics */
        http->m_refused = spw_metrics_counter_new(
            metrics, "sparrow_http_connections_refused_total",
            "HTTP connections refused at accept: the per-address limit, or the connection limit "
            "with every connection busy with a request.",
            NULL);
        http->m_timed_out = spw_metrics_counter_new(
            metrics, "sparrow_http_connections_timed_out_total",
            "HTTP connections closed for not delivering a request's headers within "
            "http.header_timeout or its body within http.body_timeout.",
            NULL);
        http->m_evicted = spw_metrics_counter_new(
            metrics, "sparrow_http_connections_evicted_total",
            "HTTP connections closed at the connection limit to make room for a new one (the "
            "oldest that had not delivered a request).",
            NULL);
        http->m_rejected = spw_metrics_counter_new(
            metrics, "sparrow_http_rejected_requests_total",
            "HTTP requests refused by the endpoint itself: unknown path (404), wrong method (405), "
            "missing token (401), body too large (413). Malformed HTTP that libmicrohttpd "
            "answers (400) is not counted here.",
            NULL);
    }

    /* Descriptors: raise the soft limit, then make the connection limit fit in it. */
    size_t slack = lim->max_connections / 8 + 32; /* evicted connections not closed yet */
    uint64_t nofile = raise_fd_limit();
    if (nofile && nofile != UINT64_MAX &&
        (uint64_t)lim->max_connections + slack + HTTP_FD_RESERVE > nofile) {
        size_t fit = nofile > HTTP_FD_RESERVE * 2 ? (size_t)(nofile - HTTP_FD_RESERVE) * 8 / 9 : 16;
        SPW_WARN("http: connection limit lowered to fit the open-file limit",
                 "max_connections=%zu lowered_to=%zu nofile=%llu", lim->max_connections, fit,
                 (unsigned long long)nofile);
        lim->max_connections = fit;
        slack = fit / 8 + 32;
    }

    if (pthread_mutex_init(&http->ready_lock, NULL) != 0) {
        snprintf(errstr, errstr_size, "http: cannot create a mutex");
        goto out_free_http;
    }
    if (pthread_mutex_init(&http->conn_lock, NULL) != 0) {
        snprintf(errstr, errstr_size, "http: cannot create a mutex");
        goto out_destroy_lock;
    }
    if (pthread_mutex_init(&http->reaper_lock, NULL) != 0) {
        snprintf(errstr, errstr_size, "http: cannot create a mutex");
        goto out_destroy_conn_lock;
    }
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    int cerr = pthread_cond_init(&http->reaper_cond, &cattr);
    pthread_condattr_destroy(&cattr);
    if (cerr != 0) {
        snprintf(errstr, errstr_size, "http: cannot create a condition variable");
        goto out_destroy_reaper_lock;
    }

    errno = 0;
    /* clang-format off */
    http->daemon = MHD_start_daemon(
        flags, port, on_accept, http, on_request, http,
        /* first, so that every message of the daemon goes through it */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, http,
        MHD_OPTION_SOCK_ADDR, sa,
        /* RFC 7230 strictness: e.g. HTTP/1.1 without Host gets 400 */
        MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)lim->threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)(lim->max_connections + slack),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTP_CONN_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, http,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, http,
        MHD_OPTION_END);
    /* clang-format on */
    if (!http->daemon) {
        int err = errno;
        snprintf(errstr, errstr_size, "http: cannot listen on %s:%u: %s", addr, (unsigned)port,
                 err ? strerror(err) : "libmicrohttpd failed to start");
        goto out_destroy_cond;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
    http->port = info && info->port ? info->port : port;
    if (pthread_create(&http->reaper, NULL, reaper_main, http) != 0) {
        snprintf(errstr, errstr_size, "http: cannot start the reaper thread");
        MHD_stop_daemon(http->daemon);
        goto out_destroy_cond;
    }
    http->reaper_started = true;
    return http;

out_destroy_cond:
    pthread_cond_destroy(&http->reaper_cond);
out_destroy_reaper_lock:
    pthread_mutex_destroy(&http->reaper_lock);
out_destroy_conn_lock:
    pthread_mutex_destroy(&http->conn_lock);
out_destroy_lock:
    pthread_mutex_destroy(&http->ready_lock);
out_free_http:
    free(http);
    return NULL;
}

void spw_http_limits_from_config(const struct spw_config *cfg, const char *role,
                                 struct spw_http_limits *limits)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.http.max_connections", role);
    limits->max_connections = (size_t)spw_config_int(cfg, key);
    snprintf(key, sizeof(key), "%s.http.per_ip_connections", role);
    limits->per_ip_connections = (size_t)spw_config_int(cfg, key);
    snprintf(key, sizeof(key), "%s.http.header_timeout", role);
    limits->header_timeout_ms = (uint32_t)spw_config_duration_ms(cfg, key);
    snprintf(key, sizeof(key), "%s.http.body_timeout", role);
    limits->body_timeout_ms = (uint32_t)spw_config_duration_ms(cfg, key);
    snprintf(key, sizeof(key), "%s.http.threads", role);
    limits->threads = (unsigned)spw_config_int(cfg, key);
}

spw_err_t spw_http_start_from_config(const struct spw_config *cfg, const char *role,
                                     spw_metrics_t *metrics, size_t max_body, spw_http_t **out,
                                     char *errstr, size_t errstr_size)
{
    char key[128];
    *out = NULL;
    snprintf(key, sizeof(key), "%s.http.port", role);
    int64_t port = spw_config_int(cfg, key);
    if (port < 0)
        return SPW_OK;
    struct spw_http_limits limits;
    spw_http_limits_from_config(cfg, role, &limits);
    snprintf(key, sizeof(key), "%s.http.addr", role);
    *out = spw_http_start_limits(spw_config_str(cfg, key), (uint16_t)port, metrics, max_body,
                                 &limits, errstr, errstr_size);
    if (!*out)
        return SPW_ERR_IO;
    SPW_INFO("http endpoint",
             "port=%u max_connections=%zu per_ip_connections=%zu header_timeout_ms=%u "
             "body_timeout_ms=%u threads=%u",
             (unsigned)spw_http_port(*out), (*out)->limits.max_connections,
             limits.per_ip_connections, (unsigned)limits.header_timeout_ms,
             (unsigned)limits.body_timeout_ms, limits.threads);
    return SPW_OK;
}

/* Safe against requests being served (a slot is filled before n_routes publishes it), not against
 * another spw_http_route_add running at the same time. */
spw_err_t spw_http_route_add(spw_http_t *http, const char *prefix, spw_http_handler_fn fn,
                             void *opaque)
{
    size_t len = strlen(prefix);
    if (len == 0 || len >= HTTP_MAX_PREFIX || prefix[0] != '/' || !fn)
        return SPW_ERR_INVALID;
    size_t n = atomic_load_explicit(&http->n_routes, memory_order_relaxed);
    if (n >= HTTP_MAX_ROUTES)
        return SPW_ERR_TOO_BIG;
    struct route *r = &http->routes[n];
    memcpy(r->prefix, prefix, len + 1);
    r->prefix_len = len;
    r->fn = fn;
    r->opaque = opaque;
    atomic_store_explicit(&http->n_routes, n + 1, memory_order_release);
    return SPW_OK;
}

spw_err_t spw_http_set_bearer_token(spw_http_t *http, const char *token)
{
    size_t len = token ? strlen(token) : 0;
    if (len > HTTP_MAX_TOKEN)
        return SPW_ERR_TOO_BIG;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)token[i] <= ' ' || token[i] == 0x7f)
            return SPW_ERR_INVALID;
    memcpy(http->token, token ? token : "", len);
    http->token[len] = '\0';
    http->token_len = len;
    return SPW_OK;
}

void spw_http_set_ready(spw_http_t *http, bool ready, const char *reason)
{
    pthread_mutex_lock(&http->ready_lock);
    snprintf(http->ready_reason, sizeof(http->ready_reason), "%s", reason ? reason : "");
    atomic_store(&http->ready, ready);
    pthread_mutex_unlock(&http->ready_lock);
}

uint16_t spw_http_port(const spw_http_t *http)
{
    return http->port;
}

size_t spw_http_connections(const spw_http_t *http)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
}

void spw_http_stats(const spw_http_t *http, struct spw_http_stats *out)
{
    out->refused = atomic_load(&http->n_refused);
    out->timed_out = atomic_load(&http->n_timed_out);
    out->evicted = atomic_load(&http->n_evicted);
}

void spw_http_stop(spw_http_t *http)
{
    if (!http)
        return;
    /* Drain: refuse new connections, let the requests already begun finish (up to
     * HTTP_DRAIN_MS) and the connections accepted send theirs (up to HTTP_DRAIN_FRESH_MS), then
     * stop, which closes idle keep-alive connections. */
    MHD_socket listen_fd = MHD_quiesce_daemon(http->daemon);
    /* Refuse new connections now; close the descriptor only after MHD_stop_daemon, since
     * MHD's worker may still be taking it out of its epoll set (a TSan run caught the race). */
    if (listen_fd != MHD_INVALID_SOCKET)
        shutdown(listen_fd, SHUT_RDWR);
    uint64_t start = spw_time_mono_ms();
    for (;;) {
        uint64_t waited = spw_time_mono_ms() - start;
        bool requests = atomic_load(&http->in_flight) > 0;
        bool fresh = atomic_load(&http->fresh) > 0 && waited < HTTP_DRAIN_FRESH_MS;
        if ((!requests && !fresh) || waited >= HTTP_DRAIN_MS)
            break;
        spw_time_sleep_ms(10);
    }
    if (atomic_load(&http->in_flight) > 0)
        SPW_WARN("http stop: requests still in flight after the drain", "requests=%zu",
                 atomic_load(&http->in_flight));
    pthread_mutex_lock(&http->reaper_lock);
    http->reaper_stop = true;
    pthread_cond_signal(&http->reaper_cond);
    pthread_mutex_unlock(&http->reaper_lock);
    pthread_join(http->reaper, NULL);
    MHD_stop_daemon(http->daemon); /* NOTIFY_CLOSED takes conn_lock: destroyed after */
    if (listen_fd != MHD_INVALID_SOCKET)
        close(listen_fd);
    pthread_cond_destroy(&http->reaper_cond);
    pthread_mutex_destroy(&http->reaper_lock);
    pthread_mutex_destroy(&http->conn_lock);
    pthread_mutex_destroy(&http->ready_lock);
    free(http);
}
