/* `sparrow trainer`: runs the worker loop (DESIGN.md §4) from a file or a Kafka group against
 * parameter-server shards until the input ends, trainer.max_examples, or SIGTERM. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "sparrow/coord_client.h"
#include "sparrow/config.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/sparrow.pb-c.h"
#include "sparrow/trainer.h"
#include "sparrow/trainer_loop.h"

static const struct spw_cli_alias aliases[] = {
    {"--in", "trainer.in"},
    {"--format", "trainer.format"},
    {"--shards", "trainer.shards"},
    {"--model", "trainer.model"},
    {"--latent-dim", "trainer.latent_dim"},
    {"--batch", "trainer.batch"},
    {"--acc-steps", "trainer.acc_steps"},
    {"--topk", "trainer.topk.ratio"},
    {"--backend", "trainer.backend"},
    {"--group", "trainer.group"},
    {"--id", "trainer.id"},
    {"--max-examples", "trainer.max_examples"},
    {"--http-port", "trainer.http.port"},
    {"--log-level", "log.level"},
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: sparrow trainer --in file:PATH|kafka://HOST:PORT/TOPIC [--format pb|json|criteo]\n"
        "                       [--shards tcp://H:P,...|inproc[:N]] [--model lr|fm]\n"
        "                       [--latent-dim K] [--batch B] [--acc-steps N] [--topk R]\n"
        "                       [--backend cpu|cuda|auto] [--group G] [--id I]\n"
        "                       [--max-examples N] [--http-port P] [--log-level L]\n"
        "                       [--config FILE] [--set key=value]... [--dump-config] [--help]\n\n"
        "Trains an LR or FM model on mini-batches of the input: pulls the rows of each batch's\n"
        "keys from the parameter-server shards (the next batch's pull overlaps the current\n"
        "compute), scores the batch before training on it (progressive validation, logged and\n"
        "in /metrics), pushes top-k compressed gradients asynchronously, and stores Kafka\n"
        "offsets once their pushes are acknowledged. SIGTERM finishes the batch, pushes every\n"
        "residual, waits for acknowledgements and exits 0. trainer.shards=inproc[:N] runs\n"
        "the shards inside this process (tests, benchmarks).\n\n"
        "properties:\n");
    spw_config_doc_help(spw_trainer_config_props, spw_trainer_config_n_props, out);
}

/* ---- the coordinator's side of the loop (trainer.coordinator set): DESIGN.md §5 ---- */

/* Partitions whose resume offset the glue remembers (positions not yet stored report it). */
#define COORD_MAX_PARTS 1024

struct coord_glue {
    spw_coord_client_t *client;
    spw_trainer_loop_t *loop;
    uint64_t clock;                  /* the last clock sent */
    uint64_t examples_base;          /* the loop's example count at the last restore */
    int64_t resume[COORD_MAX_PARTS]; /* offset a partition (re)started from; -1 unknown */
};

static spw_err_t coord_resume(void *opaque, const char *topic, int32_t partition, int64_t *offset,
                              uint32_t *skip)
{
    struct coord_glue *g = opaque;
    spw_err_t err = spw_coord_client_offset(g->client, topic, partition, offset, skip);
    if (partition >= 0 && partition < COORD_MAX_PARTS)
        g->resume[partition] = err == SPW_OK ? *offset : 0;
    return err;
}

/* Clocks `clock` and acts on the answers until the coordinator says proceed. */
static spw_err_t coord_clock(struct coord_glue *g, spw_trainer_loop_t *loop, uint64_t clock)
{
    g->clock = clock;
    for (;;) {
        struct spw_coord_event ev;
        spw_err_t err = spw_coord_client_clock(g->client, clock, &ev);
        if (err)
            return err;
        struct spw_trainer_loop_stats st;
        switch (ev.kind) {
        case SPW_COORD_EV_PROCEED:
            if (ev.drop_cache)
                spw_trainer_loop_drop_rows(loop);
            if (ev.commit && (err = spw_trainer_loop_commit(loop, false)) != SPW_OK)
                SPW_WARN("offset commit failed", "error=\"%s\"", spw_err_str(err));
            return SPW_OK;
        case SPW_COORD_EV_CHECKPOINT: {
            static struct spw_trainer_position pos[COORD_MAX_PARTS];
            static struct spw_coord_offset offs[COORD_MAX_PARTS];
            size_t n = 0;
            if ((err = spw_trainer_loop_checkpoint(loop, -1, pos, COORD_MAX_PARTS, &n)))
                return err;
            if (n > COORD_MAX_PARTS)
                n = COORD_MAX_PARTS;
            const char *topic = spw_trainer_loop_topic(loop);
            for (size_t i = 0; i < n; i++) {
                snprintf(offs[i].topic, sizeof(offs[i].topic), "%s", topic ? topic : "");
                offs[i].partition = pos[i].partition;
                offs[i].offset = pos[i].offset;
                offs[i].skip = pos[i].skip;
                if (pos[i].offset < 0) { /* nothing stored yet: where it (re)started */
                    int32_t p = pos[i].partition;
                    offs[i].offset =
                        p >= 0 && p < COORD_MAX_PARTS && g->resume[p] >= 0 ? g->resume[p] : 0;
                    offs[i].skip = 0;
                }
            }
            spw_trainer_loop_get_stats(loop, &st);
            if ((err = spw_coord_client_checkpoint_report(g->client, ev.epoch, offs, n,
                                                          st.examples - g->examples_base)))
                return err;
            SPW_INFO("checkpoint reported", "epoch=%" PRIu64 " partitions=%zu examples=%" PRIu64,
                     ev.epoch, n, st.examples - g->examples_base);
            break;
        }
        case SPW_COORD_EV_RESTORE:
            if ((err = spw_trainer_loop_restore(loop, coord_resume, g)))
                return err;
            spw_trainer_loop_get_stats(loop, &st);
            g->examples_base = st.examples;
            if ((err = spw_coord_client_restore_report(g->client, ev.generation)))
                return err;
            SPW_INFO("restored", "generation=%" PRIu64 " epoch=%" PRIu64, ev.generation, ev.epoch);
            break;
        }
    }
}

