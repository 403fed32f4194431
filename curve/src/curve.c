/* CurveZMQ socket setup (sparrow/curve.h): client keys, the server's key and ZAP allow-list, and
 * key pairs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "sparrow/curve.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_DOMAIN   "sparrow"
#define ZAP_FRAMES   7 /* version, request id, domain, address, identity, mechanism, key */

struct spw_curve_server {
    void *zap;
    uint8_t secret[32];
    char public_key[SPW_CURVE_KEY_LEN + 1];
    uint8_t (*allowed)[32];
    size_t n_allowed;
    uint64_t refused;
    const char *what;
    struct spw_counter *refused_counter;
};

/* Reads the key of path (secret or public) and checks that it decodes; errstr "<prop>: <why>". */
static spw_err_t read_key(const char *prop, const char *path, bool secret,
                          char out[SPW_CURVE_KEY_LEN + 1], char *errstr, size_t errstr_size)
{
    char why[512];
    spw_err_t rc = spw_curve_key_read(path, secret, out, why, sizeof(why));
    if (rc != SPW_OK) {
        snprintf(errstr, errstr_size, "%s: %s", prop, why);
        return rc;
    }
    uint8_t bin[32];
    bool ok = zmq_z85_decode(bin, out) != NULL;
    memset(bin, 0, sizeof(bin));
    if (!ok) {
        memset(out, 0, SPW_CURVE_KEY_LEN + 1);
        snprintf(errstr, errstr_size, "%s: %s: no 40-character Z85 %s key", prop, path,
                 secret ? "secret" : "public");
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}

static bool set(const char *s)
{
    return s && s[0];
}

/* ---- clients ---- */

spw_err_t spw_curve_client_load(struct spw_curve_client_keys *keys, const char *server_prop,
                                const char *server_file, const char *client_prop,
                                const char *client_file, char *errstr, size_t errstr_size)
{
    spw_curve_client_wipe(keys);
    if (!set(server_file) && !set(client_file))
        return SPW_OK;
    if (set(server_file) != set(client_file)) {
        snprintf(errstr, errstr_size, "%s and %s go together", server_prop, client_prop);
        return SPW_ERR_INVALID;
    }
    spw_err_t rc = read_key(server_prop, server_file, false, keys->server, errstr, errstr_size);
    if (rc == SPW_OK)
        rc = read_key(client_prop, client_file, true, keys->secret, errstr, errstr_size);
    if (rc == SPW_OK && zmq_curve_public(keys->public_key, keys->secret) != 0) {
        snprintf(errstr, errstr_size, "%s: %s: cannot derive the public key: %s", client_prop,
                 client_file, zmq_strerror(zmq_errno()));
        rc = SPW_ERR_INVALID;
    }
    if (rc != SPW_OK) {
        spw_curve_client_wipe(keys);
        return rc;
    }
    keys->enabled = true;
    return SPW_OK;
}

spw_err_t spw_curve_client_apply(const struct spw_curve_client_keys *keys, void *sock, char *errstr,
                                 size_t errstr_size)
{
    if (!keys->enabled)
        return SPW_OK;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, keys->server, SPW_CURVE_KEY_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, keys->public_key, SPW_CURVE_KEY_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys->secret, SPW_CURVE_KEY_LEN) != 0) {
        snprintf(errstr, errstr_size, "CURVE client keys: %s", zmq_strerror(zmq_errno()));
        return SPW_ERR_RPC;
    }
    return SPW_OK;
}

void spw_curve_client_wipe(struct spw_curve_client_keys *keys)
{
    /* volatile: the stores must not be dropped as dead before a free or a return */
    volatile char *p = (volatile char *)keys;
    for (size_t i = 0; i < sizeof(*keys); i++)
        p[i] = 0;
}

/* ---- servers ---- */

struct allowed_ctx {
    spw_curve_server_t *cs;
    const char *prop, *path;
    bool failed; /* add_allowed wrote errstr (with the property) */
};

static spw_err_t add_allowed(void *opaque, const char *key, int lineno, char *errstr,
                             size_t errstr_size)
{
    struct allowed_ctx *ctx = opaque;
    spw_curve_server_t *cs = ctx->cs;
    ctx->failed = true;
    if (cs->n_allowed == SPW_CURVE_MAX_ALLOWED) {
        snprintf(errstr, errstr_size, "%s: %s: more than %d keys", ctx->prop, ctx->path,
                 SPW_CURVE_MAX_ALLOWED);
        return SPW_ERR_TOO_BIG;
    }
    if (!zmq_z85_decode(cs->allowed[cs->n_allowed], key)) {
        snprintf(errstr, errstr_size, "%s: %s:%d: not a 40-character Z85 public key", ctx->prop,
                 ctx->path, lineno);
        return SPW_ERR_INVALID;
    }
    cs->n_allowed++;
    ctx->failed = false;
    return SPW_OK;
}

