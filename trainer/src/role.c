/* The trainer role: the worker loop and its coordinator session, as `sparrow trainer` runs them. */
#include <stdio.h>
#include <stdlib.h>

#include "sparrow/curve.h"
#include "sparrow/log.h"
#include "coord_session.h"
#include "sparrow/trainer_loop.h"

struct spw_trainer {
    spw_trainer_loop_t *loop;
    spw_trainer_coord_t *coord; /* NULL without a coordinator */
};

spw_trainer_t *spw_trainer_new(const struct spw_trainer_loop_conf *conf, char *errstr,
                               size_t errstr_size)
{
    struct spw_trainer *trainer = calloc(1, sizeof(*trainer));
    if (!trainer) {
        snprintf(errstr, errstr_size, "out of memory");
        return NULL;
    }
    struct spw_trainer_loop_conf loop_conf = *conf;
    struct spw_trainer_hooks hooks = {0};
    /* The shards' key files are read again when the PS client opens; reading them here as well
     * makes a bad one fail at once, not after the coordinator's registration (up to a minute). */
    struct spw_curve_client_keys keys;
    spw_err_t kerr = spw_curve_client_load(
        &keys, "trainer.curve.server_key_file", conf->client.curve_server_key_file,
        "trainer.curve.client_key_file", conf->client.curve_client_key_file, errstr, errstr_size);
    spw_curve_client_wipe(&keys);
    if (kerr != SPW_OK)
        goto out_free;
    if (conf->coordinator && conf->coordinator[0]) {
        char why[512];
        trainer->coord = spw_trainer_coord_new(conf, &hooks, why, sizeof(why));
        if (!trainer->coord) {
            snprintf(errstr, errstr_size, "coordinator registration failed: %s", why);
            goto out_free;
        }
        loop_conf.commit_interval_ms = 0; /* offsets are committed on the coordinator's signal */
    }
    trainer->loop =
        spw_trainer_loop_new(&loop_conf, trainer->coord ? &hooks : NULL, errstr, errstr_size);
    if (!trainer->loop)
        goto out_free;
    return trainer;

out_free:
    spw_trainer_coord_destroy(trainer->coord);
    free(trainer);
    return NULL;
}

spw_err_t spw_trainer_run(spw_trainer_t *trainer)
{
    if (trainer->coord) {
        spw_err_t err = spw_trainer_coord_start(trainer->coord, trainer->loop);
        if (err != SPW_OK) {
            SPW_ERROR("coordinator clock failed", "error=\"%s\"", spw_err_str(err));
            return err;
        }
    }
    return spw_trainer_loop_run(trainer->loop);
}

void spw_trainer_destroy(spw_trainer_t *trainer)
{
    if (!trainer)
        return;
    spw_trainer_loop_destroy(trainer->loop);
    spw_trainer_coord_destroy(trainer->coord);
    free(trainer);
}
