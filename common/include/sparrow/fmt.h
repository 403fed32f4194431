/* Decimal text of integers without printf, for hot loops that hash or encode numbers as text. */
#ifndef SPARROW_FMT_H
#define SPARROW_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Longest text spw_fmt_u64 and spw_fmt_i64 write ("-9223372036854775808" is 20 bytes). */
#define SPW_FMT_INT_MAX 20

/* Writes v in decimal at out (at least SPW_FMT_INT_MAX bytes, caller-owned) without a NUL and
 * returns the length (1..20). Pure and thread-safe. */
size_t spw_fmt_u64(char *out, uint64_t v);

/* Like spw_fmt_u64 for a signed value: a '-' before the digits of a negative one (INT64_MIN
 * included). */
size_t spw_fmt_i64(char *out, int64_t v);

#endif
