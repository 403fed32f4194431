/* Unit tests of the trainer's property table and its reading into params. */
#include "test_main.h" /* cmocka and what it needs first */

#include <string.h>

#include "sparrow/trainer.h"
#include "sparrow/trainer_loop.h"

static spw_config_t *new_cfg(void)
{
    char errstr[256];
    spw_config_t *cfg = spw_config_new(spw_trainer_config_props, spw_trainer_config_n_props, errstr,
                                       sizeof(errstr));
    if (!cfg)
        fail_msg("defaults do not validate: %s", errstr);
    return cfg;
}

static void test_trn_config_defaults(void **state)
{
    (void)state;
    char errstr[256];
    spw_config_t *cfg = new_cfg();
    struct spw_trainer_params p, d;
    assert_int_equal(spw_trainer_params_from_config(cfg, &p, errstr, sizeof(errstr)), SPW_OK);
    spw_trainer_params_default(&d);
    assert_int_equal(p.model.kind, SPW_MODEL_FM);
    assert_int_equal(p.model.dim, 9);
    assert_int_equal(p.topk.dim, 9);
    assert_int_equal(p.backend, SPW_BACKEND_AUTO);
    assert_int_equal(p.batch, 1024);
    assert_int_equal(p.acc_steps, 1);
    assert_false(p.compress);
    assert_true(p.topk.error_feedback);
    assert_int_equal(p.optimizer, SPW_REF_ADAGRAD);
    /* the compiled-in defaults are the table's (field by field: padding is not compared) */
    assert_int_equal(d.model.kind, p.model.kind);
    assert_int_equal(d.model.dim, p.model.dim);
    assert_int_equal(d.backend, p.backend);
    assert_int_equal(d.batch, p.batch);
    assert_int_equal(d.acc_steps, p.acc_steps);
    assert_int_equal(d.compress, p.compress);
    assert_true(d.topk.ratio == p.topk.ratio && d.topk.dim == p.topk.dim);
    assert_int_equal(d.topk.error_feedback, p.topk.error_feedback);
    assert_int_equal(d.topk.fp16, p.topk.fp16);
    assert_int_equal(d.topk.rounding, p.topk.rounding);
    assert_int_equal(p.topk.rounding, SPW_TOPK_ROUND_STOCHASTIC);
    assert_true(d.topk.seed == p.topk.seed && p.topk.seed == p.seed);
    assert_int_equal(d.topk.residual_max_rows, p.topk.residual_max_rows);
    assert_int_equal(d.eval_window, p.eval_window);
    assert_int_equal(d.optimizer, p.optimizer);
    assert_true(d.lr == p.lr && d.eps == p.eps && d.init_scale == p.init_scale);
    assert_int_equal(d.seed, p.seed);
    /* every property is under trainer., but for the kafka.* pass-through and log.* */
    for (size_t i = 0; i < spw_trainer_config_n_props; i++) {
        const char *name = spw_trainer_config_props[i].name;
        assert_true(strncmp(name, "trainer.", 8) == 0 || strcmp(name, "kafka.*") == 0 ||
                    strcmp(name, "log.level") == 0 || strcmp(name, "log.format") == 0);
    }
    spw_config_destroy(cfg);
}

static void test_trn_config_settings_reach_params(void **state)
{
    (void)state;
    char errstr[256];
    spw_config_t *cfg = new_cfg();
    const char *sets[] = {"trainer.model=lr",       "trainer.topk.ratio=0.1",
                          "trainer.push.fp16=true", "trainer.error_feedback=false",
                          "trainer.backend=cpu",    "trainer.acc_steps=4",
                          "trainer.optimizer=sgd",  "trainer.residual.max_rows=77",
                          "trainer.latent_dim=16",  "trainer.push.fp16.rounding=feedback"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, sets, 10, errstr, sizeof(errstr)), SPW_OK);
    struct spw_trainer_params p;
    assert_int_equal(spw_trainer_params_from_config(cfg, &p, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(p.model.kind, SPW_MODEL_LR);
    assert_int_equal(p.model.dim, 1);
    assert_int_equal(p.topk.dim, 1);
    assert_true(p.compress);
    assert_true(p.topk.ratio == 0.1);
    assert_true(p.topk.fp16);
    assert_int_equal(p.topk.rounding, SPW_TOPK_ROUND_FEEDBACK);
    assert_false(p.topk.error_feedback);
    assert_int_equal(p.topk.residual_max_rows, 77);
    assert_int_equal(p.backend, SPW_BACKEND_CPU);
    assert_int_equal(p.acc_steps, 4);
    assert_int_equal(p.optimizer, SPW_REF_SGD);
    /* out of range values are refused by the table */
    const char *bad[] = {"trainer.topk.ratio=0"};
    assert_int_not_equal(spw_config_load(cfg, NULL, NULL, bad, 1, errstr, sizeof(errstr)), SPW_OK);
    const char *bad2[] = {"trainer.backend=gpu"};
    assert_int_not_equal(spw_config_load(cfg, NULL, NULL, bad2, 1, errstr, sizeof(errstr)), SPW_OK);
    spw_config_destroy(cfg);
}

/* The shutdown bounds reach the loop's configuration: pushes, then the Kafka consumer's close. */
static void test_trn_config_shutdown_bounds_reach_loop(void **state)
{
    (void)state;
    char errstr[256];
    spw_config_t *cfg = new_cfg();
    const char *in[] = {"trainer.in=kafka://127.0.0.1:9092/examples"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, in, 1, errstr, sizeof(errstr)), SPW_OK);
    struct spw_trainer_loop_conf conf;
    assert_int_equal(spw_trainer_loop_conf_from_config(cfg, &conf, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(conf.grace_ms, 30000);
    assert_int_equal(conf.kafka_close_ms, 10000);
    const char *sets[] = {"trainer.shutdown.grace=7s", "trainer.kafka.close.timeout=2500ms"};
    assert_int_equal(spw_config_load(cfg, NULL, NULL, sets, 2, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(spw_trainer_loop_conf_from_config(cfg, &conf, errstr, sizeof(errstr)), SPW_OK);
    assert_int_equal(conf.grace_ms, 7000);
    assert_int_equal(conf.kafka_close_ms, 2500);
    /* no close may be unbounded or instant: 0 is refused */
    const char *bad[] = {"trainer.kafka.close.timeout=0"};
    assert_int_not_equal(spw_config_load(cfg, NULL, NULL, bad, 1, errstr, sizeof(errstr)), SPW_OK);
    spw_config_destroy(cfg);
}

SPW_TEST_MAIN(test_trn_config_defaults, test_trn_config_settings_reach_params,
              test_trn_config_shutdown_bounds_reach_loop)
