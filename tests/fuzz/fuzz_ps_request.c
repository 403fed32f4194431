/* Fuzz target: one request frame through the shard's decode, validation and handlers (pull, push,
 * stats, health; checkpoint requests are answered but point at a scratch directory). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_int.h"
#include "sparrow/fs.h"
#include "sparrow/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static spw_ps_server_t *srv;
static char dir[64];

static void cleanup(void)
{
    spw_ps_server_destroy(srv);
    spw_fs_remove_tree(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv) {
        spw_log_init("fuzz", SPW_LOG_ERROR);
        snprintf(dir, sizeof(dir), "/tmp/fuzz_ps_request.XXXXXX");
        if (!mkdtemp(dir))
            abort();
        struct spw_ps_server_conf c = {0};
        c.listen = "inproc://fuzz_ps_request";
        c.shards = 2;
        c.max_frame = 1 << 20;
        c.data_dir = dir;
        c.restore = false;
        c.store.dim = 4;
        spw_ps_optim_conf_default(&c.store.optim);
        c.store.penalty.kind = SPW_PS_PENALTY_INVERSE;
        c.store.memory_bytes = 1 << 20;
        c.store.admit_min_count = 2;
        char err[256];
        srv = spw_ps_server_new(&c, err, sizeof(err));
        if (!srv) {
            fprintf(stderr, "fuzz_ps_request: %s\n", err);
            abort();
        }
        atexit(cleanup);
    }
    spw_ps__server_handle_frame(srv, data, size);
    return 0;
}
