/* Decimal text of integers without printf (sparrow/fmt.h). */
#include "sparrow/fmt.h"

size_t spw_fmt_u64(char *out, uint64_t v)
{
    char tmp[SPW_FMT_INT_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

size_t spw_fmt_i64(char *out, int64_t v)
{
    if (v >= 0)
        return spw_fmt_u64(out, (uint64_t)v);
    out[0] = '-';
    /* 0 - (uint64_t)v is |v| even at INT64_MIN */
    return 1 + spw_fmt_u64(out + 1, 0 - (uint64_t)v);
}
