/* dense: what the CPU network (src/) and the CUDA network (cuda/) share: the dropout masks'
 * hash and the workspace's shape. C and CUDA C++. Not API. */
#ifndef SPARROW_DENSE_INT_H
#define SPARROW_DENSE_INT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SPW_DENSE_HD __host__ __device__ __forceinline__
#else
#define SPW_DENSE_HD static inline
#endif

/* splitmix64's finaliser. */
SPW_DENSE_HD uint64_t spw_dense__mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Counter-based (no state to carry between host and device): unit j of hidden layer k in
 * training forward t is kept when 24 bits of its hash, as a fraction, are >= p. */
SPW_DENSE_HD int spw_dense__keep(uint64_t seed, uint64_t t, uint32_t k, uint64_t j, float p)
{
    uint64_t h = spw_dense__mix(seed ^ spw_dense__mix(t * 0x9e3779b97f4a7c15ull + k));
    h = spw_dense__mix(h + j * 0xd6e8feb86659fd93ull);
    return (float)(h >> 40) * (1.0f / 16777216.0f) >= p;
}

#endif
