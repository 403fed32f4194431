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

/* Shard of a feature key among n shards: jump hash of mix64(key) (docs/ARCHITECTURE.md §3); the
 * dense blocks of a deep model (below) all live on shard 0. */
uint32_t spw_hash_shard(uint64_t key, uint32_t n_shards);

/* The dense blocks of a deep model (docs/ARCHITECTURE.md §3): its dense parameters (MLP and cross
 * layers) cut into rows of the model's dim, block i at key SPW_DENSE_KEY_BASE + i. These keys are
 * reserved: their rows start at zero on a shard (the trainer adds the seeded initial weights, see
 * spw_model_dense_init), are never subject to admission or TTL, and all go to shard 0 so that
 * one shard applies and publishes a step's dense update whole. A feature whose hash falls in the
 * range is treated as one (a collision: 2^-40 of the key space). */
#define SPW_DENSE_KEY_BASE       0xFFFFFFFFFF000000ull
#define SPW_DENSE_KEY_MAX_BLOCKS (1u << 24)

static inline int spw_key_is_dense(uint64_t key)
{
    return key >= SPW_DENSE_KEY_BASE;
}

static inline uint64_t spw_dense_block_key(uint32_t block)
{
    return SPW_DENSE_KEY_BASE + block;
}

#endif
