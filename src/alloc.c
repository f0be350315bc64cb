/*
 * alloc.c - the one place the library allocates memory: per-call scratch, split-KV
 * partials, the reference's row buffers, the layer's activations. Nothing else in src/
 * calls malloc or free, so a test can make the k-th allocation of a call fail and check
 * that every entry point reports SDPA_ERR_OUT_OF_MEMORY with its outputs untouched and
 * nothing leaked.
 *
 * The failure injection is thread-local and off unless a test arms it on its own
 * thread (every allocation of a call happens on the calling thread, before any OpenMP
 * team starts), so concurrent callers never see each other's setting. It is internal:
 * hidden in the shared library, reachable only by linking the static one.
 */
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

/* 64 bytes: the cache line of x86-64 and arm64, and the alignment the kernels' scratch
 * contract asks for (kernels/ukernel.h). */
#define ALIGN 64

static _Thread_local int64_t fail_at;   /* > 0: the fail_at-th allocation from now fails */
static _Thread_local int64_t allocated; /* allocations attempted on this thread */

void *sdpa_alloc(size_t bytes) {
    allocated++;
    if (fail_at > 0 && --fail_at == 0)
        return NULL;
    if (bytes > SIZE_MAX - ALIGN)
        return NULL;
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still gets a block, so a
     * NULL always means out of memory */
    const size_t n = bytes == 0 ? ALIGN : (bytes + ALIGN - 1) / ALIGN * ALIGN;
    return aligned_alloc(ALIGN, n);
}

void sdpa_free(void *p) { free(p); }

void sdpa_alloc_fail_at(int64_t k) { fail_at = k > 0 ? k : 0; }

int64_t sdpa_alloc_count(void) { return allocated; }
