/* Error codes shared by every Sparrow module. */
#ifndef SPARROW_ERR_H
#define SPARROW_ERR_H

/*
 * Conventions for every public Sparrow header:
 * - Functions that can fail return spw_err_t: 0 is success, failures are negative.
 * - Constructors return NULL on failure and write a message into (errstr, errstr_size).
 * - Pointers are non-NULL unless the contract says otherwise; lengths are explicit.
 * - `_destroy(NULL)` and `_close(NULL)` do nothing.
 * - Who owns returned memory and which threads may call is written on each function.
 */

typedef int spw_err_t;

#define SPW_OK              0
#define SPW_ERR_INVALID     (-1)  /* malformed input or argument out of range */
#define SPW_ERR_NOMEM       (-2)  /* allocation failed or a memory budget is exhausted */
#define SPW_ERR_IO          (-3)  /* file or socket I/O failed */
#define SPW_ERR_TOO_BIG     (-4)  /* input larger than its configured limit */
#define SPW_ERR_NOT_FOUND   (-5)  /* the requested key, file or name does not exist */
#define SPW_ERR_EXISTS      (-6)  /* the thing to create exists already */
#define SPW_ERR_TIMEOUT     (-7)  /* a deadline passed */
#define SPW_ERR_VERSION     (-8)  /* unsupported protocol or format version */
#define SPW_ERR_CORRUPT     (-9)  /* stored data fails its checksum or structure checks */
#define SPW_ERR_STATE       (-10) /* the call is not valid in the object's current state */
#define SPW_ERR_EOF         (-11) /* end of input (not a failure for stream readers) */
#define SPW_ERR_KAFKA       (-12) /* librdkafka reported an error */
#define SPW_ERR_STORE       (-13) /* RocksDB reported an error */
#define SPW_ERR_RPC         (-14) /* ZeroMQ transport error */
#define SPW_ERR_CUDA        (-15) /* CUDA runtime error or no device */
#define SPW_ERR_STOPPED     (-16) /* shutdown was requested */
#define SPW_ERR_UNSUPPORTED (-17) /* feature not built in or not available */

/* Static text for err (never NULL; unknown codes give "unknown error"). Thread-safe. */
const char *spw_err_str(spw_err_t err);

#include <stddef.h>

/* Writes the printf-style message into errstr (nothing when errstr is NULL or errstr_size 0) and
 * returns rc: `return spw_errf(SPW_ERR_INVALID, errstr, errstr_size, "bad %s", what);`.
 * Thread-safe. */
spw_err_t spw_errf(spw_err_t rc, char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
