/* Views over packed little-endian number blocks, and IEEE half <-> single conversion. */
#include "sparrow/wire.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Blocks are little-endian on the wire and viewed in place: a big-endian host would need a
 * byte-swapping copy, which these views cannot give. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "wire blocks assume a little-endian host");

/*
 * Alignment. protobuf-c 1.4 copies every `bytes` field into memory from the allocator, and the
 * unpackers' allocator is the arena, whose allocations are 16-byte aligned; so a block from an
 * unpacker is always aligned for u64/f32 and a view is a plain pointer cast. A block built some
 * other way (pointing into a ZeroMQ frame at an odd offset, say) may not be. Reading through a
 * misaligned pointer is undefined behaviour even where the CPU tolerates it (UBSan reports it,
 * and the compiler may vectorise on the assumption), and the view has no storage to copy into:
 * so a misaligned block is refused with SPW_ERR_INVALID at run time, in every build, and callers
 * holding such blocks use spw_wire_block_copy into their own storage.
 */

/* What an empty block views: a valid, aligned, non-NULL address (callers may memcpy 0 bytes
 * from it, which a NULL pointer would make undefined). */
static const _Alignas(16) uint8_t empty_block[16];

static spw_err_t view(const ProtobufCBinaryData *block, size_t elem_size, size_t align, size_t n,
                      const void **out)
{
    size_t want;
    if (__builtin_mul_overflow(n, elem_size, &want) || block->len != want)
        return SPW_ERR_INVALID;
    if (want == 0) {
        *out = empty_block;
        return SPW_OK;
    }
    if ((uintptr_t)block->data % align != 0)
        return SPW_ERR_INVALID;
    *out = block->data;
    return SPW_OK;
}

spw_err_t spw_wire_block_u64(const ProtobufCBinaryData *block, size_t n, const uint64_t **out)
{
    const void *p;
    spw_err_t rc = view(block, sizeof(uint64_t), alignof(uint64_t), n, &p);
    if (rc == SPW_OK)
        *out = p;
    return rc;
}

spw_err_t spw_wire_block_u32(const ProtobufCBinaryData *block, size_t n, const uint32_t **out)
{
    const void *p;
    spw_err_t rc = view(block, sizeof(uint32_t), alignof(uint32_t), n, &p);
    if (rc == SPW_OK)
        *out = p;
    return rc;
}

spw_err_t spw_wire_block_f32(const ProtobufCBinaryData *block, size_t n, const float **out)
{
    _Static_assert(sizeof(float) == 4, "f32 blocks need a 4-byte float");
    const void *p;
    spw_err_t rc = view(block, sizeof(float), alignof(float), n, &p);
    if (rc == SPW_OK)
        *out = p;
    return rc;
}

spw_err_t spw_wire_block_u16(const ProtobufCBinaryData *block, size_t n, const uint16_t **out)
{
    const void *p;
    spw_err_t rc = view(block, sizeof(uint16_t), alignof(uint16_t), n, &p);
    if (rc == SPW_OK)
        *out = p;
    return rc;
}

spw_err_t spw_wire_block_copy(const ProtobufCBinaryData *block, size_t elem_size, size_t n,
                              void *dst)
{
    size_t want;
    if (__builtin_mul_overflow(n, elem_size, &want) || block->len != want)
        return SPW_ERR_INVALID;
    if (want)
        memcpy(dst, block->data, want);
    return SPW_OK;
}

spw_err_t spw_wire_block_count(const ProtobufCBinaryData *block, size_t elem_size, size_t *n)
{
    if (block->len % elem_size != 0)
        return SPW_ERR_INVALID;
    *n = block->len / elem_size;
    return SPW_OK;
}

