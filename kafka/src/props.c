/* `kafka.*` properties: an ordered key/value list handed to rd_kafka_conf_set unchanged, and
 * librdkafka's log routed through ours. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kafka_int.h"
#include "sparrow/log.h"

#define PROPS_MAX 1024 /* more properties than librdkafka has: a runaway config */

struct spw_kafka_props {
    char **keys;
    char **values;
    size_t n, cap;
};

spw_kafka_props_t *spw_kafka_props_new(void)
{
    return calloc(1, sizeof(spw_kafka_props_t));
}

void spw_kafka_props_destroy(spw_kafka_props_t *props)
{
    if (!props)
        return;
    for (size_t i = 0; i < props->n; i++) {
        free(props->keys[i]);
        free(props->values[i]);
    }
    free(props->keys);
    free(props->values);
    free(props);
}

spw_err_t spw_kafka_props_set(spw_kafka_props_t *props, const char *key, const char *value)
{
    char *v = strdup(value);
    if (!v)
        return SPW_ERR_NOMEM;
    for (size_t i = 0; i < props->n; i++) {
        if (strcmp(props->keys[i], key) == 0) {
            free(props->values[i]);
            props->values[i] = v;
            return SPW_OK;
        }
    }
    if (props->n == PROPS_MAX)
        goto out_free_v;
    if (props->n == props->cap) {
        size_t cap = props->cap ? props->cap * 2 : 16;
        char **keys = realloc(props->keys, cap * sizeof(*keys));
        if (!keys)
            goto out_free_v;
        props->keys = keys;
        char **values = realloc(props->values, cap * sizeof(*values));
        if (!values)
            goto out_free_v;
        props->values = values;
        props->cap = cap;
    }
    char *k = strdup(key);
    if (!k)
        goto out_free_v;
    props->keys[props->n] = k;
    props->values[props->n] = v;
    props->n++;
    return SPW_OK;

out_free_v:
    free(v);
    return SPW_ERR_NOMEM;
}

const char *spw_kafka_props_get(const spw_kafka_props_t *props, const char *key)
{
    for (size_t i = 0; i < props->n; i++)
        if (strcmp(props->keys[i], key) == 0)
            return props->values[i];
    return NULL;
}

spw_err_t spw_kafka_props_validate(const spw_kafka_props_t *props, char *errstr, size_t errstr_size)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    spw_err_t err = spw_kafka__conf_apply(conf, props, errstr, errstr_size);
    rd_kafka_conf_destroy(conf);
    return err;
}

spw_err_t spw_kafka__conf_apply(rd_kafka_conf_t *conf, const spw_kafka_props_t *props, char *errstr,
                                size_t errstr_size)
{
    if (!props)
        return SPW_OK;
    for (size_t i = 0; i < props->n; i++) {
        char why[256];
        if (rd_kafka_conf_set(conf, props->keys[i], props->values[i], why, sizeof(why)) !=
            RD_KAFKA_CONF_OK) {
            snprintf(errstr, errstr_size, "kafka.%s: %s", props->keys[i], why);
            return SPW_ERR_INVALID;
        }
    }
    return SPW_OK;
}

spw_err_t spw_kafka__conf_force(rd_kafka_conf_t *conf, const char *key, const char *value,
                                char *errstr, size_t errstr_size)
{
    char why[256];
    if (rd_kafka_conf_set(conf, key, value, why, sizeof(why)) != RD_KAFKA_CONF_OK) {
        snprintf(errstr, errstr_size, "%s=%s: %s", key, value, why);
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}

/* syslog levels 0..7 -> ours; librdkafka logs from its own threads, which spw_log_write allows. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    enum spw_log_level ours = level <= 3   ? SPW_LOG_ERROR
                              : level == 4 ? SPW_LOG_WARN
                              : level <= 6 ? SPW_LOG_INFO
                                           : SPW_LOG_DEBUG;
    SPW_LOG(ours, "librdkafka", "client=%s fac=%s msg=\"%s\"", rd_kafka_name(rk), fac, buf);
}

void spw_kafka__conf_route_log(rd_kafka_conf_t *conf)
{
    rd_kafka_conf_set_log_cb(conf, log_cb);
}
