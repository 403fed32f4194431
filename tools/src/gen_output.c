/* The generator's output: a double-buffered writer whose thread writes one block while the
 * generating thread fills the other. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sparrow/tools.h"

/* bufs[fill] belongs to the caller; `full`, when set, is the other one, owned by the writer
 * thread until it clears `full`. Every other field is shared under mu. */
struct spw_gen_output {
    int fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct spw_wire_buf bufs[2];
    int fill;
    struct spw_wire_buf *full; /* handed to the writer, not yet written */
    bool done;                 /* no more blocks will come */
    spw_err_t err;             /* sticky: the first write error */
    int err_errno;
    uint64_t bytes;
};

/* Writes all of data to fd. SPW_OK, SPW_ERR_STOPPED when the reader went away (EPIPE), or
 * SPW_ERR_IO with errno set. */
static spw_err_t write_all(int fd, const uint8_t *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EPIPE ? SPW_ERR_STOPPED : SPW_ERR_IO;
        }
        data += n;
        len -= (size_t)n;
    }
    return SPW_OK;
}

static void *writer_main(void *arg)
{
    spw_gen_output_t *out = arg;
    pthread_mutex_lock(&out->mu);
    for (;;) {
        while (!out->full && !out->done)
            pthread_cond_wait(&out->cv, &out->mu);
        if (!out->full)
            break;
        struct spw_wire_buf *block = out->full;
        bool failed = out->err != SPW_OK;
        pthread_mutex_unlock(&out->mu);
        /* after a failure blocks are dropped: the caller learns of it at its next submit */
        spw_err_t err = failed ? SPW_OK : write_all(out->fd, block->data, block->len);
        int saved_errno = errno;
        pthread_mutex_lock(&out->mu);
        if (err != SPW_OK) {
            out->err = err;
            out->err_errno = saved_errno;
        } else if (!failed) {
            out->bytes += block->len;
        }
        block->len = 0;
        out->full = NULL;
        pthread_cond_broadcast(&out->cv);
    }
    pthread_mutex_unlock(&out->mu);
    return NULL;
}

spw_gen_output_t *spw_gen_output_start(int fd, size_t block_bytes, char *errstr, size_t errstr_size)
{
    spw_gen_output_t *out = calloc(1, sizeof(*out));
    if (!out)
        goto out_nomem;
    out->fd = fd;
    /* room for a block plus the example that crosses its end */
    for (int i = 0; i < 2; i++)
        if (spw_wire_buf_reserve(&out->bufs[i], block_bytes + (256u << 10)) != SPW_OK)
            goto out_free_bufs;
    pthread_mutex_init(&out->mu, NULL);
    pthread_cond_init(&out->cv, NULL);
    int rc = pthread_create(&out->thread, NULL, writer_main, out);
    if (rc != 0) {
        snprintf(errstr, errstr_size, "cannot start the writer thread: %s", strerror(rc));
        pthread_cond_destroy(&out->cv);
        pthread_mutex_destroy(&out->mu);
        free(out->bufs[0].data);
        free(out->bufs[1].data);
        free(out);
        return NULL;
    }
    return out;

out_free_bufs:
    free(out->bufs[0].data);
    free(out->bufs[1].data);
    free(out);
out_nomem:
    snprintf(errstr, errstr_size, "out of memory for the output buffers");
    return NULL;
}

struct spw_wire_buf *spw_gen_output_buf(spw_gen_output_t *out)
{
    return &out->bufs[out->fill];
}

spw_err_t spw_gen_output_submit(spw_gen_output_t *out, struct spw_wire_buf **buf)
{
    pthread_mutex_lock(&out->mu);
    while (out->full)
        pthread_cond_wait(&out->cv, &out->mu);
    spw_err_t err = out->err;
    if (err == SPW_OK && out->bufs[out->fill].len > 0) {
        out->full = &out->bufs[out->fill];
        out->fill ^= 1;
        pthread_cond_broadcast(&out->cv);
    }
    pthread_mutex_unlock(&out->mu);
    *buf = &out->bufs[out->fill];
    return err;
}

spw_err_t spw_gen_output_finish(spw_gen_output_t *out, uint64_t *bytes, int *io_errno)
{
    struct spw_wire_buf *buf;
    spw_gen_output_submit(out, &buf);
    pthread_mutex_lock(&out->mu);
    out->done = true;
    pthread_cond_broadcast(&out->cv);
    pthread_mutex_unlock(&out->mu);
    pthread_join(out->thread, NULL);
    spw_err_t err = out->err;
    *bytes = out->bytes;
    *io_errno = out->err_errno;
    pthread_cond_destroy(&out->cv);
    pthread_mutex_destroy(&out->mu);
    free(out->bufs[0].data);
    free(out->bufs[1].data);
    free(out);
    return err;
}