static spw_err_t load_allowed(spw_curve_server_t *cs, const char *prop, const char *path,
                              char *errstr, size_t errstr_size)
{
    cs->allowed = calloc(SPW_CURVE_MAX_ALLOWED, 32);
    if (!cs->allowed) {
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    struct allowed_ctx ctx = {cs, prop, path, false};
    char why[512] = "";
    spw_err_t rc = spw_curve_keys_foreach(path, add_allowed, &ctx, why, sizeof(why));
    if (rc != SPW_OK && ctx.failed)
        snprintf(errstr, errstr_size, "%s", why);
    else if (rc != SPW_OK) /* the reader's own texts name the path but not the property */
        snprintf(errstr, errstr_size, "%s: %s", prop, why);
    if (rc == SPW_OK && cs->n_allowed == 0) {
        /* an empty list would refuse every client: a mistake, not a configuration */
        snprintf(errstr, errstr_size, "%s: %s: no client key", prop, path);
        rc = SPW_ERR_INVALID;
    }
    return rc;
}

spw_curve_server_t *spw_curve_server_new(void *zctx, const struct spw_curve_server_conf *conf,
                                         char *errstr, size_t errstr_size)
{
    spw_curve_server_t *cs = calloc(1, sizeof(*cs));
    if (!cs) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    cs->what = conf->what ? conf->what : "server";
    cs->refused_counter = conf->refused;
    if (!set(conf->allowed_file)) {
        snprintf(errstr, errstr_size, "%s is required with %s", conf->allowed_prop,
                 conf->secret_prop);
        goto out_destroy;
    }
    char z85[SPW_CURVE_KEY_LEN + 1];
    if (read_key(conf->secret_prop, conf->secret_file, true, z85, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    zmq_z85_decode(cs->secret, z85);
    int rc = zmq_curve_public(cs->public_key, z85);
    memset(z85, 0, sizeof(z85));
    if (rc != 0) {
        snprintf(errstr, errstr_size, "%s: %s: cannot derive the public key: %s", conf->secret_prop,
                 conf->secret_file, zmq_strerror(zmq_errno()));
        goto out_destroy;
    }
    if (load_allowed(cs, conf->allowed_prop, conf->allowed_file, errstr, errstr_size) != SPW_OK)
        goto out_destroy;
    cs->zap = zmq_socket(zctx, ZMQ_REP);
    int linger = 0;
    if (!cs->zap || zmq_setsockopt(cs->zap, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_bind(cs->zap, ZAP_ENDPOINT) != 0) {
        snprintf(errstr, errstr_size, "ZAP handler: %s", zmq_strerror(zmq_errno()));
        goto out_destroy;
    }
    return cs;

out_destroy:
    spw_curve_server_destroy(cs);
    return NULL;
}

spw_err_t spw_curve_server_apply(spw_curve_server_t *cs, void *sock, char *errstr,
                                 size_t errstr_size)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, ZAP_DOMAIN, strlen(ZAP_DOMAIN)) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, cs->secret, sizeof(cs->secret)) != 0) {
        snprintf(errstr, errstr_size, "CURVE server: %s", zmq_strerror(zmq_errno()));
        return SPW_ERR_RPC;
    }
    return SPW_OK;
}

void *spw_curve_server_zap_socket(const spw_curve_server_t *cs)
{
    return cs->zap;
}

