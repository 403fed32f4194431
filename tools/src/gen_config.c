/* The property table of `sparrow gen` and its reading into struct spw_gen_params. */
#include <stdio.h>

#include "sparrow/tools.h"

const struct spw_config_prop spw_gen_config_props[] = {
    {"gen.n", SPW_CONFIG_INT, "100000", 0, 1e12, NULL,
     "Examples to write; 0 writes until SIGTERM/SIGINT."},
    {"gen.seed", SPW_CONFIG_INT, "1", 0, 9.2e18, NULL,
     "Seed of the planted model and of the stream; equal seeds give identical output."},
    {"gen.fields", SPW_CONFIG_INT, "39", 1, 1024, NULL,
     "Fields per example: the first 13 integer-valued (Criteo I1..I13) when there are at least 13, "
     "the rest categorical (C1..)."},
    {"gen.latent_dim", SPW_CONFIG_INT, "4", 0, 64, NULL,
     "Latent dimension of the planted factorization machine (0: logistic regression)."},
    {"gen.vocab.min", SPW_CONFIG_INT, "10", 1, 1e9, NULL,
     "Vocabulary size of the smallest field; field sizes are log-spaced from gen.vocab.min to "
     "gen.vocab.max and dealt to fields in an order drawn from the seed."},
    {"gen.vocab.max", SPW_CONFIG_INT, "1000000", 1, 1e9, NULL,
     "Vocabulary size of the largest field."},
    {"gen.zipf", SPW_CONFIG_DOUBLE, "1.1", 0, 4, NULL,
     "Zipf exponent of value popularity within each field (0: uniform)."},
    {"gen.ctr", SPW_CONFIG_DOUBLE, "0.2", 0.001, 0.999, NULL,
     "Target base click-through rate; the planted bias is calibrated to it."},
    {"gen.signal", SPW_CONFIG_DOUBLE, "0.8", 0, 10, NULL,
     "Scale of the planted weights (the linear and the pairwise term each have about this "
     "standard deviation): larger means a more predictable stream; 0.8 gives a Bayes AUC near "
     "0.76."},
    {"gen.drift", SPW_CONFIG_DOUBLE, "0", 0, 1000, NULL,
     "Drift of the true weights, in radians of rotation per million examples (0: stationary)."},
    {"gen.new_values", SPW_CONFIG_DOUBLE, "0.001", 0, 1, NULL,
     "Fraction of categorical draws that bring a never-seen value (steady vocabulary inflow)."},
    {"gen.format", SPW_CONFIG_ENUM, "pb", 0, 0, "pb|json|criteo",
     "Output format: length-delimited sparrow.Example, JSON lines, or Criteo TSV."},
    {"gen.out", SPW_CONFIG_STRING, "-", 0, 4096, NULL, "Output file; - is stdout."},
    {"gen.compression", SPW_CONFIG_ENUM, "lz4", 0, 0, "none|gzip|snappy|lz4|zstd",
     "--out kafka://: the Kafka producer's compression.type (lz4 shrinks the pb stream 2.3x)."},
    {"gen.start_ms", SPW_CONFIG_INT, "1700000000000", 0, 9.2e18, NULL,
     "Event time of the first example, in ms since the Unix epoch."},
    {"gen.rate", SPW_CONFIG_DOUBLE, "1000", 0.001, 1e9, NULL,
     "Events per second of event time (spacing of event timestamps)."},
    {"gen.model", SPW_CONFIG_ENUM, "fm", 0, 0, "fm|deep",
     "Planted model: fm, the factorization machine; deep, the FM plus a random MLP over planted "
     "per-field embeddings of the keys (nonlinear field interactions that an FM cannot fit, so "
     "that a DeepFM or DCN-v2 has something to gain). The features are the same for both."},
    {"gen.deep.hidden", SPW_CONFIG_STRING, "32,16", 0, SPW_GEN_DEEP_HIDDEN_MAX - 1, NULL,
     "gen.model=deep: hidden ReLU widths of the planted MLP, comma-separated."},
    {"gen.deep.dim", SPW_CONFIG_INT, "4", 1, SPW_GEN_MAX_DEEP_DIM, NULL,
     "gen.model=deep: floats per field of the planted embeddings the MLP reads (fields x dim "
     "inputs, at most 16384)."},
    {"gen.deep.fields", SPW_CONFIG_INT, "8", 0, 1024, NULL,
     "gen.model=deep: the planted MLP reads the first N fields only (the integer fields I1.. "
     "come first). Over few fields its interactions are of high order, which no pairwise model "
     "fits; over all 39 a random MLP is close to additive, which an FM's per-value weights "
     "already fit (600,000 examples, one pass: DeepFM no better than FM with 0, 0.4% better "
     "with 8). 0: every field."},
    {"gen.deep.scale", SPW_CONFIG_DOUBLE, "2", 0.001, 100, NULL,
     "gen.model=deep: standard deviation of the MLP's logit (on the calibration sample); the "
     "FM's linear and pairwise terms each have about gen.signal. Much of a random ReLU MLP is "
     "additive or pairwise, which an FM fits too: at 1 (1,000,000 examples, one pass) DeepFM "
     "was 0.02% better than FM, at 2 1.8% and at 3 4.0%."},
    SPW_CONFIG_PROP_LOG_LEVEL("info"),
};
const size_t spw_gen_config_n_props =
    sizeof(spw_gen_config_props) / sizeof(spw_gen_config_props[0]);

void spw_gen_params_from_config(const spw_config_t *cfg, struct spw_gen_params *params)
{
    params->n = (uint64_t)spw_config_int(cfg, "gen.n");
    params->seed = (uint64_t)spw_config_int(cfg, "gen.seed");
    params->fields = (uint32_t)spw_config_int(cfg, "gen.fields");
    params->latent_dim = (uint32_t)spw_config_int(cfg, "gen.latent_dim");
    params->vocab_min = (uint64_t)spw_config_int(cfg, "gen.vocab.min");
    params->vocab_max = (uint64_t)spw_config_int(cfg, "gen.vocab.max");
    params->zipf = spw_config_double(cfg, "gen.zipf");
    params->ctr = spw_config_double(cfg, "gen.ctr");
    params->signal = spw_config_double(cfg, "gen.signal");
    params->drift = spw_config_double(cfg, "gen.drift");
    params->new_values = spw_config_double(cfg, "gen.new_values");
    params->start_ms = spw_config_int(cfg, "gen.start_ms");
    params->rate = spw_config_double(cfg, "gen.rate");
    /* the table's choices are the parser's */
    if (spw_gen_model_parse(spw_config_str(cfg, "gen.model"), &params->model) != SPW_OK)
        params->model = SPW_GEN_MODEL_FM;
    snprintf(params->deep_hidden, sizeof(params->deep_hidden), "%s",
             spw_config_str(cfg, "gen.deep.hidden"));
    params->deep_dim = (uint32_t)spw_config_int(cfg, "gen.deep.dim");
    params->deep_scale = spw_config_double(cfg, "gen.deep.scale");
    params->deep_fields = (uint32_t)spw_config_int(cfg, "gen.deep.fields");
}
