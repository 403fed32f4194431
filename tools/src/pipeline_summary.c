/* The run's results: the coordinator's latest checkpoint and summary.json. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pipeline_int.h"
#include "sparrow/coordinator.h"

spw_err_t spw_pipeline_latest(const spw_pipeline_t *p, uint64_t *epoch, uint64_t *examples)
{
    spw_err_t err = spw_coord_latest_read(p->conf->run_dir, epoch);
    if (err != SPW_OK)
        return err;
    struct spw_coord_manifest m;
    char errstr[256];
    err = spw_coord_manifest_read(p->conf->run_dir, *epoch, &m, errstr, sizeof(errstr));
    if (err != SPW_OK)
        return err;
    *examples = m.example_count;
    spw_coord_manifest_fini(&m);
    return SPW_OK;
}

/* A JSON number, null when not finite. */
static void jnum(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.15g", v);
    else
        fputs("null", f);
}

/* A JSON string of the safe characters the pipeline's names and modes use. */
static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    fputc('"', f);
}

static void jhist(FILE *f, const struct spw_pipeline_hist *h)
{
    fputs("{\"buckets\": [", f);
    for (size_t i = 0; i < h->n; i++) {
        fputs(i ? ", [" : "[", f);
        if (isinf(h->le[i]))
            fputs("\"+Inf\"", f);
        else
            jnum(f, h->le[i]);
        fputs(", ", f);
        jnum(f, h->count[i]);
        fputc(']', f);
    }
    fputs("], \"count\": ", f);
    jnum(f, spw_pipeline_hist_total(h));
    fputs(", \"sum\": ", f);
    jnum(f, h->n ? h->sum : NAN);
    fputs(", \"mean\": ", f);
    jnum(f, spw_pipeline_hist_mean(h));
    fputs(", \"p50\": ", f);
    jnum(f, spw_pipeline_hist_quantile(h, 0.5));
    fputs(", \"p99\": ", f);
    jnum(f, spw_pipeline_hist_quantile(h, 0.99));
    fputc('}', f);
}

spw_err_t spw_pipeline_summary_write(const spw_pipeline_t *p, const struct spw_pipeline_result *r,
                                     const char *path)
{
    const struct spw_pipeline_conf *c = p->conf;
    const struct spw_pipeline_snapshot *s = &r->snap;
    FILE *f = fopen(path, "w");
    if (!f)
        return SPW_ERR_IO;
    fputs("{\n  \"ok\": ", f);
    fputs(r->ok ? "true" : "false", f);
    fputs(",\n  \"drained\": ", f);
    fputs(r->drained ? "true" : "false", f);
    fputs(",\n  \"mode\": ", f);
    jstr(f, r->mode);
    fputs(",\n  \"penalty\": ", f);
    jstr(f, r->penalty);
    fprintf(f, ",\n  \"shards\": %ld,\n  \"trainers\": %ld,\n  \"partitions\": %ld", c->shards,
            c->trainers, c->partitions);
    fputs(",\n  \"run_dir\": ", f);
    jstr(f, c->run_dir);
    const struct {
        const char *name;
        double v;
    } nums[] = {
        {"duration_s", r->duration_s},
        {"examples_produced", r->examples_produced},
        {"examples_trained", r->examples_trained},
        {"ex_per_s", r->ex_per_s},
        {"train_ex_per_s", r->train_ex_per_s},
        {"window_logloss", s->logloss},
        {"window_auc", s->auc},
        {"bayes_logloss", s->bayes_logloss},
        {"bayes_auc", s->bayes_auc},
    };
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        fprintf(f, ",\n  \"%s\": ", nums[i].name);
        jnum(f, nums[i].v);
    }
    fputs(",\n  \"per_trainer\": [", f);
    for (long t = 0; t < c->trainers; t++) {
        const struct spw_pipeline_trainer *tr = &s->trainer[t];
        fprintf(f, "%s\n    {\"name\": \"trainer-%ld\", \"examples\": ", t ? "," : "", t);
        jnum(f, r->trainer_examples[t]);
        fputs(", \"ex_per_s\": ", f);
        jnum(f, r->trainer_ex_per_s[t]);
        fputs(", \"window_logloss\": ", f);
        jnum(f, tr->logloss);
        fputs(", \"window_auc\": ", f);
        jnum(f, tr->auc);
        fputs(", \"bayes_logloss\": ", f);
        jnum(f, tr->bayes_logloss);
        fputs(", \"bayes_auc\": ", f);
        jnum(f, tr->bayes_auc);
        fputs(", \"step\": ", f);
        jnum(f, tr->step);
        fputs(", \"clock\": ", f);
        jnum(f, tr->clock);
        fputs(", \"coord_wait_s\": ", f);
        jnum(f, tr->coord_wait_s);
        fputs(", \"run_wait_s\": ", f);
        jnum(f, r->trainer_run_wait_s[t]);
        fputc('}', f);
    }
    fputs("\n  ],\n  \"staleness\": ", f);
    jhist(f, &s->tau);
    fputs(",\n  \"staleness_class\": {", f); /* by class; {} where the shards lack it */
    for (size_t i = 0; i < s->tau_class.n; i++) {
        fputs(i ? ", " : "", f);
        jstr(f, s->tau_class.value[i]);
        fputs(": ", f);
        jhist(f, &s->tau_class.h[i]);
    }
    fputc('}', f);
    fputs(",\n  \"checkpoint\": {\"latest_epoch\": ", f);
    jnum(f, r->latest_epoch >= 0 ? (double)r->latest_epoch : NAN);
    fputs(", \"manifest_example_count\": ", f);
    jnum(f, r->manifest_examples);
    fputs(", \"pause_p50_s\": ", f);
    jnum(f, spw_pipeline_hist_quantile(&s->pause, 0.5));
    fputs(", \"pause_p99_s\": ", f);
    jnum(f, spw_pipeline_hist_quantile(&s->pause, 0.99));
    fputs(", \"pause\": ", f);
    jhist(f, &s->pause);
    fprintf(f,
            "},\n  \"chaos\": {\"kills\": %ld, \"restarts\": %ld},\n  \"lost_to_retention\": "
            "%llu,\n  \"processes\": [",
            r->kills, r->restarts, (unsigned long long)r->lost_to_retention);
    const spw_launch_t *l = p->launch;
    for (int i = 0; i < spw_launch_count(l); i++) {
        char st[32];
        fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", f);
        jstr(f, spw_launch_name(l, i));
        fputs(", \"exit\": ", f);
        jstr(f, spw_launch_pid(l, i) > 0
                    ? "running"
                    : spw_launch_status_str(spw_launch_status(l, i), st, sizeof(st)));
        fputs(", \"log\": ", f);
        jstr(f, spw_launch_log(l, i));
        fputc('}', f);
    }
    fputs("\n  ]\n}\n", f);
    return fclose(f) == 0 ? SPW_OK : SPW_ERR_IO;
}
