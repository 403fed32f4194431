/* Text for Sparrow error codes. */
#include "sparrow/err.h"

#include <stdarg.h>
#include <stdio.h>

const char *spw_err_str(spw_err_t err)
{
    switch (err) {
    case SPW_OK:
        return "success";
    case SPW_ERR_INVALID:
        return "invalid argument or input";
    case SPW_ERR_NOMEM:
        return "out of memory";
    case SPW_ERR_IO:
        return "I/O error";
    case SPW_ERR_TOO_BIG:
        return "input exceeds its size limit";
    case SPW_ERR_NOT_FOUND:
        return "not found";
    case SPW_ERR_EXISTS:
        return "already exists";
    case SPW_ERR_TIMEOUT:
        return "timed out";
    case SPW_ERR_VERSION:
        return "unsupported version";
    case SPW_ERR_CORRUPT:
        return "corrupt data";
    case SPW_ERR_STATE:
        return "invalid state for this call";
    case SPW_ERR_EOF:
        return "end of input";
    case SPW_ERR_KAFKA:
        return "Kafka error";
    case SPW_ERR_STORE:
        return "storage error";
    case SPW_ERR_RPC:
        return "RPC transport error";
    case SPW_ERR_CUDA:
        return "CUDA error";
    case SPW_ERR_STOPPED:
        return "stopped";
    case SPW_ERR_UNSUPPORTED:
        return "not supported";
    default:
        return "unknown error";
    }
}

spw_err_t spw_errf(spw_err_t rc, char *errstr, size_t errstr_size, const char *fmt, ...)
{
    if (!errstr || errstr_size == 0)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    return rc;
}
