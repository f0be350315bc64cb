/*
 * philox.h - the Philox4x32-10 counter-based random generator (Salmon, Moraes, Dror,
 * Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011), as static inline
 * functions for the dropout mask.
 *
 * Counter-based: the 4 x 32 random bits of a counter are a pure function of (counter,
 * key), so the dropout decision for element (b, h, i, j) is the same whichever thread,
 * tile or ISA computes it, and the reference reproduces it exactly. It is not a
 * cryptographic generator. Verified against the Random123 known-answer vectors
 * (tests/test_api.c).
 */
#ifndef SDPA_PHILOX_H
#define SDPA_PHILOX_H

#include <stdint.h>

/* Round multipliers and Weyl key increments of Philox4x32 (Salmon et al. 2011, Table 2;
 * the increments are the golden ratio and sqrt(3) - 1 in 0.32 fixed point). */
#define SDPA_PHILOX_M0 0xD2511F53u
#define SDPA_PHILOX_M1 0xCD9E8D57u
#define SDPA_PHILOX_W0 0x9E3779B9u
#define SDPA_PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(ctr, key). */
static inline void sdpa_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                      uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        const uint64_t p0 = (uint64_t)SDPA_PHILOX_M0 * c0;
        const uint64_t p1 = (uint64_t)SDPA_PHILOX_M1 * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += SDPA_PHILOX_W0;
        k1 += SDPA_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The dropout stream of libsdpa: element (b, h, i, j) of the attention weights is kept
 * iff word j % 4 of Philox4x32-10(ctr = {j / 4, i, h, b}, key = {seed, seed >> 32}) is
 * at least `threshold` = round(p 2^32). i, j are the row and key within the sequence,
 * h the query head, b the batch entry (all < 2^32, j < 2^34: validate.c checks). The
 * words of the four keys j = 4t .. 4t + 3 come from one call. */
static inline void sdpa_dropout_words(uint64_t seed, int64_t b, int64_t h, int64_t i,
                                      int64_t j4, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)j4, (uint32_t)i, (uint32_t)h, (uint32_t)b};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    sdpa_philox4x32_10(ctr, key, out);
}

#endif /* SDPA_PHILOX_H */
