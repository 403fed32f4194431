/* backend_bench: the trainer's compute step alone, CUDA backend against the CPU backend in the same
 * run. One step is spw_backend_forward_backward on a batch of `sparrow gen` examples (39 fields,
 * seed 1) with its pulled rows, host arrays in and out (the CUDA backend's copies to and from the
 * device are counted: they are part of every step the trainer takes), then row norms and the top-k
 * selection of a quarter of the rows (the compressor's device work). Four batches rotate so that
 * no step reuses the last one's inputs. For each model and batch size: the median step time over
 * the repeats, examples/s, and cuda/cpu; before timing, the two backends' gradients on one batch
 * are compared (max diff: the largest difference over the largest gradient element; more than
 * 1e-5, or different top-k sets, fail the run).
 * Usage: backend_bench [REPEATS]   (default 20). Without a usable CUDA device, prints the CPU
 * figures and says why CUDA was skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/time.h"
#include "sparrow/tools.h"
#include "sparrow/trainer.h"

#define ROTATE 4

struct step_inputs {
    spw_batch_t *batch[ROTATE];
    float *rows[ROTATE];
    size_t max_uniq, max_n;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int make_inputs(struct step_inputs *in, const struct spw_model *model, size_t n,
                       uint64_t *rng)
{
    char errstr[256];
    struct spw_gen_params gp;
    spw_gen_params_default(&gp);
    gp.seed = 1;
    gp.fields = 39;
    spw_gen_t *gen = spw_gen_new(&gp, errstr, sizeof(errstr));
    if (!gen) {
        fprintf(stderr, "backend_bench: gen: %s\n", errstr);
        return -1;
    }
    memset(in, 0, sizeof(*in));
    in->max_n = n;
    for (int b = 0; b < ROTATE; b++) {
        in->batch[b] = spw_batch_new(n, 39, errstr, sizeof(errstr));
        if (!in->batch[b])
            goto fail;
        for (size_t i = 0; i < n; i++) {
            const struct spw_gen_example *ex = spw_gen_next(gen);
            if (spw_batch_add(in->batch[b], ex->label, ex->oracle_p, ex->event_time_ms,
                              ex->n_features, ex->keys, NULL) != SPW_OK)
                goto fail;
        }
        size_t nv = spw_batch_unique(in->batch[b]) * model->dim;
        in->rows[b] = malloc(nv * sizeof(float) + sizeof(float));
        if (!in->rows[b])
            goto fail;
        for (size_t i = 0; i < nv; i++) {
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            in->rows[b][i] = ((float)(*rng >> 40) / (float)(1u << 24) - 0.5f) * 0.2f;
        }
        if (spw_batch_unique(in->batch[b]) > in->max_uniq)
            in->max_uniq = spw_batch_unique(in->batch[b]);
    }
    spw_gen_destroy(gen);
    return 0;
fail:
    fprintf(stderr, "backend_bench: cannot build a batch of %zu examples\n", n);
    spw_gen_destroy(gen);
    return -1;
}

static void free_inputs(struct step_inputs *in)
{
    for (int b = 0; b < ROTATE; b++) {
        spw_batch_destroy(in->batch[b]);
        free(in->rows[b]);
    }
}

struct outputs {
    float *preds, *grads, *norms;
    uint8_t *selected;
};

static int step(spw_backend_t *be, const struct step_inputs *in, int b, struct outputs *o)
{
    const spw_batch_t *batch = in->batch[b];
    size_t n = spw_batch_examples(batch), nu = spw_batch_unique(batch);
    double loss;
    if (spw_backend_forward_backward(be, batch, in->rows[b], 1.0f / (float)n, o->preds, o->grads,
                                     &loss) != SPW_OK ||
        spw_backend_row_norms(be, o->grads, nu, o->norms) != SPW_OK ||
        spw_backend_topk_select(be, o->norms, nu, nu / 4, o->selected) != SPW_OK)
        return -1;
    return 0;
}

/* Median seconds per step over repeats (after ROTATE warm-up steps); -1 on a backend error. */
static double time_steps(spw_backend_t *be, const struct step_inputs *in, struct outputs *o,
                         int repeats)
{
    double *t = malloc((size_t)repeats * sizeof(double));
    if (!t)
        return -1;
    for (int w = 0; w < ROTATE; w++)
        if (step(be, in, w, o) != 0)
            goto fail;
    for (int r = 0; r < repeats; r++) {
        uint64_t t0 = spw_time_mono_ns();
        if (step(be, in, r % ROTATE, o) != 0)
            goto fail;
        t[r] = (double)(spw_time_mono_ns() - t0) / 1e9;
    }
    qsort(t, (size_t)repeats, sizeof(double), cmp_double);
    double med = t[repeats / 2];
    free(t);
    return med;
fail:
    free(t);
    return -1;
}

/* The largest difference between the backends' gradients on batch 0, over the largest gradient
 * element (the device sums heavy rows in chunks: rounding differences of terms that cancel). */
