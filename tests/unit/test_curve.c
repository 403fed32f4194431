/* Unit tests of the shared CurveZMQ setup (sparrow/curve.h): client keys from files, the server's
 * key and ZAP allow-list (a listed key gets through, an unlisted or plaintext client does not and
 * is counted), the errors that name property and path, key pairs written to files. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "sparrow/curve.h"
#include "sparrow/fs.h"
#include "sparrow/metrics.h"
#include "sparrow/time.h"

struct env {
    char dir[64];
    char server_pub[41], server_sec[41], good_pub[41], good_sec[41], bad_pub[41], bad_sec[41];
    char server_pub_file[128], server_sec_file[128], good_file[128], bad_file[128];
    char allowed_file[128];
};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/spw-test-curve-%ld", (long)getpid());
    assert_int_equal(spw_fs_mkdir_p(e->dir), SPW_OK);
    assert_int_equal(spw_curve_keypair(e->server_pub, e->server_sec), SPW_OK);
    assert_int_equal(spw_curve_keypair(e->good_pub, e->good_sec), SPW_OK);
    assert_int_equal(spw_curve_keypair(e->bad_pub, e->bad_sec), SPW_OK);
    snprintf(e->server_pub_file, sizeof(e->server_pub_file), "%s/server.public", e->dir);
    snprintf(e->server_sec_file, sizeof(e->server_sec_file), "%s/server.secret", e->dir);
    snprintf(e->good_file, sizeof(e->good_file), "%s/good.secret", e->dir);
    snprintf(e->bad_file, sizeof(e->bad_file), "%s/bad.secret", e->dir);
    snprintf(e->allowed_file, sizeof(e->allowed_file), "%s/allowed", e->dir);
    char text[256];
    snprintf(text, sizeof(text), "%s\n", e->server_pub);
    write_file(e->server_pub_file, text);
    snprintf(text, sizeof(text), "%s\n", e->server_sec);
    write_file(e->server_sec_file, text);
    chmod(e->server_sec_file, 0600);
    /* a zcert client certificate: both keys, the secret one picked */
    snprintf(text, sizeof(text), "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
             e->good_pub, e->good_sec);
    write_file(e->good_file, text);
    chmod(e->good_file, 0600);
    snprintf(text, sizeof(text), "%s\n", e->bad_sec);
    write_file(e->bad_file, text);
    chmod(e->bad_file, 0600);
    snprintf(text, sizeof(text), "# the trainers\n%s\n", e->good_pub);
    write_file(e->allowed_file, text);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    spw_fs_remove_tree(e->dir);
    free(e);
    return 0;
}

/* ---- clients ---- */

static void test_curve_client_load(void **state)
{
    struct env *e = *state;
    struct spw_curve_client_keys k;
    char err[512] = "";
    assert_int_equal(spw_curve_client_load(&k, "a.server", e->server_pub_file, "a.client",
                                           e->good_file, err, sizeof(err)),
                     SPW_OK);
    assert_true(k.enabled);
    assert_string_equal(k.server, e->server_pub);
    assert_string_equal(k.secret, e->good_sec);
    assert_string_equal(k.public_key, e->good_pub); /* derived from the secret key */
    spw_curve_client_wipe(&k);
    assert_false(k.enabled);
    assert_int_equal(k.secret[0], 0);

    /* neither file: plaintext, and apply does nothing */
    assert_int_equal(spw_curve_client_load(&k, "a.server", "", "a.client", NULL, err, sizeof(err)),
                     SPW_OK);
    assert_false(k.enabled);
    assert_int_equal(spw_curve_client_apply(&k, NULL, err, sizeof(err)), SPW_OK);
}

