/* trainer: the PS client's configuration: property rows, conf defaults and reading, the shard
 * list and CURVE key files. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "sparrow/log.h"

const struct spw_config_prop spw_ps_client_config_props[] = {SPW_PS_CLIENT_CONFIG_PROPS};
const size_t spw_ps_client_config_n_props =
    sizeof(spw_ps_client_config_props) / sizeof(spw_ps_client_config_props[0]);

void spw_ps_client_conf_default(struct spw_ps_client_conf *conf)
{
    memset(conf, 0, sizeof(*conf));
    conf->first_seq = 1;
    conf->push_window = 16;
    conf->push_timeout_ms = 2000;
    conf->pull_timeout_ms = 2000;
    conf->max_frame = 32u << 20;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

spw_err_t spw_psc__split_shards(const char *text, uint32_t *count,
                                spw_err_t (*fn)(void *opaque, uint32_t i, const char *s,
                                                size_t len),
                                void *opaque, char *errstr, size_t errstr_size)
{
    uint32_t n = 0;
    const char *p = text ? text : "";
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *s = p, *e = end;
        while (s < e && is_blank(*s))
            s++;
        while (e > s && is_blank(e[-1]))
            e--;
        size_t len = (size_t)(e - s);
        if (len == 0) {
            snprintf(errstr, errstr_size, "trainer.shards: empty endpoint at position %u", n);
            return SPW_ERR_INVALID;
        }
        const char *sep = memmem(s, len, "://", 3);
        if (!sep || sep == s || (size_t)(sep - s) + 3 == len || len > 1024) {
            snprintf(errstr, errstr_size,
                     "trainer.shards: \"%.*s\" is not an endpoint like tcp://host:port",
                     (int)(len > 200 ? 200 : len), s);
            return SPW_ERR_INVALID;
        }
        if (n == SPW_PS_CLIENT_MAX_SHARDS) {
            snprintf(errstr, errstr_size, "trainer.shards: more than %u shards",
                     SPW_PS_CLIENT_MAX_SHARDS);
            return SPW_ERR_INVALID;
        }
        if (fn) {
            spw_err_t err = fn(opaque, n, s, len);
            if (err) {
                snprintf(errstr, errstr_size, "out of memory");
                return err;
            }
        }
        n++;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *count = n;
    return SPW_OK;
}

spw_err_t spw_ps_client_conf_from_config(const spw_config_t *cfg, struct spw_ps_client_conf *conf,
                                         char *errstr, size_t errstr_size)
{
    const char *shards = spw_config_str(cfg, "trainer.shards");
    uint32_t n = 0;
    spw_err_t err = spw_psc__split_shards(shards, &n, NULL, NULL, errstr, errstr_size);
    if (err)
        return err;
    const char *server = spw_config_str(cfg, "trainer.curve.server_key_file");
    const char *client = spw_config_str(cfg, "trainer.curve.client_key_file");
    bool has_server = server && server[0], has_client = client && client[0];
    if (has_server != has_client) {
        snprintf(errstr, errstr_size,
                 "trainer.curve.server_key_file and trainer.curve.client_key_file go together");
        return SPW_ERR_INVALID;
    }
    conf->shards = shards;
    conf->push_window = (uint32_t)spw_config_int(cfg, "trainer.push.window");
    conf->push_timeout_ms = (uint32_t)spw_config_duration_ms(cfg, "trainer.push.timeout");
    conf->pull_timeout_ms = (uint32_t)spw_config_duration_ms(cfg, "trainer.pull.timeout");
    conf->max_frame = (size_t)spw_config_int(cfg, "trainer.ps.max_frame");
    conf->curve_server_key_file = has_server ? server : NULL;
    conf->curve_client_key_file = has_client ? client : NULL;
    return SPW_OK;
}
