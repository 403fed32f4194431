/* CURVE key files (CurveZMQ): the one reader of the key files that shards and clients are given,
 * shared by the pserver (its secret key and client allow-list) and the PS client. */
#ifndef SPARROW_CURVE_KEY_H
#define SPARROW_CURVE_KEY_H

#include <stdbool.h>
#include <stddef.h>

#include "sparrow/err.h"

/*
 * Accepted files (text, lines of at most SPW_CURVE_LINE_MAX bytes):
 *   a zcert file    metadata / curve section lines, `public-key = "<40 Z85>"`,
 *                   `secret-key = "<40 Z85>"` (the key between the double quotes)
 *   a bare key      a line holding only the 40 Z85 characters (blanks around it ignored)
 * Lines starting with '#', blank lines and zcert section lines ("metadata", "curve") are skipped.
 * The keys are returned as text (40 characters and a NUL): the callers decode them with
 * zmq_z85_decode, which also rejects characters outside Z85 (common does not link ZeroMQ).
 * Every function is thread-safe; nothing is kept between calls. Files are untrusted input.
 */

#define SPW_CURVE_KEY_LEN  40  /* Z85 characters of a 32-byte key */
#define SPW_CURVE_LINE_MAX 511 /* longer lines are read in pieces (and hold no key) */

/* Reads the one key of path: the secret key when secret (the `secret-key` line, else the first
 * line that holds a key and does not name the public key), the public key otherwise (the other
 * way round). A secret key file readable by group or others is logged as a warning. out receives
 * the key and a NUL; the line buffers are wiped. SPW_ERR_NOT_FOUND (errstr names the path and
 * the cause) when the file cannot be opened, SPW_ERR_INVALID when it holds no 40-character key. */
spw_err_t spw_curve_key_read(const char *path, bool secret, char out[SPW_CURVE_KEY_LEN + 1],
                             char *errstr, size_t errstr_size);

/* Calls fn for the public key of every line of path (an allow-list: one key per line, bare or
 * zcert; secret-key lines skipped) with its 1-based line number, stopping at fn's first error,
 * which is returned. SPW_ERR_NOT_FOUND when the file cannot be opened, SPW_ERR_INVALID (errstr:
 * path:line) for a line that holds no 40-character key. fn fills errstr itself when it fails. */
spw_err_t spw_curve_keys_foreach(const char *path,
                                 spw_err_t (*fn)(void *opaque, const char *key, int lineno,
                                                 char *errstr, size_t errstr_size),
                                 void *opaque, char *errstr, size_t errstr_size);

#endif
