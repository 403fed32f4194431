/* The HTTP endpoint every role starts: /metrics, /healthz, /readyz, plus routes a role adds. */
#ifndef SPARROW_HTTP_H
#define SPARROW_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"
#include "sparrow/metrics.h"

typedef struct spw_http spw_http_t;

/* A response a route handler fills. body is malloc'd and freed by the endpoint after sending. */
struct spw_http_response {
    int status;               /* HTTP status; 200 when left 0 */
    const char *content_type; /* static string; "text/plain; charset=utf-8" when NULL */
    char *body;               /* malloc'd; NULL for an empty body */
    size_t body_len;
};

/* A route handler: method ("GET", "POST"), path (without query), the request's Content-Type
 * header as sent (NULL when absent; borrowed for the call), request body (NULL when empty; at
 * most the configured maximum), and the response to fill. Called from libmicrohttpd's internal
 * threads: it must be thread-safe. */
typedef void (*spw_http_handler_fn)(void *opaque, const char *method, const char *path,
                                    const char *content_type, const char *body, size_t body_len,
                                    struct spw_http_response *resp);

/* Starts an HTTP server on addr:port (addr "0.0.0.0" or "127.0.0.1"; port 0 picks a free port,
 * see spw_http_port) serving /metrics from metrics (borrowed; must outlive the endpoint; the
 * process collector is added to it, spw_metrics_add_process),
 * /healthz (200 while the process runs) and /readyz (200 once spw_http_set_ready(true)).
 * Bodies above max_body bytes get 413. Limits on slow clients: spw_http_limits_default (see
 * spw_http_start_limits). Returns NULL and fills errstr on failure. */
spw_http_t *spw_http_start(const char *addr, uint16_t port, spw_metrics_t *metrics, size_t max_body,
                           char *errstr, size_t errstr_size);

/* Bounds on what clients can hold (issue 17). A connection has header_timeout_ms, from its accept
 * or the end of its previous request, to deliver a request's headers, and body_timeout_ms from
 * then to deliver the body; past either it is closed (timed out). At max_connections a new
 * connection evicts the oldest one that has not delivered a request (never served, then idle
 * keep-alive ones) and is refused only when every connection is busy with a request.
 * per_ip_connections (0: off) refuses a client address beyond that many connections; leave it 0
 * behind a proxy or load balancer, whose connections share one address. threads: libmicrohttpd's
 * epoll thread pool, on which the route handlers run. Every field > 0 except per_ip_connections
 * (asserted). The open-file limit is raised to its hard limit at start, and max_connections
 * lowered (logged) when it does not fit in it. */
struct spw_http_limits {
    size_t max_connections;
    size_t per_ip_connections;
    uint32_t header_timeout_ms;
    uint32_t body_timeout_ms;
    unsigned threads;
};

#define SPW_HTTP_DEFAULT_MAX_CONNECTIONS   1024
#define SPW_HTTP_DEFAULT_HEADER_TIMEOUT_MS 10000
#define SPW_HTTP_DEFAULT_BODY_TIMEOUT_MS   30000
#define SPW_HTTP_DEFAULT_THREADS           4

/* Fills limits with the defaults above (per_ip_connections 0). */
void spw_http_limits_default(struct spw_http_limits *limits);

/* spw_http_start with explicit limits (copied); NULL: the defaults. */
spw_http_t *spw_http_start_limits(const char *addr, uint16_t port, spw_metrics_t *metrics,
                                  size_t max_body, const struct spw_http_limits *limits,
                                  char *errstr, size_t errstr_size);

/* Connections refused, timed out and evicted since start (also in /metrics as
 * sparrow_http_connections_{refused,timed_out,evicted}_total when there is a registry). */
struct spw_http_stats {
    uint64_t refused;
    uint64_t timed_out;
    uint64_t evicted;
};

/* Fills out. Thread-safe. */
void spw_http_stats(const spw_http_t *http, struct spw_http_stats *out);

struct spw_config;

/* Fills limits from cfg's ROLE.http.max_connections, per_ip_connections, header_timeout,
 * body_timeout and threads (SPW_CONFIG_PROPS_HTTP; asserted present). */
void spw_http_limits_from_config(const struct spw_config *cfg, const char *role,
                                 struct spw_http_limits *limits);

/* Starts role's endpoint from cfg's ROLE.http.* rows (SPW_CONFIG_PROPS_HTTP: addr, port and the
 * limits) as spw_http_start_limits does, and logs its port and limits. *out is NULL when the port
 * is -1 (no endpoint). SPW_ERR_IO with errstr when it cannot listen. */
spw_err_t spw_http_start_from_config(const struct spw_config *cfg, const char *role,
                                     spw_metrics_t *metrics, size_t max_body, spw_http_t **out,
                                     char *errstr, size_t errstr_size);

/* Adds a route: requests whose path starts with prefix go to fn. Call before traffic arrives
 * (routes are read without a lock). At most 16 routes. */
spw_err_t spw_http_route_add(spw_http_t *http, const char *prefix, spw_http_handler_fn fn,
                             void *opaque);

/* Longest bearer token accepted. */
#define SPW_HTTP_MAX_TOKEN 512

/* Requires `Authorization: Bearer <token>` on every role route (the built-in /metrics, /healthz
 * and /readyz stay open for probes and scrapers); others get 401. token is copied; NULL or "" turns
 * the check off. SPW_ERR_TOO_BIG above SPW_HTTP_MAX_TOKEN, SPW_ERR_INVALID for whitespace or
 * control characters. Call before traffic arrives (read without a lock). */
spw_err_t spw_http_set_bearer_token(spw_http_t *http, const char *token);

/* Sets readiness (and an optional reason shown by /readyz when not ready). Thread-safe. */
void spw_http_set_ready(spw_http_t *http, bool ready, const char *reason);

/* The bound port (useful after port 0). */
uint16_t spw_http_port(const spw_http_t *http);

/* Connections open now (accepted and not yet closed). Thread-safe. */
size_t spw_http_connections(const spw_http_t *http);

/* Stops the server and frees it: stops accepting connections, waits (up to 10 s) for the
 * requests already begun to be answered and (up to 2 s) for the connections already accepted to
 * send their first request, then closes every connection. NULL is a no-op. Not from a handler. */
void spw_http_stop(spw_http_t *http);

#endif
