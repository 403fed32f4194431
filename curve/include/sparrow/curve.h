/* CurveZMQ on a ZeroMQ socket, set up one way for every link (trainer and coordinator to shards,
 * trainer to coordinator): a client's keys from key files, a server's secret key with a ZAP
 * allow-list of client keys, and key pairs for `sparrow curve-keygen`. */
#ifndef SPARROW_CURVE_H
#define SPARROW_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/curve_key.h"
#include "sparrow/err.h"

/*
 * Conventions: pointers are non-NULL unless said otherwise; sockets are libzmq sockets (void *).
 * Key files are read with common's reader (sparrow/curve_key.h) and decoded here, where ZeroMQ is
 * linked. Every error text starts with the property the file came from and names the path
 * ("trainer.curve.server_key_file: /etc/k: No such file or directory"), so that a role can print
 * it as it is and exit non-zero at start. Secret keys are wiped from memory once set on a socket
 * or on failure.
 */

/* ---- clients ---- */

/* A CURVE client's keys, as Z85 text. Plain data: copy it, wipe it with spw_curve_client_wipe. */
struct spw_curve_client_keys {
    bool enabled;                           /* false: plaintext, apply does nothing */
    char server[SPW_CURVE_KEY_LEN + 1];     /* the server's public key */
    char public_key[SPW_CURVE_KEY_LEN + 1]; /* this client's, derived from secret */
    char secret[SPW_CURVE_KEY_LEN + 1];     /* this client's secret key */
};

/* Loads a client's keys: the server's public key from server_file, this client's secret key from
 * client_file (its public key derived from it). Both NULL or "": *keys is disabled (plaintext),
 * SPW_OK. One without the other: SPW_ERR_INVALID ("<server_prop> and <client_prop> go
 * together"). A file that cannot be read: SPW_ERR_NOT_FOUND; one without a valid Z85 key:
 * SPW_ERR_INVALID; errstr names the property and the path. *keys is wiped on failure. */
spw_err_t spw_curve_client_load(struct spw_curve_client_keys *keys, const char *server_prop,
                                const char *server_file, const char *client_prop,
                                const char *client_file, char *errstr, size_t errstr_size);

/* Sets ZMQ_CURVE_SERVERKEY, _PUBLICKEY and _SECRETKEY on sock (before it connects); nothing when
 * keys is disabled. SPW_ERR_RPC with errstr when libzmq refuses (built without CURVE). */
spw_err_t spw_curve_client_apply(const struct spw_curve_client_keys *keys, void *sock, char *errstr,
                                 size_t errstr_size);

/* Overwrites every key with zeros (enabled false). */
void spw_curve_client_wipe(struct spw_curve_client_keys *keys);

/* ---- servers ---- */

/* A CURVE server: its secret key and the ZAP handler of one ZeroMQ context (RFC 27), which
 * accepts a CURVE client whose public key is on the allow-list and refuses (400) any other,
 * counting, logging (rate-limited, with the refused key) each refusal. Owned by the thread that
 * polls its ZAP socket; that thread calls spw_curve_server_handle when it is readable. */
typedef struct spw_curve_server spw_curve_server_t;
struct spw_counter;

#define SPW_CURVE_MAX_ALLOWED 4096 /* keys an allow-list may hold */

struct spw_curve_server_conf {
    const char
        *secret_prop; /* property names for error texts, e.g. "pserver.curve.secret_key_file" */
    const char *secret_file;     /* the server's secret key */
    const char *allowed_prop;    /* e.g. "pserver.curve.allowed_clients_file" */
    const char *allowed_file;    /* client public keys, one per line; required */
    const char *what;            /* the server in log lines: "shard", "coordinator" */
    struct spw_counter *refused; /* borrowed, may be NULL: incremented per refused client */
};

/* Loads the secret key and the allow-list and binds the ZAP handler in zctx (one per context:
 * a second one fails). NULL with errstr: a file that cannot be read or holds no valid key (the
 * property and path named), an allow-list that is empty or holds more than SPW_CURVE_MAX_ALLOWED
 * keys, a ZAP endpoint already bound. Destroy it before zmq_ctx_term(zctx). */
spw_curve_server_t *spw_curve_server_new(void *zctx, const struct spw_curve_server_conf *conf,
                                         char *errstr, size_t errstr_size);

/* Makes sock (a ROUTER, before it binds) a CURVE server under the ZAP handler's domain.
 * SPW_ERR_RPC with errstr. */
spw_err_t spw_curve_server_apply(spw_curve_server_t *cs, void *sock, char *errstr,
                                 size_t errstr_size);

/* The ZAP socket, to poll for ZMQ_POLLIN. Owned by cs. */
void *spw_curve_server_zap_socket(const spw_curve_server_t *cs);

/* Answers every ZAP request waiting (without blocking): 200 for a listed CURVE key, 400 else. */
void spw_curve_server_handle(spw_curve_server_t *cs);

/* The server's public key (Z85, owned by cs), the keys allowed, and the clients refused. */
const char *spw_curve_server_public_key(const spw_curve_server_t *cs);
size_t spw_curve_server_allowed(const spw_curve_server_t *cs);
uint64_t spw_curve_server_refused(const spw_curve_server_t *cs);

/* Closes the ZAP socket, wipes the secret key, frees. NULL is a no-op. */
void spw_curve_server_destroy(spw_curve_server_t *cs);

/* ---- key pairs ---- */

/* A new key pair as Z85 text. SPW_ERR_INVALID when libzmq has no CURVE. */
spw_err_t spw_curve_keypair(char public_out[SPW_CURVE_KEY_LEN + 1],
                            char secret_out[SPW_CURVE_KEY_LEN + 1]);

/* Writes a new key pair: <prefix>.secret (the secret key, a bare Z85 line, mode 0600, created
 * exclusively: an existing file is not overwritten) and <prefix>.public (the public key, 0644).
 * public_out (may be NULL) receives the public key. SPW_ERR_IO with errstr. */
spw_err_t spw_curve_keygen_files(const char *prefix, char public_out[SPW_CURVE_KEY_LEN + 1],
                                 char *errstr, size_t errstr_size);

#endif