static double compare(spw_backend_t *cpu, spw_backend_t *gpu, const struct step_inputs *in,
                      const struct spw_model *model, struct outputs *oc, struct outputs *og)
{
    if (step(cpu, in, 0, oc) != 0 || step(gpu, in, 0, og) != 0)
        return INFINITY;
    size_t nv = spw_batch_unique(in->batch[0]) * model->dim;
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < nv; i++)
        gmax = fmax(gmax, fabs(oc->grads[i]));
    for (size_t i = 0; i < nv; i++)
        worst = fmax(worst, fabs((double)oc->grads[i] - og->grads[i]));
    worst = gmax > 0 ? worst / gmax : worst;
    if (memcmp(oc->selected, og->selected, spw_batch_unique(in->batch[0])) != 0)
        return INFINITY;
    return worst;
}

static int alloc_outputs(struct outputs *o, const struct step_inputs *in,
                         const struct spw_model *model)
{
    o->preds = malloc(in->max_n * sizeof(float));
    o->grads = malloc(in->max_uniq * model->dim * sizeof(float));
    o->norms = malloc(in->max_uniq * sizeof(float));
    o->selected = malloc(in->max_uniq);
    return o->preds && o->grads && o->norms && o->selected ? 0 : -1;
}

static void free_outputs(struct outputs *o)
{
    free(o->preds);
    free(o->grads);
    free(o->norms);
    free(o->selected);
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 20;
    if (repeats < 1 || repeats > 100000) {
        fprintf(stderr, "usage: backend_bench [REPEATS 1..100000]\n");
        return 2;
    }
    const struct {
        enum spw_model_kind kind;
        uint32_t k;
    } models[] = {{SPW_MODEL_LR, 0}, {SPW_MODEL_FM, 16}, {SPW_MODEL_FM, 64}};
    const size_t batches[] = {1024, 8192, 65536};
    char errstr[256];
    int cuda_ok = 1, rc = 0;
    uint64_t rng = 7;
    printf("backend_bench: one step = forward+backward, row norms, top-k of 1/4 (host arrays in "
           "and out), median of %d steps over %d rotating batches of sparrow gen (39 fields)\n",
           repeats, ROTATE);
    printf("%-8s %7s %12s %12s %12s %12s %9s %10s\n", "model", "batch", "cpu ms/step",
           "cuda ms/step", "cpu ex/s", "cuda ex/s", "cuda/cpu", "max diff");
    for (size_t mi = 0; mi < sizeof(models) / sizeof(models[0]); mi++) {
        struct spw_model model;
        spw_model_init(&model, models[mi].kind, models[mi].k);
        char name[32];
        if (model.latent_dim)
            snprintf(name, sizeof(name), "fm k=%u", model.latent_dim);
        else
            snprintf(name, sizeof(name), "lr");
        spw_backend_t *cpu = spw_backend_new(SPW_BACKEND_CPU, &model, errstr, sizeof(errstr));
        spw_backend_t *gpu = NULL;
        if (cuda_ok) {
            gpu = spw_backend_new(SPW_BACKEND_CUDA, &model, errstr, sizeof(errstr));
            if (!gpu) {
                printf("backend_bench: CUDA skipped: %s\n", errstr);
                cuda_ok = 0;
            }
        }
        if (!cpu) {
            fprintf(stderr, "backend_bench: cpu backend: %s\n", errstr);
            return 1;
        }
        for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
            struct step_inputs in;
            struct outputs oc = {0}, og = {0};
            if (make_inputs(&in, &model, batches[bi], &rng) != 0 ||
                alloc_outputs(&oc, &in, &model) != 0 || alloc_outputs(&og, &in, &model) != 0) {
                fprintf(stderr, "backend_bench: out of memory\n");
                return 1;
            }
            double worst = gpu ? compare(cpu, gpu, &in, &model, &oc, &og) : NAN;
            double tc = time_steps(cpu, &in, &oc, repeats);
            double tg = gpu ? time_steps(gpu, &in, &og, repeats) : NAN;
            if (tc < 0 || (gpu && tg < 0)) {
                fprintf(stderr, "backend_bench: a step failed\n");
                rc = 1;
            }
            if (gpu && !(worst <= 1e-5)) {
                fprintf(stderr, "backend_bench: %s batch %zu: backends disagree (%.3g)\n", name,
                        batches[bi], worst);
                rc = 1;
            }
            double n = (double)batches[bi];
            printf("%-8s %7zu %12.3f %12.3f %12.0f %12.0f %9.2f %10.2g\n", name, batches[bi],
                   tc * 1e3, tg * 1e3, n / tc, n / tg, tc / tg, worst);
            fflush(stdout);
            free_outputs(&oc);
            free_outputs(&og);
            free_inputs(&in);
        }
        spw_backend_destroy(cpu);
        spw_backend_destroy(gpu);
    }
    return rc;
}