static spw_err_t coord_after_step(void *opaque, spw_trainer_loop_t *loop,
                                  const struct spw_trainer_step_info *info)
{
    return coord_clock(opaque, loop, info->step + 1);
}

static spw_err_t coord_idle(void *opaque, spw_trainer_loop_t *loop)
{
    struct coord_glue *g = opaque;
    return coord_clock(g, loop, g->clock);
}

static void coord_on_assign(void *opaque, struct spw_trainer_position *parts, size_t n)
{
    struct coord_glue *g = opaque;
    const char *topic = g->loop ? spw_trainer_loop_topic(g->loop) : NULL;
    for (size_t i = 0; topic && i < n; i++) {
        int64_t offset;
        uint32_t skip;
        if (coord_resume(g, topic, parts[i].partition, &offset, &skip) == SPW_OK) {
            parts[i].offset = offset;
            parts[i].skip = skip;
        }
    }
    spw_err_t err = spw_coord_client_rejoin(g->client);
    if (err)
        SPW_WARN("rejoin failed", "error=\"%s\"", spw_err_str(err));
}

static spw_coord_client_t *coord_connect(const char *endpoint, uint32_t trainer_id, char *errstr,
                                         size_t errstr_size)
{
    char member[128];
    if (trainer_id)
        snprintf(member, sizeof(member), "trainer-%u", trainer_id);
    else {
        char host[64] = "";
        gethostname(host, sizeof(host) - 1);
        snprintf(member, sizeof(member), "trainer-%s-%ld", host, (long)getpid());
    }
    struct spw_coord_client_conf cc = {.endpoint = endpoint,
                                       .member_id = member,
                                       .role = SPARROW__MEMBER_ROLE__ROLE_TRAINER,
                                       .heartbeat_ms = 200,
                                       .register_timeout_ms = 1000};
    SPW_INFO("registering with the coordinator", "endpoint=%s member=%s", endpoint, member);
    return spw_coord_client_new(&cc, 60000, errstr, errstr_size);
}

int spw_trainer_main(int argc, char **argv)
{
    char errstr[1024];
    int rc = 1;
    spw_config_t *cfg =
        spw_cli_role_init("trainer", spw_trainer_config_props, spw_trainer_config_n_props, aliases,
                          sizeof(aliases) / sizeof(aliases[0]), argc, argv, usage, &rc);
    if (!cfg)
        return rc;

    struct spw_trainer_loop_conf conf;
    if (spw_trainer_loop_conf_from_config(cfg, &conf, errstr, sizeof(errstr)) != SPW_OK) {
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
    int64_t port = spw_config_int(cfg, "trainer.http.port");
    if (port >= 0) {
        http = spw_http_start(spw_config_str(cfg, "trainer.http.addr"), (uint16_t)port, metrics,
                              1 << 16, errstr, sizeof(errstr));
        if (!http) {
            SPW_ERROR("http endpoint failed", "error=\"%s\"", errstr);
            goto out_destroy_metrics;
        }
        SPW_INFO("http endpoint", "port=%u", (unsigned)spw_http_port(http));
    }
    conf.metrics = metrics;
    conf.http = http;
    static struct coord_glue glue;
    struct spw_trainer_hooks hooks = {0};
    const char *coord_ep = spw_config_str(cfg, "trainer.coordinator");
    if (coord_ep && coord_ep[0]) {
        for (size_t i = 0; i < COORD_MAX_PARTS; i++)
            glue.resume[i] = -1;
        glue.client = coord_connect(coord_ep, conf.trainer_id, errstr, sizeof(errstr));
        if (!glue.client) {
            SPW_ERROR("coordinator registration failed", "error=\"%s\"", errstr);
            goto out_stop_http;
        }
        conf.commit_interval_ms = 0; /* offsets are committed on the coordinator's signal */
        hooks = (struct spw_trainer_hooks){.opaque = &glue,
                                           .after_step = coord_after_step,
                                           .idle = coord_idle,
                                           .on_assign = coord_on_assign};
    }
    spw_trainer_loop_t *loop =
        spw_trainer_loop_new(&conf, glue.client ? &hooks : NULL, errstr, sizeof(errstr));
    if (!loop) {
        SPW_ERROR("trainer failed to start", "error=\"%s\"", errstr);
        goto out_destroy_coord;
    }
    glue.loop = loop;
    if (glue.client) {
        /* clock 0 before any data: trainers started together share the coordinator's clock base
         * (a later joiner is based at the slowest's clock by the coordinator) */
        spw_err_t cerr = coord_clock(&glue, loop, 0);
        if (cerr != SPW_OK) {
            SPW_ERROR("coordinator clock failed", "error=\"%s\"", spw_err_str(cerr));
            rc = cerr == SPW_ERR_STOPPED ? 0 : 1;
            spw_trainer_loop_destroy(loop);
            goto out_destroy_coord;
        }
    }
    spw_err_t err = spw_trainer_loop_run(loop);
    rc = err == SPW_OK ? 0 : 1;
    spw_trainer_loop_destroy(loop);
    SPW_INFO("stopped", "rc=%d", rc);
out_destroy_coord:
    spw_coord_client_destroy(glue.client);
out_stop_http:
    spw_http_stop(http);
out_destroy_metrics:
    spw_metrics_destroy(metrics);
out_destroy_cfg:
    spw_config_destroy(cfg);
    return rc;
}
