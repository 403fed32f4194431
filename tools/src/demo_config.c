/* The property table of `sparrow demo` and its reading into struct spw_demo_conf. */
#include "sparrow/pipeline.h"

const struct spw_config_prop spw_demo_config_props[] = {
    {"demo.duration", SPW_CONFIG_DOUBLE, "60", 1, 86400, NULL,
     "Seconds the demo runs before it stops every process (--duration)."},
    {"demo.rate", SPW_CONFIG_DOUBLE, "10000", 1, 1e7, NULL,
     "Examples per second the generator produces to Kafka (--rate)."},
    {"demo.trainers", SPW_CONFIG_INT, "2", 1, SPW_PIPELINE_MAX_TRAINERS, NULL,
     "CPU trainers reading Kafka (--trainers)."},
    {"demo.shards", SPW_CONFIG_INT, "2", 1, SPW_PIPELINE_MAX_SHARDS, NULL,
     "Parameter-server shards (--shards)."},
    {"demo.run_dir", SPW_CONFIG_STRING, NULL, 0, 1000, NULL,
     "Run directory holding every process's log; unset: a new /tmp/sparrow-demo-XXXXXX "
     "(--run-dir)."},
    {"demo.serve", SPW_CONFIG_BOOL, "true", 0, 0, NULL,
     "Run `sparrow serve` on the model-update stream too (--no-serve turns it off)."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_demo_config_n_props =
    sizeof(spw_demo_config_props) / sizeof(spw_demo_config_props[0]);

void spw_demo_conf_from_config(const spw_config_t *cfg, struct spw_demo_conf *conf)
{
    const char *run_dir = spw_config_str(cfg, "demo.run_dir");
    *conf = (struct spw_demo_conf){
        .duration_s = spw_config_double(cfg, "demo.duration"),
        .rate = spw_config_double(cfg, "demo.rate"),
        .trainers = (long)spw_config_int(cfg, "demo.trainers"),
        .shards = (long)spw_config_int(cfg, "demo.shards"),
        .run_dir = run_dir && *run_dir ? run_dir : NULL,
        .serve = spw_config_bool(cfg, "demo.serve"),
    };
}
