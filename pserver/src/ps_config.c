/* The property table of `sparrow pserver` and its translation into server settings. */
#include <string.h>

#include "ps_int.h"
#include "sparrow/config.h"
#include "sparrow/wire.h"

const struct spw_config_prop spw_pserver_config_props[] = {
    {"pserver.listen", SPW_CONFIG_STRING, "tcp://0.0.0.0:7000", 0, 1024, NULL,
     "ZeroMQ endpoint the shard's ROUTER socket binds."},
    {"pserver.shard", SPW_CONFIG_INT, "0", 0, 65535, NULL,
     "This shard's index in 0..pserver.shards-1 (pserver-<i>)."},
    {"pserver.shards", SPW_CONFIG_INT, "1", 1, 65536, NULL,
     "Number of shards; keys of other shards are refused (jump hash of mix64(key))."},
    {"pserver.dim", SPW_CONFIG_STRING, "9", 1, 16, NULL,
     "Floats per row (LR: 1, FM: 1 + k; the default 9 is the default trainer's, FM with k = "
     "8), 1.." SPW_PS_MAX_DIM_STR ", or auto: the dim of the shard's database (a restored "
     "checkpoint's), else the first client's (a trainer says its dim before its first pull), "
     "fixed from then on. A trainer of another dim fails at connect, naming both."},
    {"pserver.optimizer", SPW_CONFIG_ENUM, "adagrad", 0, 0, "sgd|adagrad|adam|ftrl",
     "Optimizer applied on the shard."},
    {"pserver.lr", SPW_CONFIG_DOUBLE, "0.05", 1e-9, 100, NULL,
     "Learning rate (FTRL: its alpha); of the whole row unless pserver.lr.latent is set."},
    {"pserver.lr.latent", SPW_CONFIG_DOUBLE, "0", 0, 100, NULL,
     "Learning rate (FTRL: alpha) of a row's latent part, elements 1..dim-1 (the FM's v; "
     "element 0, the linear weight, keeps pserver.lr), for every optimizer; 0: pserver.lr."},
    {"pserver.lr.dense", SPW_CONFIG_DOUBLE, "0.005", 0, 100, NULL,
     "Learning rate (FTRL: alpha) of a deep model's dense network (the dense-block rows, every "
     "element); 0: pserver.lr and pserver.lr.latent as the embeddings. The network's weights "
     "take a step every batch, an embedding row only when its feature occurs, so the rate that "
     "suits rows is too large for the network: DeepFM on Adagrad at 0.05 ended no better than an "
     "FM (held-out 0.4366 against 0.4361, PyTorch's DeepFM 0.4366 too); at 0.01 and 0.003 "
     "0.4339 and 0.4335 (Adam at 0.001: 0.4339)."},
    {"pserver.sync.dense_lr_scale", SPW_CONFIG_ENUM, "sqrt", 0, 0, "none|sqrt",
     "A deep model in a mode of two-phase steps (sync, group:G, hybrid): a step that averages "
     "the batches of K trainers steps the dense network at sqrt(K) times pserver.lr.dense "
     "(sqrt: the square-root scaling rule of adaptive optimizers for a K times larger batch); "
     "the embedding rows keep their rate, a rare row taking as many steps as with one trainer. "
     "DeepFM, 8 sync trainers of batch 256, 300,000 examples: held-out 0.3805-0.3855 unscaled "
     "(5 runs), 0.3769-0.3833 with sqrt (6 runs; one trainer of batch 256: 0.3731); scaling the "
     "embeddings' rate too: 0.3904."},
    {"pserver.l2", SPW_CONFIG_DOUBLE, "0", 0, 1000, NULL,
     "L2 regularisation added to the gradient as l2*w (FTRL: its l2 term)."},
    {"pserver.clip_norm", SPW_CONFIG_DOUBLE, "0", 0, 1e12, NULL,
     "Per-row gradient L2-norm clip; 0 disables."},
    {"pserver.eps", SPW_CONFIG_DOUBLE, "1e-3", 0, 1, NULL,
     "Adagrad and Adam denominator epsilon. 1e-3 damps a row's first steps: with 1e-8 an Adagrad "
     "element's first step is the whole learning rate, and an FM over tens of fields trained on "
     "20,000 rows ended worse than the constant predictor (held-out 0.5274 against 0.5052; 0.4960 "
     "with 1e-3; 300,000 rows: 0.4849 -> 0.4696)."},
    {"pserver.adam.beta1", SPW_CONFIG_DOUBLE, "0.9", 0, 0.999999, NULL, "Adam first-moment decay."},
    {"pserver.adam.beta2", SPW_CONFIG_DOUBLE, "0.999", 0, 0.999999999, NULL,
     "Adam second-moment decay."},
    {"pserver.ftrl.beta", SPW_CONFIG_DOUBLE, "1", 0, 1e6, NULL, "FTRL-Proximal beta."},
    {"pserver.ftrl.l1", SPW_CONFIG_DOUBLE, "0", 0, 1e6, NULL, "FTRL-Proximal L1 strength."},
    {"pserver.init.scale", SPW_CONFIG_DOUBLE, "0.01", 0, 10, NULL,
     "Rows start uniform in [-scale, scale], drawn from (key, pserver.seed)."},
    {"pserver.seed", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL, "Seed of the deterministic row init."},
    {"pserver.memory.mb", SPW_CONFIG_INT, "1024", 1, 16777216, NULL,
     "DRAM budget of the hot table (rows and index); colder rows live in the cold file (see "
     "pserver.cold_file) or RocksDB."},
    {"pserver.cold_file", SPW_CONFIG_BOOL, "true", 0, 0, NULL,
     "Rows evicted from DRAM go to a file of fixed-size records in <data_dir>/db (64 segment "
     "files, a record of the row's DRAM size per row, each at most 0.7 full and doubled as it "
     "fills), which a later miss "
     "reads in place; checkpoints write its changed rows to RocksDB. The file holds every row "
     "evicted since start, so the disk holds the cold rows twice (file and RocksDB). false: "
     "evicted rows are written to RocksDB and a miss reads RocksDB (pserver_bench (e), a model "
     "10x DRAM: a sixth of the rows/s pushed with the file)."},
    {"pserver.data_dir", SPW_CONFIG_STRING, "data/pserver", 0, 4000, NULL,
     "Directory of the shard's live RocksDB (<data_dir>/db)."},
    {"pserver.checkpoint.dir", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Root of checkpoints/<epoch>/shard-<i>; empty: pserver.data_dir."},
    {"pserver.restore", SPW_CONFIG_BOOL, "true", 0, 0, NULL,
     "Start from the newest valid checkpoint (or empty when none), never from a crashed live DB."},
    {"pserver.staleness.penalty", SPW_CONFIG_ENUM, "inverse", 0, 0,
     "none|inverse|exp:|drop:|adaptive|dc:",
     "Step scale by staleness tau: none, inverse 1/(1+tau), exp:<beta> beta^tau, "
     "drop:<max_tau>, adaptive min(1, (1+tau_ref)/(1+tau)) with tau_ref the running mean tau "
     "of the row's class (bias, top, rest), or dc:<lambda> delay compensation: a stale "
     "gradient becomes g + lambda*g*g*(w_now - w_pulled) with the values the trainer pulled "
     "(trainer.push.pulled; pushes grow by n*dim*4 bytes, 2 with fp16; no shard memory; "
     "pushes without them and two-phase steps apply uncorrected, counted in "
     "sparrow_ps_dc_rows_total)."},
    {"pserver.admit.min_count", SPW_CONFIG_INT, "1", 0, 65535, NULL,
     "Sightings (pushes) before a key gets a row; <= 1 admits every key."},
    {"pserver.debug.counter_key", SPW_CONFIG_INT, "0", 0, 9.2e18, NULL,
     "A reserved key kept as a plain counter (a push adds its first gradient value to w[0], "
     "no optimizer, no penalty); pairs with trainer.debug.counter_key. 0: none."},
    {"pserver.steps.max_mb", SPW_CONFIG_INT, "1024", 1, 1048576, NULL,
     "Bound of the pending table of two-phase steps (sync mode): pushes held until their step "
     "commits; a push beyond it is refused (ERROR_UNAVAILABLE)."},
    {"pserver.ttl", SPW_CONFIG_DURATION_MS, "0", 0, 3.2e12, NULL,
     "Rows not updated for this long are evicted (tombstoned); 0 disables."},
    {"pserver.ttl.sweep_rows", SPW_CONFIG_INT, "10000", 1, 1e9, NULL,
     "Rows examined by each TTL sweep step (every 100 ms)."},
    {"pserver.max_frame", SPW_CONFIG_INT, "33554432", 1024, SPW_WIRE_HARD_MAX_FRAME / 8, NULL,
     "Largest request frame in bytes; larger ones are refused before decoding."},
    SPW_CONFIG_PROPS_HTTP("pserver", "0.0.0.0", "9100"),
    {"pserver.curve.secret_key_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File with the shard's Z85 CURVE secret key; empty disables CurveZMQ."},
    {"pserver.curve.allowed_clients_file", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "File of allowed client Z85 public keys, one per line (required with CURVE)."},
    {"pserver.publish.interval", SPW_CONFIG_DURATION_MS, "250ms", 0, 3600000, NULL,
     "Changed rows and TTL tombstones are published to the update stream this often (a row "
     "that changes again within an interval is published once); 0 disables (publishing is "
     "also off without kafka.bootstrap.servers or pserver.publish.brokers). Shorter is "
     "fresher and costs more bytes: bench/study_freshness.py measures both."},
    {"pserver.publish.batch_rows", SPW_CONFIG_INT, "1024", 1, 65536, NULL,
     "Rows per update-stream record: each publish sends the changed rows of a partition in "
     "records of up to this many rows (and 256 KiB), with no Kafka key; Kafka's per-record cost "
     "is paid once per record. 1: one record per row, keyed by its feature key, as a compacted "
     "topic needs (docs/FORMATS.md)."},
    {"pserver.publish.topic", SPW_CONFIG_STRING, "model-updates", 1, 249, NULL,
     "Kafka topic of the model-update stream."},
    {"pserver.publish.brokers", SPW_CONFIG_STRING, "", 0, 4000, NULL,
     "Bootstrap servers of the update stream; empty: kafka.bootstrap.servers."},
    {"kafka.*", SPW_CONFIG_PASSTHROUGH, NULL, 0, 0, NULL,
     "librdkafka properties of the update-stream producer (kafka.bootstrap.servers, TLS, SASL)."},
    {"rocksdb.options", SPW_CONFIG_STRING, "", 0, 16384, NULL,
     "RocksDB option string (rocksdb_get_options_from_string), e.g. "
     "\"write_buffer_size=67108864;max_background_jobs=4\"."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_pserver_config_n_props =
    sizeof(spw_pserver_config_props) / sizeof(spw_pserver_config_props[0]);

spw_err_t spw_ps_server_conf_from_config(const spw_config_t *cfg, struct spw_ps_server_conf *conf,
                                         char *errstr, size_t errstr_size)
{
    memset(conf, 0, sizeof(*conf));
    struct spw_ps_store_conf *sc = &conf->store;
    conf->listen = spw_config_str(cfg, "pserver.listen");
    conf->shards = (uint32_t)spw_config_int(cfg, "pserver.shards");
    sc->shard = (uint32_t)spw_config_int(cfg, "pserver.shard");
    if (sc->shard >= conf->shards) {
        snprintf(errstr, errstr_size, "pserver.shard %u must be below pserver.shards %u", sc->shard,
                 conf->shards);
        return SPW_ERR_INVALID;
    }
    const char *dim = spw_config_str(cfg, "pserver.dim");
    int64_t d = 0;
    if (strcmp(dim, "auto") == 0) {
        sc->dim = 0; /* from the database or the first client (server.c) */
    } else if (spw_parse_int64(dim, &d) == SPW_OK && d >= 1 && d <= SPW_PS_MAX_DIM) {
        sc->dim = (uint32_t)d;
    } else {
        snprintf(errstr, errstr_size, "pserver.dim: '%.40s' is neither auto nor a dim in 1..%u",
                 dim, SPW_PS_MAX_DIM);
        return SPW_ERR_INVALID;
    }
    spw_ps_optim_conf_default(&sc->optim);
    if (spw_ps_optimizer_parse(spw_config_str(cfg, "pserver.optimizer"), &sc->optim.kind) !=
        SPW_OK) {
        snprintf(errstr, errstr_size, "pserver.optimizer: unknown");
        return SPW_ERR_INVALID;
    }
    sc->optim.lr = (float)spw_config_double(cfg, "pserver.lr");
    sc->optim.lr_latent = (float)spw_config_double(cfg, "pserver.lr.latent");
    sc->optim.lr_dense = (float)spw_config_double(cfg, "pserver.lr.dense");
    sc->optim.l2 = (float)spw_config_double(cfg, "pserver.l2");
    sc->optim.clip_norm = (float)spw_config_double(cfg, "pserver.clip_norm");
    sc->optim.eps = (float)spw_config_double(cfg, "pserver.eps");
    sc->optim.beta1 = (float)spw_config_double(cfg, "pserver.adam.beta1");
    sc->optim.beta2 = (float)spw_config_double(cfg, "pserver.adam.beta2");
    sc->optim.ftrl_beta = (float)spw_config_double(cfg, "pserver.ftrl.beta");
    sc->optim.ftrl_l1 = (float)spw_config_double(cfg, "pserver.ftrl.l1");
    sc->optim.init_scale = (float)spw_config_double(cfg, "pserver.init.scale");
    sc->seed = (uint64_t)spw_config_int(cfg, "pserver.seed");
    sc->memory_bytes = (uint64_t)spw_config_int(cfg, "pserver.memory.mb") << 20;
    const char *penalty = spw_config_str(cfg, "pserver.staleness.penalty");
    if (spw_ps_penalty_parse(penalty, &sc->penalty) != SPW_OK) {
        snprintf(errstr, errstr_size,
                 "pserver.staleness.penalty '%s': want none, inverse, exp:<beta in (0,1]>, "
                 "drop:<max_tau>, adaptive or dc:<lambda in [0,1e6]>",
                 penalty);
        return SPW_ERR_INVALID;
    }
    sc->admit_min_count = (uint32_t)spw_config_int(cfg, "pserver.admit.min_count");
    sc->cold_off = !spw_config_bool(cfg, "pserver.cold_file");
    sc->ttl_s = (uint32_t)(spw_config_duration_ms(cfg, "pserver.ttl") / 1000);
    sc->counter_key = (uint64_t)spw_config_int(cfg, "pserver.debug.counter_key");
    if (spw_config_duration_ms(cfg, "pserver.ttl") > 0 && sc->ttl_s == 0)
        sc->ttl_s = 1;
    sc->rocksdb_options = spw_config_str(cfg, "rocksdb.options");
    conf->max_frame = (size_t)spw_config_int(cfg, "pserver.max_frame");
    conf->steps_max_bytes = (size_t)spw_config_int(cfg, "pserver.steps.max_mb") << 20;
    conf->sync_dense_lr_sqrt =
        strcmp(spw_config_str(cfg, "pserver.sync.dense_lr_scale"), "sqrt") == 0;
    conf->data_dir = spw_config_str(cfg, "pserver.data_dir");
    conf->checkpoint_dir = spw_config_str(cfg, "pserver.checkpoint.dir");
    conf->restore = spw_config_bool(cfg, "pserver.restore");
    conf->curve_secret_key_file = spw_config_str(cfg, "pserver.curve.secret_key_file");
    conf->curve_allowed_clients_file = spw_config_str(cfg, "pserver.curve.allowed_clients_file");
    conf->expire_batch = (uint32_t)spw_config_int(cfg, "pserver.ttl.sweep_rows");
    conf->publish_interval_ms = (uint32_t)spw_config_duration_ms(cfg, "pserver.publish.interval");
    conf->publish_batch_rows = (uint32_t)spw_config_int(cfg, "pserver.publish.batch_rows");
    conf->publish_topic = spw_config_str(cfg, "pserver.publish.topic");
    conf->publish_brokers = spw_config_str(cfg, "pserver.publish.brokers");
    conf->kafka_config = cfg;
    if (!conf->data_dir || !conf->data_dir[0]) {
        snprintf(errstr, errstr_size, "pserver.data_dir must not be empty");
        return SPW_ERR_INVALID;
    }
    return SPW_OK;
}
