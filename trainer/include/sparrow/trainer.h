/* trainer: the worker of DESIGN.md §4. For now, the backend operations shared by the CPU oracle
 * and the CUDA backend; device pointers never appear in this header. */
#ifndef SPARROW_TRAINER_H
#define SPARROW_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparrow/err.h"

/*
 * Gather: out[i*dim .. (i+1)*dim) = rows[idx[i]*dim .. (idx[i]+1)*dim) for i < n. This is how a
 * batch's feature occurrences pick their embedding rows out of the block of unique pulled rows.
 * Every idx[i] must be < n_rows (asserted on the CPU; checked on the GPU, see below).
 */

/* CPU backend (the oracle). Pure function of its inputs; thread-safe. */
void spw_cpu_gather_rows(const float *rows, size_t n_rows, uint32_t dim, const uint32_t *idx,
                         size_t n, float *out);

/* True when this build has the CUDA backend (nvcc was found at configure time). */
bool spw_cuda_built(void);

/* Number of usable CUDA devices (0 without a driver, a device, or the CUDA backend). */
int spw_cuda_device_count(void);

/* The same gather on the GPU: copies rows and idx from host memory to device 0, runs the kernel,
 * copies the result into out (host). Returns SPW_ERR_UNSUPPORTED without the CUDA backend,
 * SPW_ERR_CUDA when no device is usable or a CUDA call fails, SPW_ERR_INVALID when an index is
 * out of range (found by the kernel; out is then unspecified). Thread-safe (each call uses its
 * own stream and buffers). */
spw_err_t spw_cuda_gather_rows(const float *rows, size_t n_rows, uint32_t dim,
                               const uint32_t *idx, size_t n, float *out);

#endif
