/* Internals shared by the wire module's files. */
#ifndef SPARROW_WIRE_INT_H
#define SPARROW_WIRE_INT_H

#include <stddef.h>
#include <stdint.h>

/* Longest varint: 64 bits in 7-bit groups. */
#define SPW_WIRE__VARINT_MAX 10

/* Writes v as a base-128 varint at out (room for SPW_WIRE__VARINT_MAX bytes); returns its
 * length. */
size_t spw_wire__put_varint(uint8_t *out, uint64_t v);

#endif
