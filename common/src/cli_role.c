/* The start every role's main shares: configuration from argv and the environment, --help,
 * --dump-config, logging and signal handlers. */
#include <stdio.h>

#include "sparrow/config.h"
#include "sparrow/http.h"
#include "sparrow/metrics.h"
#include "sparrow/log.h"
#include "sparrow/signal.h"

extern char **environ;

spw_config_t *spw_cli_role_init(const char *role, const struct spw_config_prop *props,
                                size_t n_props, const struct spw_cli_alias *aliases,
                                size_t n_aliases, int argc, char **argv, void (*usage)(FILE *out),
                                int *exit_code)
{
    char errstr[1024];
    spw_config_t *cfg = spw_config_new(props, n_props, errstr, sizeof(errstr));
    if (!cfg) {
        fprintf(stderr, "sparrow %s: %s\n", role, errstr);
        *exit_code = 1;
        return NULL;
    }
    struct spw_cli_result res = {0};
    if (spw_cli_load(cfg, argc, argv, aliases, n_aliases, environ, &res, errstr, sizeof(errstr)) !=
        SPW_OK) {
        fprintf(stderr, "sparrow %s: %s\n(sparrow %s --help lists the options)\n", role, errstr,
                role);
        *exit_code = 2;
        goto out_destroy_cfg;
    }
    if (res.help || res.dump_config) {
        if (res.help)
            usage(stdout);
        else
            spw_config_dump(cfg, stdout);
        *exit_code = 0;
        goto out_destroy_cfg;
    }
    enum spw_log_level level = SPW_LOG_INFO;
    const char *text = spw_config_str(cfg, "log.level");
    if (text)
        spw_log_level_parse(text, &level);
    spw_log_init(role, level);
    spw_signal_install();
    return cfg;

out_destroy_cfg:
    spw_config_destroy(cfg);
    return NULL;
}

int spw_cli_role_main(const struct spw_cli_role *role, void *conf, int argc, char **argv)
{
    char errstr[1024];
    int rc = 1;
    spw_config_t *cfg = spw_cli_role_init(role->name, role->props, role->n_props, role->aliases,
                                          role->n_aliases, argc, argv, role->usage, &rc);
    if (!cfg)
        return rc;
    if (role->conf_from_config(cfg, conf, errstr, sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("invalid configuration", "error=\"%s\"", errstr);
        rc = 2;
        goto out_destroy_cfg;
    }
    spw_metrics_t *metrics = spw_metrics_new();
    if (!metrics) {
        SPW_ERROR("out of memory", NULL);
        goto out_destroy_cfg;
    }
    spw_http_t *http = NULL;
    if (spw_http_start_from_config(cfg, role->name, metrics, role->http_max_body, &http, errstr,
                                   sizeof(errstr)) != SPW_OK) {
        SPW_ERROR("http endpoint failed", "error=\"%s\"", errstr);
        goto out_destroy_metrics;
    }
    rc = role->run(conf, metrics, http);
    spw_http_stop(http);
out_destroy_metrics:
    spw_metrics_destroy(metrics);
out_destroy_cfg:
    spw_config_destroy(cfg);
    return rc;
}