static void test_curve_client_load_errors(void **state)
{
    struct env *e = *state;
    struct spw_curve_client_keys k;
    char err[512] = "";
    /* one without the other */
    assert_int_equal(
        spw_curve_client_load(&k, "a.server", e->server_pub_file, "a.client", "", err, sizeof(err)),
        SPW_ERR_INVALID);
    assert_non_null(strstr(err, "a.server and a.client go together"));
    /* a missing file: the property and the path */
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/nope", e->dir);
    assert_int_equal(
        spw_curve_client_load(&k, "a.server", missing, "a.client", e->good_file, err, sizeof(err)),
        SPW_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "a.server: "));
    assert_non_null(strstr(err, missing));
    assert_false(k.enabled);
    /* a file without a key, on the client side */
    char junk[160];
    snprintf(junk, sizeof(junk), "%s/junk", e->dir);
    write_file(junk, "not a key\n");
    assert_int_equal(spw_curve_client_load(&k, "a.server", e->server_pub_file, "a.client", junk,
                                           err, sizeof(err)),
                     SPW_ERR_INVALID);
    assert_non_null(strstr(err, "a.client: "));
    assert_non_null(strstr(err, junk));
    assert_int_equal(k.secret[0], 0);
    /* 40 characters outside Z85 */
    write_file(junk, "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n");
    assert_int_equal(
        spw_curve_client_load(&k, "a.server", junk, "a.client", e->good_file, err, sizeof(err)),
        SPW_ERR_INVALID);
    assert_non_null(strstr(err, "a.server: "));
}

/* ---- servers ---- */

static struct spw_curve_server_conf server_conf(const struct env *e, spw_counter_t *refused)
{
    return (struct spw_curve_server_conf){.secret_prop = "x.curve.secret_key_file",
                                          .secret_file = e->server_sec_file,
                                          .allowed_prop = "x.curve.allowed_clients_file",
                                          .allowed_file = e->allowed_file,
                                          .what = "test",
                                          .refused = refused};
}

static void test_curve_server_errors(void **state)
{
    struct env *e = *state;
    void *ctx = zmq_ctx_new();
    char err[512] = "", path[160];
    struct spw_curve_server_conf c = server_conf(e, NULL);
    c.allowed_file = "";
    assert_null(spw_curve_server_new(ctx, &c, err, sizeof(err)));
    assert_non_null(strstr(err, "x.curve.allowed_clients_file is required"));

    c = server_conf(e, NULL);
    snprintf(path, sizeof(path), "%s/nope", e->dir);
    c.secret_file = path;
    assert_null(spw_curve_server_new(ctx, &c, err, sizeof(err)));
    assert_non_null(strstr(err, "x.curve.secret_key_file: "));
    assert_non_null(strstr(err, path));

    c = server_conf(e, NULL);
    c.allowed_file = path;
    assert_null(spw_curve_server_new(ctx, &c, err, sizeof(err)));
    assert_non_null(strstr(err, "x.curve.allowed_clients_file: "));
    assert_non_null(strstr(err, path));

    /* a bad line: path and line number */
    snprintf(path, sizeof(path), "%s/allowed-bad", e->dir);
    char text[128];
    snprintf(text, sizeof(text), "%s\nnot a key\n", e->good_pub);
    write_file(path, text);
    c.allowed_file = path;
    assert_null(spw_curve_server_new(ctx, &c, err, sizeof(err)));
    assert_non_null(strstr(err, "x.curve.allowed_clients_file: "));
    assert_non_null(strstr(err, ":2"));
    /* an empty list refuses everyone: an error, not a configuration */
    write_file(path, "# nobody\n");
    assert_null(spw_curve_server_new(ctx, &c, err, sizeof(err)));
    assert_non_null(strstr(err, "no client key"));

    /* one ZAP handler per context */
    c = server_conf(e, NULL);
    spw_curve_server_t *cs = spw_curve_server_new(ctx, &c, err, sizeof(err));
    assert_non_null(cs);
    assert_string_equal(spw_curve_server_public_key(cs), e->server_pub);
    assert_int_equal(spw_curve_server_allowed(cs), 1);
    assert_null(spw_curve_server_new(ctx, &c, err, sizeof(err)));
    assert_non_null(strstr(err, "ZAP"));
    spw_curve_server_destroy(cs);
    spw_curve_server_destroy(NULL);
    zmq_ctx_term(ctx);
}