/* Answers one ZAP request, false when none was waiting. */
static bool handle_one(spw_curve_server_t *cs)
{
    zmq_msg_t f[ZAP_FRAMES];
    int n = 0;
    bool more = true, got = false;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_init(&tmp);
        if (zmq_msg_recv(&tmp, cs->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&tmp);
            break;
        }
        got = true;
        more = zmq_msg_more(&tmp);
        if (n < ZAP_FRAMES) {
            zmq_msg_init(&f[n]);
            zmq_msg_move(&f[n], &tmp);
            n++;
        }
        zmq_msg_close(&tmp);
    }
    if (n < 6) { /* not a ZAP request; a REP socket must still answer something */
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
        if (got)
            zmq_send(cs->zap, "", 0, 0);
        return got;
    }
    bool curve = n == ZAP_FRAMES && zmq_msg_size(&f[5]) == 5 &&
                 memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 && zmq_msg_size(&f[6]) == 32;
    bool ok = false;
    for (size_t i = 0; curve && i < cs->n_allowed && !ok; i++)
        ok = memcmp(cs->allowed[i], zmq_msg_data(&f[6]), 32) == 0;
    if (!ok) {
        cs->refused++;
        if (cs->refused_counter)
            spw_counter_inc(cs->refused_counter);
        char key[SPW_CURVE_KEY_LEN + 1] = "none";
        if (curve)
            zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
        size_t alen = zmq_msg_size(&f[3]) > 64 ? 64 : zmq_msg_size(&f[3]);
        SPW_LOG_RATELIMITED(SPW_LOG_WARN, 5000, "client refused by ZAP",
                            "server=%s address=%.*s client_public_key=%s refused=%llu", cs->what,
                            (int)alen, (const char *)zmq_msg_data(&f[3]), key,
                            (unsigned long long)cs->refused);
    }
    /* version, request id, status code, status text, user id, metadata */
    const char *text = ok ? "OK" : "client key not allowed";
    zmq_send(cs->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(cs->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    zmq_send(cs->zap, ok ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(cs->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(cs->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(cs->zap, "", 0, 0);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
    return true;
}

void spw_curve_server_handle(spw_curve_server_t *cs)
{
    for (int i = 0; i < 256 && handle_one(cs); i++) /* bounded: the caller's loop goes on */
        ;
}

const char *spw_curve_server_public_key(const spw_curve_server_t *cs)
{
    return cs->public_key;
}

size_t spw_curve_server_allowed(const spw_curve_server_t *cs)
{
    return cs->n_allowed;
}

uint64_t spw_curve_server_refused(const spw_curve_server_t *cs)
{
    return cs->refused;
}

void spw_curve_server_destroy(spw_curve_server_t *cs)
{
    if (!cs)
        return;
    if (cs->zap)
        zmq_close(cs->zap);
    volatile uint8_t *p = cs->secret;
    for (size_t i = 0; i < sizeof(cs->secret); i++)
        p[i] = 0;
    free(cs->allowed);
    free(cs);
}

/* ---- key pairs ---- */

spw_err_t spw_curve_keypair(char public_out[SPW_CURVE_KEY_LEN + 1],
                            char secret_out[SPW_CURVE_KEY_LEN + 1])
{
    return zmq_curve_keypair(public_out, secret_out) == 0 ? SPW_OK : SPW_ERR_INVALID;
}

static spw_err_t write_key(const char *path, const char *key, int flags, mode_t mode, char *errstr,
                           size_t errstr_size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode);
    if (fd < 0) {
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
        return SPW_ERR_IO;
    }
    char line[SPW_CURVE_KEY_LEN + 2];
    memcpy(line, key, SPW_CURVE_KEY_LEN);
    line[SPW_CURVE_KEY_LEN] = '\n';
    ssize_t w = write(fd, line, sizeof(line) - 1);
    memset(line, 0, sizeof(line));
    int err = w == (ssize_t)(sizeof(line) - 1) ? 0 : (w < 0 ? errno : EIO);
    if (fsync(fd) != 0 && !err)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    if (err) {
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(err));
        return SPW_ERR_IO;
    }
    return SPW_OK;
}

spw_err_t spw_curve_keygen_files(const char *prefix, char public_out[SPW_CURVE_KEY_LEN + 1],
                                 char *errstr, size_t errstr_size)
{
    char pub[SPW_CURVE_KEY_LEN + 1], sec[SPW_CURVE_KEY_LEN + 1];
    if (spw_curve_keypair(pub, sec) != SPW_OK) {
        snprintf(errstr, errstr_size, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
        return SPW_ERR_INVALID;
    }
    size_t len = strlen(prefix) + sizeof(".secret");
    char *path = malloc(len);
    if (!path) {
        memset(sec, 0, sizeof(sec));
        snprintf(errstr, errstr_size, "out of memory");
        return SPW_ERR_NOMEM;
    }
    snprintf(path, len, "%s.secret", prefix);
    spw_err_t rc = write_key(path, sec, O_EXCL, 0600, errstr, errstr_size);
    memset(sec, 0, sizeof(sec));
    if (rc == SPW_OK) {
        snprintf(path, len, "%s.public", prefix);
        rc = write_key(path, pub, O_TRUNC, 0644, errstr, errstr_size);
    }
    free(path);
    if (rc == SPW_OK && public_out)
        memcpy(public_out, pub, sizeof(pub));
    return rc;
}
