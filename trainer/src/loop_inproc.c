/* trainer: in-process parameter-server shards for the worker loop (tests, benchmarks, one-box
 * runs): pserver's row store opened in the trainer's own process, driven by the PS client's
 * in-process transport. */
#include "loop_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "sparrow/fs.h"

spw_err_t spw_trn__inproc_open(struct spw_trn__inproc *ip, const struct spw_trainer_loop_conf *conf,
                               char *errstr, size_t errstr_size)
{
    const struct spw_trainer_params *p = &conf->params;
    if (conf->inproc_dir && conf->inproc_dir[0]) {
        ip->root = strdup(conf->inproc_dir);
        if (ip->root && mkdir(ip->root, 0700) != 0 && errno != EEXIST) {
            snprintf(errstr, errstr_size, "trainer: mkdir %s: %s", ip->root, strerror(errno));
            return SPW_ERR_IO;
        }
    } else {
        ip->root = strdup("/tmp/sparrow-trainer-XXXXXX");
        if (ip->root && !mkdtemp(ip->root)) {
            snprintf(errstr, errstr_size, "trainer: mkdtemp: %s", strerror(errno));
            free(ip->root);
            ip->root = NULL;
            return SPW_ERR_IO;
        }
        ip->temporary = true;
    }
    if (!ip->root || !(ip->stores = calloc(conf->inproc_shards, sizeof(spw_ps_store_t *))) ||
        !(ip->ahead = calloc(conf->inproc_shards, sizeof(*ip->ahead)))) {
        snprintf(errstr, errstr_size, "trainer: out of memory");
        return SPW_ERR_NOMEM;
    }
    for (uint32_t s = 0; s < conf->inproc_shards; s++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/shard-%u", ip->root, s);
        struct spw_ps_store_conf sc = {0};
        sc.shard = s;
        sc.dim = p->model.dim;
        spw_ps_optim_conf_default(&sc.optim);
        sc.optim.kind = p->optimizer == SPW_REF_SGD ? SPW_PS_SGD : SPW_PS_ADAGRAD;
        sc.optim.lr = p->lr;
        sc.optim.lr_dense = p->lr_dense;
        sc.optim.eps = p->eps;
        sc.optim.init_scale = p->init_scale;
        sc.penalty = conf->inproc_penalty;
        sc.seed = p->seed;
        sc.memory_bytes = conf->inproc_memory_bytes;
        sc.db_path = path;
        if (conf->inproc_restore_epoch > 0 &&
            spw_ps_checkpoint_restore_epoch(conf->inproc_restore_root, s,
                                            conf->inproc_restore_epoch, path, errstr,
                                            errstr_size) != SPW_OK)
            return SPW_ERR_STORE;
        ip->stores[s] = spw_ps_store_open(&sc, errstr, errstr_size);
        if (!ip->stores[s])
            return SPW_ERR_STORE;
        ip->n = s + 1;
    }
    return SPW_OK;
}

void spw_trn__inproc_close(struct spw_trn__inproc *ip)
{
    for (uint32_t s = 0; s < ip->n; s++)
        spw_ps_store_close(ip->stores[s]);
    free(ip->stores);
    free(ip->ahead);
    if (ip->root && ip->temporary)
        spw_fs_remove_tree(ip->root);
    free(ip->root);
    memset(ip, 0, sizeof(*ip));
}

void spw_trn__inproc_note_ahead(struct spw_trn__inproc *ip)
{
    for (uint32_t s = 0; s < ip->n; s++)
        spw_ps_store_slab_ahead(ip->stores[s], &ip->ahead[s]);
}

void spw_trn__inproc_populate_ahead(const struct spw_trn__inproc *ip, const atomic_bool *stop)
{
#ifdef MADV_POPULATE_WRITE
    const size_t chunk = 2u << 20;
    for (uint32_t s = 0; s < ip->n; s++) {
        char *p = ip->ahead[s].addr;
        for (size_t off = 0; off < ip->ahead[s].len; off += chunk) {
            if (atomic_load_explicit(stop, memory_order_relaxed))
                return;
            size_t len = ip->ahead[s].len - off < chunk ? ip->ahead[s].len - off : chunk;
            (void)madvise(p + off, len, MADV_POPULATE_WRITE); /* advice: fine if refused */
        }
    }
#else
    (void)ip;
    (void)stop;
#endif
}
