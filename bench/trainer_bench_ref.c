/* trainer_bench_ref: baseline (a) of bench/trainer_bench.sh — the single-process reference trainer
 * (spw_ref: every row in an in-memory table, the optimizer applied in the same thread) over a file
 * of examples, printing one line in the format of `sparrow trainer`'s "finished" line.
 * Usage: trainer_bench_ref FILE MODEL LATENT_DIM BATCH LR EVAL_WINDOW [TOPK_RATIO [EF]] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/config.h"
#include "sparrow/ingest.h"
#include "sparrow/time.h"
#include "sparrow/trainer.h"

static int arg_double(const char *text, double *out)
{
    if (spw_parse_double(text, out) != SPW_OK) {
        fprintf(stderr, "trainer_bench_ref: bad number '%s'\n", text);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: trainer_bench_ref FILE lr|fm LATENT_DIM BATCH LR EVAL_WINDOW "
                        "[TOPK_RATIO [EF 0|1]]\n");
        return 2;
    }
    double k, batch, lr, window, ratio = 1.0, ef = 1.0;
    if (arg_double(argv[3], &k) || arg_double(argv[4], &batch) || arg_double(argv[5], &lr) ||
        arg_double(argv[6], &window) || (argc > 7 && arg_double(argv[7], &ratio)) ||
        (argc > 8 && arg_double(argv[8], &ef)))
        return 2;
    struct spw_trainer_params p;
    spw_trainer_params_default(&p);
    enum spw_model_kind kind;
    if (spw_model_kind_parse(argv[2], &kind) || spw_model_init(&p.model, kind, (uint32_t)k)) {
        fprintf(stderr, "trainer_bench_ref: bad model\n");
        return 2;
    }
    p.backend = SPW_BACKEND_CPU;
    p.batch = (uint32_t)batch;
    p.lr = (float)lr;
    p.eval_window = (size_t)window;
    p.topk.dim = p.model.dim;
    p.topk.ratio = ratio;
    p.topk.error_feedback = ef != 0.0;
    p.compress = ratio < 1.0;
    char errstr[512];
    spw_ref_t *ref = spw_ref_new(&p, errstr, sizeof(errstr));
    if (!ref) {
        fprintf(stderr, "trainer_bench_ref: %s\n", errstr);
        return 1;
    }
    struct spw_ingest_limits limits;
    spw_ingest_limits_default(&limits);
    spw_reader_t *reader =
        spw_reader_open(argv[1], SPW_FORMAT_PB, &limits, NULL, errstr, sizeof(errstr));
    if (!reader) {
        fprintf(stderr, "trainer_bench_ref: %s\n", errstr);
        spw_ref_destroy(ref);
        return 1;
    }
    uint64_t t0 = spw_time_mono_ns();
    spw_err_t err = spw_ref_train_reader(ref, reader, 0);
    if (!err)
        err = spw_ref_flush(ref);
    double secs = (double)(spw_time_mono_ns() - t0) * 1e-9;
    struct spw_pv_report r;
    spw_ref_report(ref, &r);
    struct spw_ref_counts c;
    spw_ref_get_counts(ref, &c);
    struct spw_topk_stats ts;
    spw_ref_topk_stats(ref, &ts);
    printf("reference finished examples=%llu ex_per_s=%.0f window_logloss=%.5f window_auc=%.4f "
           "bayes_logloss=%.5f const_logloss=%.5f cumulative_logloss=%.5f bytes_per_example=%.2f "
           "rows=%zu seconds=%.3f status=\"%s\"\n",
           (unsigned long long)c.examples, secs > 0 ? (double)c.examples / secs : 0.0,
           r.window.logloss, r.window.auc, r.oracle_window.count ? r.oracle_window.logloss : NAN,
           r.const_window, r.cumulative.logloss,
           c.examples && ts.bytes_sent ? (double)ts.bytes_sent / (double)c.examples : 0.0,
           spw_ref_rows(ref), secs, spw_err_str(err));
    spw_reader_close(reader);
    spw_ref_destroy(ref);
    return err ? 1 : 0;
}
