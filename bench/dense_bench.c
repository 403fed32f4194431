/* dense_bench: one training step of the dense towers (forward with dropout off, the logloss
 * gradient, backward with the input gradient) on the CUDA network (cuBLAS) against the CPU
 * network (OpenBLAS) in the same run, at each batch size. Host arrays in and out: the CUDA
 * network's copies of parameters, inputs, logits, gradients and dL/dx are counted, as they are
 * in every step a trainer would take with this API. Models: DeepFM's tower (39 fields × 16 =
 * 624 inputs, MLP 400,400,400) and DCN-v2 (624 inputs, 3 cross layers, MLP 400,400). Before
 * timing, the two networks' gradients on one batch are compared (largest difference over the
 * largest element; more than 1e-4 fails the run). Reports the median step over the repeats
 * (after one warm-up step), examples/s and cuda/cpu.
 * Usage: dense_bench [REPEATS [BATCHES]]   (default 5 and 4096,65536). Without a usable CUDA
 * device, prints the CPU figures and says why CUDA was skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/dense.h"
#include "sparrow/time.h"

struct bufs {
    float *p, *x, *y, *logits, *dl, *grads, *dx;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t z = *s;
    return (z ^ (z >> 31)) * 0x9e3779b97f4a7c15ull;
}

/* one step on either network; returns SPW_OK */
static spw_err_t step(spw_dense_t *cpu, spw_dense_cuda_t *gpu, struct bufs *b, size_t n)
{
    spw_err_t rc = cpu ? spw_dense_forward(cpu, b->p, b->x, n, b->logits, true)
                       : spw_dense_cuda_forward(gpu, b->p, b->x, n, b->logits, true);
    if (rc != SPW_OK)
        return rc;
    spw_dense_logloss(b->logits, b->y, n, 1.0f / (float)n, b->dl);
    return cpu ? spw_dense_backward(cpu, b->p, b->dl, b->grads, b->dx)
               : spw_dense_cuda_backward(gpu, b->dl, b->grads, b->dx);
}

static double median_step_ms(spw_dense_t *cpu, spw_dense_cuda_t *gpu, struct bufs *b, size_t n,
                             int repeats)
{
    double *t = malloc((size_t)repeats * sizeof(double));
    if (!t || step(cpu, gpu, b, n) != SPW_OK) {
        free(t);
        return -1;
    }
    for (int r = 0; r < repeats; r++) {
        uint64_t t0 = spw_time_mono_ns();
        if (step(cpu, gpu, b, n) != SPW_OK) {
            free(t);
            return -1;
        }
        t[r] = (double)(spw_time_mono_ns() - t0) / 1e6;
    }
    qsort(t, (size_t)repeats, sizeof(double), cmp_double);
    double m = t[repeats / 2];
    free(t);
    return m;
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        diff = isnan(d) ? INFINITY : fmax(diff, d);
        scale = fmax(scale, fabs(b[i]));
    }
    return diff / scale;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    const char *batches = argc > 2 ? argv[2] : "4096,65536";
    if (repeats < 1) {
        fprintf(stderr, "usage: dense_bench [REPEATS [BATCHES]]\n");
        return 2;
    }
    const struct {
        const char *name;
        uint32_t cross;
        const char *hidden;
    } models[] = {{"deepfm-mlp", 0, "400,400,400"}, {"dcnv2", 3, "400,400"}};
    int gpu_ok = spw_dense_cuda_device_count() > 0;
    if (!spw_dense_cuda_built())
        printf("dense_bench: GPU not available: built without CUDA\n");
    else if (!gpu_ok)
        printf("dense_bench: GPU not available: no CUDA device\n");
    printf("%-11s %7s %10s %12s %10s %12s %9s %10s\n", "model", "batch", "cpu_ms", "cpu_ex/s",
           "cuda_ms", "cuda_ex/s", "cuda/cpu", "max_diff");
    int failed = 0;
    for (size_t mi = 0; mi < sizeof(models) / sizeof(models[0]); mi++) {
        char errstr[256];
        struct spw_dense_spec s;
        spw_dense_spec_default(&s, 39 * 16);
        s.cross_layers = models[mi].cross;
        if (spw_dense_spec_parse_hidden(&s, models[mi].hidden, errstr, sizeof(errstr)) != SPW_OK)
            return 1;
        spw_dense_t *cpu = spw_dense_new(&s, errstr, sizeof(errstr));
        spw_dense_cuda_t *gpu = gpu_ok ? spw_dense_cuda_new(&s, 0, errstr, sizeof(errstr)) : NULL;
        if (!cpu || (gpu_ok && !gpu)) {
            fprintf(stderr, "dense_bench: %s: %s\n", models[mi].name, errstr);
            return 1;
        }
        size_t np = spw_dense_param_count(cpu);
        const char *p = batches;
        while (*p) {
            size_t n = strtoul(p, NULL, 10);
            p += strcspn(p, ",");
            p += *p == ',';
            if (n == 0)
                continue;
            struct bufs b = {
                malloc(np * 4), malloc(n * s.in_dim * 4), malloc(n * 4),           malloc(n * 4),
                malloc(n * 4),  malloc(np * 4),           malloc(n * s.in_dim * 4)};
            float *g2 = malloc(np * 4);
            if (!b.p || !b.x || !b.y || !b.logits || !b.dl || !b.grads || !b.dx || !g2) {
                fprintf(stderr, "dense_bench: out of memory at batch %zu\n", n);
                return 1;
            }
            uint64_t seed = 1;
            spw_dense_init_params(&s, 1, b.p);
            for (size_t j = 0; j < n * s.in_dim; j++)
                b.x[j] = (float)(rng(&seed) >> 40) / 16777216.0f * 0.2f - 0.1f;
            for (size_t j = 0; j < n; j++)
                b.y[j] = (float)(rng(&seed) & 1);
            double diff = NAN;
            if (gpu) {
                if (step(cpu, NULL, &b, n) != SPW_OK)
                    return 1;
                memcpy(g2, b.grads, np * 4);
                if (step(NULL, gpu, &b, n) != SPW_OK) {
                    fprintf(stderr, "dense_bench: CUDA step failed\n");
                    return 1;
                }
                diff = max_rel(b.grads, g2, np);
                if (!(diff <= 1e-4))
                    failed = 1;
            }
            double cms = median_step_ms(cpu, NULL, &b, n, repeats);
            double gms = gpu ? median_step_ms(NULL, gpu, &b, n, repeats) : NAN;
            printf("%-11s %7zu %10.2f %12.0f %10.2f %12.0f %9.3f %10.2e\n", models[mi].name, n, cms,
                   (double)n / cms * 1e3, gms, (double)n / gms * 1e3, gms / cms, diff);
            fflush(stdout);
            free(b.p);
            free(b.x);
            free(b.y);
            free(b.logits);
            free(b.dl);
            free(b.grads);
            free(b.dx);
            free(g2);
        }
        spw_dense_cuda_destroy(gpu);
        spw_dense_destroy(cpu);
    }
    if (failed)
        printf("dense_bench: FAILED: CUDA gradients differ from the CPU's by more than 1e-4\n");
    return failed;
}
