/* Feature hashing, field naming and key placement. Every function is pure and thread-safe. */
#ifndef SPARROW_HASH_H
#define SPARROW_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Largest field id accepted anywhere (ids are 31-bit so that hashed names fit). */
#define SPW_FIELD_ID_MAX 0x7fffffffu

/* Feature key of a raw value: xxHash64 of the value's bytes with the field id as seed
 * (docs/ARCHITECTURE.md §2). Keys are never interpreted further. */
uint64_t spw_hash_key(uint32_t field, const void *value, size_t len);

/* Field id of a field name when no schema maps it: the name itself when it is a decimal number
 * up to SPW_FIELD_ID_MAX, else the low 31 bits of xxHash64(name, seed 0). */
uint32_t spw_hash_field_name(const char *name, size_t len);

/* The Criteo convention for integer features: values above 2 become floor(ln(x)^2), others stay. */
int64_t spw_hash_criteo_bucket(int64_t x);

/* A 64-bit finaliser (SplitMix64's) that spreads keys before sharding; also the mixer of the
 * pserver's row index and the generator's hot loop, hence inline here (one copy of it). */
static inline uint64_t spw_hash_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Jump consistent hash (Lamping & Veach 2014): bucket in [0, buckets) for key; buckets >= 1. */
uint32_t spw_hash_jump(uint64_t key, uint32_t buckets);

/* Shard of a feature key among n shards: jump hash of mix64(key) (docs/ARCHITECTURE.md §3). */
uint32_t spw_hash_shard(uint64_t key, uint32_t n_shards);

#endif
