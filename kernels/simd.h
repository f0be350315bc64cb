/*
 * simd.h - the few helpers every SIMD kernel table shares (x86 and NEON): forced
 * inlining, full unrolling, the byte size of a storage type, prefetching a row of caller
 * memory ahead of its use.
 *
 * It holds no instruction of any ISA (only compiler builtins every target has), so a
 * table file may include it whatever its flags. It is not a vector layer: vectors,
 * loads, masks and the exp live in kernels/x86/ (vec_*.h, tiles.h) and in
 * kernels/neon/ (neon.c, neon_mem.h).
 */
#ifndef SDPA_SIMD_H
#define SDPA_SIMD_H

#include <stddef.h>

#include "sdpa.h"
#include "ukernel.h"

/* The tile functions are written once with compile-time row/vector counts and
 * instantiated per count; forcing the inlining is what turns their small arrays of
 * vectors (accumulators, loaded rows) into registers: a call would put them on the stack. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Full unrolling for loops whose count is a compile-time constant once a tile is
 * instantiated (rows, vectors, transposes), so arrays of vectors become registers; gcc
 * and clang spell it differently. gcc takes a bound: 32 covers the longest such loop (a
 * register tile's 24 accumulators). */
#if defined(__clang__)
#define UNROLL_FULL _Pragma("clang loop unroll(full)")
#else
#define UNROLL_FULL _Pragma("GCC unroll 32")
#endif
/* And none, for a loop whose copies would only add code (the prefetches of a step). */
#if defined(__clang__)
#define NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define NO_UNROLL _Pragma("GCC unroll 1")
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* Bytes of one element of a storage type (validate.c admits only these three). */
static inline size_t elem_bytes(sdpa_dtype dt) { return dt == SDPA_F32 ? 4 : 2; }

/* Lines [0, nb) bytes of a row of caller memory into the cache, ahead of its use: see
 * SDPA_PREFETCH_AHEAD in ukernel.h. Into L1 (x86 prefetcht0, Arm PRFM PLDL1KEEP) where
 * l1, else L2 (prefetcht1, PLDL2KEEP): sdpa_prefetch_l1 for a stream's rows,
 * sdpa_prefetch_at_l1 for rows at addresses, which src/dispatch.c sets once from CPUID
 * (its comment has the measurements). Unrolled (in full where
 * nb is a constant), because a loop around each prefetch was slower in decode, where the
 * prefetches are what the loads wait on (docs/PERFORMANCE.md, "Kernel measurements"). */
ALWAYS_INLINE void prefetch_row_to(const char *row, size_t nb, int l1) {
    if (l1) {
        _Pragma("GCC unroll 16")
        for (size_t b = 0; b < nb; b += 64) /* 64-byte lines */
            __builtin_prefetch(row + b, 0, 3);
    } else {
        _Pragma("GCC unroll 16")
        for (size_t b = 0; b < nb; b += 64)
            __builtin_prefetch(row + b, 0, 2);
    }
}

/* prefetch_row into L1 or L2 as sdpa_prefetch_l1 says (a stream's rows). */
ALWAYS_INLINE void prefetch_row(const char *row, size_t nb) {
    prefetch_row_to(row, nb, sdpa_prefetch_l1);
}

#endif /* SDPA_SIMD_H */
