/* The property table of `sparrow gen`. */
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
     "Vocabulary size of the smallest field; sizes grow log-uniformly across fields."},
    {"gen.vocab.max", SPW_CONFIG_INT, "1000000", 1, 1e9, NULL,
     "Vocabulary size of the largest field."},
    {"gen.zipf", SPW_CONFIG_DOUBLE, "1.1", 0, 4, NULL,
     "Zipf exponent of value popularity within each field (0: uniform)."},
    {"gen.ctr", SPW_CONFIG_DOUBLE, "0.2", 0.001, 0.999, NULL,
     "Target base click-through rate; the planted bias is calibrated to it."},
    {"gen.signal", SPW_CONFIG_DOUBLE, "0.6", 0, 10, NULL,
     "Scale of the planted weights: larger means a more predictable stream (higher Bayes AUC)."},
    {"gen.drift", SPW_CONFIG_DOUBLE, "0", 0, 1000, NULL,
     "Drift of the true weights, in radians of rotation per million examples (0: stationary)."},
    {"gen.new_values", SPW_CONFIG_DOUBLE, "0.001", 0, 1, NULL,
     "Fraction of categorical draws that bring a never-seen value (steady vocabulary inflow)."},
    {"gen.format", SPW_CONFIG_ENUM, "pb", 0, 0, "pb|json|criteo",
     "Output format: length-delimited sparrow.Example, JSON lines, or Criteo TSV."},
    {"gen.out", SPW_CONFIG_STRING, "-", 0, 4096, NULL, "Output file; - is stdout."},
    {"gen.start_ms", SPW_CONFIG_INT, "1700000000000", 0, 9.2e18, NULL,
     "Event time of the first example, in ms since the Unix epoch."},
    {"gen.rate", SPW_CONFIG_DOUBLE, "1000", 0.001, 1e9, NULL,
     "Events per second of event time (spacing of event timestamps)."},
    {"log.level", SPW_CONFIG_ENUM, "info", 0, 0, "error|warn|info|debug", "Log threshold."},
};
const size_t spw_gen_config_n_props = sizeof(spw_gen_config_props) / sizeof(spw_gen_config_props[0]);