/* A DEALER of its own context that sends "hello" to endpoint, with keys (NULL: plaintext). */
static void *client_send(void *cctx, const char *endpoint, const struct spw_curve_client_keys *k)
{
    void *s = zmq_socket(cctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    char err[256];
    if (k)
        assert_int_equal(spw_curve_client_apply(k, s, err, sizeof(err)), SPW_OK);
    assert_int_equal(zmq_connect(s, endpoint), 0);
    assert_int_equal(zmq_send(s, "hello", 5, ZMQ_DONTWAIT), 5);
    return s;
}

/* Serves the ROUTER and the ZAP handler for up to ms: true when "hello" arrived. */
static bool serve_for(spw_curve_server_t *cs, void *router, uint64_t ms)
{
    uint64_t end = spw_time_mono_ms() + ms;
    while (spw_time_mono_ms() < end) {
        zmq_pollitem_t items[2] = {{router, 0, ZMQ_POLLIN, 0},
                                   {spw_curve_server_zap_socket(cs), 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, 20) <= 0)
            continue;
        if (items[1].revents & ZMQ_POLLIN)
            spw_curve_server_handle(cs);
        if (items[0].revents & ZMQ_POLLIN) {
            char id[256], body[16];
            assert_true(zmq_recv(router, id, sizeof(id), 0) >= 0);
            int n = zmq_recv(router, body, sizeof(body), 0);
            return n == 5 && memcmp(body, "hello", 5) == 0;
        }
    }
    return false;
}

static void test_curve_server_allow_list(void **state)
{
    struct env *e = *state;
    spw_metrics_t *reg = spw_metrics_new();
    spw_counter_t *refused = spw_metrics_counter_new(reg, "refused_total", "Refused.", NULL);
    void *ctx = zmq_ctx_new(), *cctx = zmq_ctx_new();
    char err[512] = "";
    struct spw_curve_server_conf c = server_conf(e, refused);
    spw_curve_server_t *cs = spw_curve_server_new(ctx, &c, err, sizeof(err));
    assert_non_null(cs);
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger));
    assert_int_equal(spw_curve_server_apply(cs, router, err, sizeof(err)), SPW_OK);
    assert_int_equal(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
    char endpoint[128];
    size_t elen = sizeof(endpoint);
    assert_int_equal(zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &elen), 0);

    struct spw_curve_client_keys good, bad;
    assert_int_equal(
        spw_curve_client_load(&good, "s", e->server_pub_file, "c", e->good_file, err, sizeof(err)),
        SPW_OK);
    assert_int_equal(
        spw_curve_client_load(&bad, "s", e->server_pub_file, "c", e->bad_file, err, sizeof(err)),
        SPW_OK);

    /* an unlisted key: refused, counted, nothing delivered */
    void *s = client_send(cctx, endpoint, &bad);
    assert_false(serve_for(cs, router, 700));
    zmq_close(s);
    assert_true(spw_curve_server_refused(cs) >= 1);
    assert_int_equal(spw_counter_get(refused), spw_curve_server_refused(cs));
    uint64_t refused_before = spw_curve_server_refused(cs);

    /* plaintext: refused by the mechanism (never reaches ZAP), nothing delivered */
    s = client_send(cctx, endpoint, NULL);
    assert_false(serve_for(cs, router, 500));
    zmq_close(s);

    /* the listed key gets through, and is not counted */
    s = client_send(cctx, endpoint, &good);
    assert_true(serve_for(cs, router, 5000));
    zmq_close(s);
    assert_int_equal(spw_curve_server_refused(cs), refused_before);

    spw_curve_client_wipe(&good);
    spw_curve_client_wipe(&bad);
    zmq_close(router);
    spw_curve_server_destroy(cs);
    zmq_ctx_term(cctx);
    zmq_ctx_term(ctx);
    spw_metrics_destroy(reg);
}

/* ---- key pairs ---- */

static void test_curve_keygen_files(void **state)
{
    struct env *e = *state;
    char prefix[160], path[200], pub[41], err[512] = "";
    snprintf(prefix, sizeof(prefix), "%s/coordinator", e->dir);
    assert_int_equal(spw_curve_keygen_files(prefix, pub, err, sizeof(err)), SPW_OK);
    snprintf(path, sizeof(path), "%s.secret", prefix);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* the pair loads as a client key, and its public key is the one written */
    char pub_path[200];
    snprintf(pub_path, sizeof(pub_path), "%s.public", prefix);
    struct spw_curve_client_keys k;
    assert_int_equal(spw_curve_client_load(&k, "s", pub_path, "c", path, err, sizeof(err)), SPW_OK);
    assert_string_equal(k.public_key, pub);
    assert_string_equal(k.server, pub);
    spw_curve_client_wipe(&k);
    /* an existing secret key is never overwritten */
    assert_int_equal(spw_curve_keygen_files(prefix, NULL, err, sizeof(err)), SPW_ERR_IO);
    assert_non_null(strstr(err, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_curve_client_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_curve_client_load_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_curve_server_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_curve_server_allow_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_curve_keygen_files, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