/*
 * IEEE 754 binary16: | sign 1 | exponent 5 (bias 15) | mantissa 10 |.
 * Exponent 0 holds zero and subnormals (m * 2^-24); 31 holds inf (m == 0) and NaN.
 * Integer arithmetic only, so that the result does not depend on the FPU's rounding mode or
 * on flush-to-zero settings.
 */

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffffu;

    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u)
            return sign | 0x7c00;
        /* NaN: keep the payload's top bits and force the quiet bit, so it stays a NaN. */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    }
    if (a >= 0x477ff000u) /* >= 65520: beyond halfway past 65504, rounds to inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {    /* below 2^-14: a subnormal half, or zero */
        if (a <= 0x33000000u) /* <= 2^-25: zero (2^-25 itself is a tie, zero is even) */
            return sign;
        uint32_t e = a >> 23; /* 102..112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value / 2^-24 = m >> shift; 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++; /* may carry into 0x400, the smallest normal: still the right encoding */
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even; a carry
     * out of the mantissa correctly bumps the exponent (up to inf). */
    a -= (uint32_t)(127 - 15) << 23;
    a += 0xfffu + ((a >> 13) & 1);
    return (uint16_t)(sign | (a >> 13));
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f;
    uint32_t m = h & 0x3ff;
    uint32_t x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 127 - 15) << 23) | (m << 13);
    } else if (m == 0) {
        x = sign;
    } else {
        /* Subnormal: normalise so that bit 10 is the implicit one. */
        int shift = __builtin_clz(m) - 21; /* 1..10 */
        m = (m << shift) & 0x3ff;
        x = sign | ((uint32_t)(127 - 15 + 1 - shift) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t spw_wire_f32_to_f16(float f)
{
    return f32_to_f16(f);
}

float spw_wire_f16_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}

void spw_wire_f32_to_f16_n(const float *restrict src, uint16_t *restrict dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_f16(src[i]);
}

/* One value rounded stochastically with the random bits r (see the header). A half's magnitude
 * bits are the single's shifted: for a normal half, (a - (112 << 23)) >> 13 (the exponent rebased
 * from 127 to 15), whose dropped 13 bits are the fraction of a half-step the value lies above the
 * half below it; adding 13 random bits before the shift carries into the half above with exactly
 * that probability (into the exponent too: the next binade's first half). A subnormal half is the
 * value in units of 2^-24: the single's 24-bit significand shifted right by 126 - e, rounded up
 * likewise with shift random bits. */
static inline uint16_t f32_to_f16_stochastic(float f, uint64_t r)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x477fe000u) /* >= 65504, inf, nan: no half above to round to */
        return f32_to_f16(f);
    if (a >= 0x38800000u) /* >= 2^-14: a normal half */
        return (uint16_t)(sign | ((a - 0x38000000u + (uint32_t)(r & 0x1fffu)) >> 13));
    uint32_t e = a >> 23;
    if (e < 64) /* below 2^-63 (single subnormals and zero included) */
        return sign;
    uint64_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..62 */
    /* at most 0x400, the smallest normal half's encoding, when the carry goes all the way */
    return (uint16_t)(sign | ((m + (r & ((UINT64_C(1) << shift) - 1))) >> shift));
}

void spw_wire_f32_to_f16_stochastic_n(const float *restrict src, uint16_t *restrict dst, size_t n,
                                      uint64_t *rng)
{
    uint64_t s = *rng ? *rng : UINT64_C(0x9e3779b97f4a7c15);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        dst[i] = f32_to_f16_stochastic(src[i], s * UINT64_C(0x2545f4914f6cdd1d)); /* xorshift64* */
    }
    *rng = s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define F16C_PATH 1
/* Eight halves per instruction (vcvtph2ps, exact for every half but a signalling NaN, which
 * comes out quiet); the build targets baseline x86-64, so it is chosen at run time. */
__attribute__((target("avx,f16c"))) static void f16_to_f32_n_f16c(const uint16_t *restrict src,
                                                                  float *restrict dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = f16_to_f32(src[i]);
}

/* Whether the CPU has F16C and AVX and the OS saves the YMM registers (cpuid, xgetbv), asked
 * once: 1 yes, 0 no (the first callers may race to the same answer). */
static bool have_f16c(void)
{
    static atomic_int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        unsigned a, b, c, d;
        v = 0;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) &&
            (c & bit_F16C)) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            v = (lo & 6u) == 6u; /* XMM and YMM state enabled */
        }
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v == 1;
}
#endif

void spw_wire_f16_to_f32_n(const uint16_t *restrict src, float *restrict dst, size_t n)
{
#ifdef F16C_PATH
    if (n >= 8 && have_f16c()) {
        f16_to_f32_n_f16c(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = f16_to_f32(src[i]);
}
