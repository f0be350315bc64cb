/*
 * context_parallel_mpi.c - context parallelism over MPI with libsdpa: the keys and
 * values of a long sequence sharded across ranks, each rank's partial attention computed
 * by sdpa_forward, the partials combined by sdpa_merge. It is an example of how a user
 * who outgrows one machine runs libsdpa on an existing distributed runtime (Open MPI
 * here), and the test that the pieces agree with one process's sdpa_forward: rank 0
 * computes the whole attention itself and prints how far the distributed result is from
 * it. It is not a distributed runtime of its own.
 *
 *   mpirun -np N context_parallel_mpi [--mode ring|allgather] [--causal 0|1]
 *                                     [--len-q T] [--len-kv T] [--dim D]
 *
 * Two schemes:
 *   allgather (decode): every rank holds Q; rank r holds keys [k_r, k_r+1); each computes
 *     its partial (O_r, lse_r) for every query row, the partials are all-gathered, and
 *     every rank merges them in rank order: O = sum_r exp(lse_r - L) O_r.
 *   ring (prefill, ring attention): rank r holds query rows [q_r, q_r+1) and keys
 *     [k_r, k_r+1); N steps pass the K/V shards around the ring (MPI_Sendrecv_replace);
 *     at each step a rank computes its rows against the shard it holds and merges the
 *     partial into its running (O, lse) in place; shards entirely in its rows' future
 *     (causal) are skipped. The rows are gathered on rank 0 at the end.
 *
 * Causal alignment is bottom-right over the whole sequence (row i sees j <= i + Tkv - Tq).
 * A rank's rows [qa, qb) against a shard [ka, kb) see, in local indices, j' <= i' + off
 * with off = qa + Tkv - Tq - ka; partial_causal() expresses that with libsdpa's own
 * modes (no mask tensor): all visible, nothing visible, bottom-right causal on the first
 * Tq_p + off keys, or a window to the right of a non-causal diagonal.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdpa.h>

enum { B = 2, HQ = 8, HKV = 2 };

/* Element e of tensor `which` of the global problem: the same values on every rank. */
static float value(int which, int64_t e) {
    uint64_t z = (uint64_t)e * 0x9e3779b97f4a7c15ull + (uint64_t)which * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (float)((double)((z ^ (z >> 31)) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* [B, H, T, D] contiguous, rows [t0, t1) of each (b, h) of the global tensor `which` (of
 * T rows). */
static float *slice(int which, int64_t H, int64_t T, int64_t D, int64_t t0, int64_t t1) {
    const int64_t n = t1 - t0;
    float *a = malloc((size_t)(B * H * (n > 0 ? n : 1) * D) * sizeof(float));
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t t = t0; t < t1; t++)
            for (int64_t d = 0; d < D; d++)
                a[(bh * n + (t - t0)) * D + d] = value(which, (bh * T + t) * D + d);
    return a;
}

/* Rows [*a, *b) of n split as evenly as possible over `size` ranks. */
static void share(int64_t n, int size, int rank, int64_t *a, int64_t *b) {
    *a = n * rank / size;
    *b = n * (rank + 1) / size;
}

/* The partial of query rows [qa, qb) (q: their [B, HQ, qb - qa, D]) against the keys
 * [ka, kb) (k, v: [B, HKV, kb - ka, D]) of a sequence of Tq rows and Tkv keys, into o
 * and lse. Returns 0 when no row sees any of these keys (o and lse untouched: the part
 * adds nothing), 1 when computed. */
static int partial_causal(int causal, int64_t Tq, int64_t Tkv, int64_t D, int64_t qa,
                          int64_t qb, int64_t ka, int64_t kb, const float *q, const float *k,
                          const float *v, float *o, float *lse) {
    const int64_t tq = qb - qa, tkv = kb - ka;
    if (tq <= 0 || tkv <= 0)
        return 0;
    sdpa_desc d = {.batch = B, .heads_q = HQ, .heads_kv = HKV, .len_q = tq, .len_kv = tkv,
                   .dim_qk = D, .dim_v = D};
    int64_t kv_used = tkv;
    if (causal) {
        const int64_t off = qa + Tkv - Tq - ka; /* local row i' sees j' <= i' + off */
        if (off + tq - 1 < 0)
            return 0;                               /* the shard is in every row's future */
        if (off < tkv - 1) {                        /* otherwise every key is visible */
            if (tq + off <= tkv) {                  /* bottom-right on the first keys */
                d.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
                kv_used = tq + off;
            } else {                                /* a window right of the diagonal */
                d.window = 1;
                d.window_left = SDPA_MAX_DIM;
                d.window_right = off - (tkv - tq);
            }
        }
    }
    d.len_kv = kv_used;
    /* views of the shard's first kv_used keys: the strides stay those of tkv rows */
    sdpa_tensor tq_ = sdpa_tensor_bhtd(q, SDPA_F32, HQ, tq, D);
    sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, HKV, tkv, D);
    sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, HKV, tkv, D);
    sdpa_tensor to = sdpa_tensor_bhtd(o, SDPA_F32, HQ, tq, D);
    const sdpa_status st = sdpa_forward(&d, &tq_, &tk, &tv, &to, lse);
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_forward: %s\n", sdpa_strerror(st));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return 1;
}

/* (o, lse) += the partial (po, pl) of the same tq rows, merged in place. */
static void merge_into(int64_t tq, int64_t D, float *o, float *lse, const float *po,
                       const float *pl) {
    const sdpa_tensor parts[2] = {sdpa_tensor_bhtd(o, SDPA_F32, HQ, tq, D),
                                  sdpa_tensor_bhtd(po, SDPA_F32, HQ, tq, D)};
    const float *lses[2] = {lse, pl};
    const sdpa_merge_desc md = {.batch = B, .heads = HQ, .len = tq, .dim = D, .parts = 2};
    const sdpa_status st = sdpa_merge(&md, parts, lses, &parts[0], lse);
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_merge: %s\n", sdpa_strerror(st));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static int64_t arg(int argc, char **argv, const char *name, int64_t def) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return strtoll(argv[i + 1], NULL, 10);
    return def;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = "ring";
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--mode") == 0)
            mode = argv[i + 1];
    const int ring = strcmp(mode, "ring") == 0;
    const int causal = (int)arg(argc, argv, "--causal", 1);
    const int64_t Tkv = arg(argc, argv, "--len-kv", 600);
    const int64_t Tq = arg(argc, argv, "--len-q", ring ? Tkv : 1);
    const int64_t D = arg(argc, argv, "--dim", 64);
    if (Tq < 1 || Tkv < 1 || D < 1 || (!ring && strcmp(mode, "allgather") != 0)) {
        if (rank == 0)
            fprintf(stderr, "usage: context_parallel_mpi [--mode ring|allgather] [--causal "
                            "0|1] [--len-q T] [--len-kv T] [--dim D]\n");
        MPI_Finalize();
        return 2;
    }

    int64_t ka, kb, qa = 0, qb = Tq;
    share(Tkv, size, rank, &ka, &kb);
    if (ring)
        share(Tq, size, rank, &qa, &qb);
    const int64_t tq = qb - qa, rows = B * HQ * tq;
    float *q = slice(0, HQ, Tq, D, qa, qb);
    float *o = calloc((size_t)(rows > 0 ? rows * D : 1), sizeof(float));
    float *lse = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        lse[r] = -INFINITY; /* nothing seen yet: a part that adds nothing */
    float *po = malloc((size_t)(rows > 0 ? rows * D : 1) * sizeof(float));
    float *pl = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(float));

    if (ring) {
        /* the K/V shard this rank holds, in a buffer sized for the largest shard */
        const int64_t smax = (Tkv + size - 1) / size, sbuf = B * HKV * smax * D;
        float *k = calloc((size_t)sbuf, sizeof(float)), *v = calloc((size_t)sbuf, sizeof(float));
        float *k0 = slice(1, HKV, Tkv, D, ka, kb), *v0 = slice(2, HKV, Tkv, D, ka, kb);
        memcpy(k, k0, (size_t)(B * HKV * (kb - ka) * D) * sizeof(float));
        memcpy(v, v0, (size_t)(B * HKV * (kb - ka) * D) * sizeof(float));
        free(k0), free(v0);
        for (int step = 0; step < size; step++) {
            const int owner = (rank - step + size) % size; /* whose shard this is */
            int64_t sa, sb;
            share(Tkv, size, owner, &sa, &sb);
            if (partial_causal(causal, Tq, Tkv, D, qa, qb, sa, sb, q, k, v, po, pl))
                merge_into(tq, D, o, lse, po, pl);
            if (step + 1 < size) { /* pass the shard to the next rank, take the previous */
                MPI_Sendrecv_replace(k, (int)sbuf, MPI_FLOAT, (rank + 1) % size, 0,
                                     (rank - 1 + size) % size, 0, MPI_COMM_WORLD,
                                     MPI_STATUS_IGNORE);
                MPI_Sendrecv_replace(v, (int)sbuf, MPI_FLOAT, (rank + 1) % size, 1,
                                     (rank - 1 + size) % size, 1, MPI_COMM_WORLD,
                                     MPI_STATUS_IGNORE);
            }
        }
        free(k), free(v);
    } else {
        /* every rank: its shard's partial of every row; then all partials to all ranks */
        float *k = slice(1, HKV, Tkv, D, ka, kb), *v = slice(2, HKV, Tkv, D, ka, kb);
        if (!partial_causal(causal, Tq, Tkv, D, 0, Tq, ka, kb, q, k, v, po, pl)) {
            memset(po, 0, (size_t)(rows * D) * sizeof(float));
            for (int64_t r = 0; r < rows; r++)
                pl[r] = -INFINITY;
        }
        float *all_o = malloc((size_t)(size * rows * D) * sizeof(float));
        float *all_l = malloc((size_t)(size * rows) * sizeof(float));
        MPI_Allgather(po, (int)(rows * D), MPI_FLOAT, all_o, (int)(rows * D), MPI_FLOAT,
                      MPI_COMM_WORLD);
        MPI_Allgather(pl, (int)rows, MPI_FLOAT, all_l, (int)rows, MPI_FLOAT, MPI_COMM_WORLD);
        sdpa_tensor *parts = malloc((size_t)size * sizeof(sdpa_tensor));
        const float **lses = malloc((size_t)size * sizeof(float *));
        for (int r = 0; r < size; r++) {
            parts[r] = sdpa_tensor_bhtd(all_o + (size_t)r * (size_t)(rows * D), SDPA_F32, HQ,
                                        tq, D);
            lses[r] = all_l + (size_t)r * (size_t)rows;
        }
        const sdpa_tensor to = sdpa_tensor_bhtd(o, SDPA_F32, HQ, tq, D);
        const sdpa_merge_desc md = {.batch = B, .heads = HQ, .len = tq, .dim = D,
                                    .parts = size};
        if (sdpa_merge(&md, parts, lses, &to, lse) != SDPA_OK)
            MPI_Abort(MPI_COMM_WORLD, 2);
        free(parts), free(lses), free(all_o), free(all_l), free(k), free(v);
    }

    /* every row on rank 0: [B, HQ, Tq, D] from each rank's rows [qa, qb) */
    float *got = NULL, *got_l = NULL;
    if (rank == 0) {
        got = malloc((size_t)(B * HQ * Tq * D) * sizeof(float));
        got_l = malloc((size_t)(B * HQ * Tq) * sizeof(float));
    }
    for (int r = 0; r < (ring ? size : 1); r++) {
        int64_t ra = 0, rb = Tq;
        if (ring)
            share(Tq, size, r, &ra, &rb);
        const int64_t n = rb - ra;
        for (int64_t bh = 0; bh < B * HQ && n > 0; bh++) {
            if (r == rank && rank == 0) {
                memcpy(got + (bh * Tq + ra) * D, o + bh * n * D, (size_t)(n * D) * sizeof(float));
                memcpy(got_l + bh * Tq + ra, lse + bh * n, (size_t)n * sizeof(float));
            } else if (r == rank) {
                MPI_Send(o + bh * n * D, (int)(n * D), MPI_FLOAT, 0, 10, MPI_COMM_WORLD);
                MPI_Send(lse + bh * n, (int)n, MPI_FLOAT, 0, 11, MPI_COMM_WORLD);
            } else if (rank == 0) {
                MPI_Recv(got + (bh * Tq + ra) * D, (int)(n * D), MPI_FLOAT, r, 10,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Recv(got_l + bh * Tq + ra, (int)n, MPI_FLOAT, r, 11, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
        }
    }

    int ok = 1;
    if (rank == 0) { /* one process's sdpa_forward over the whole sequence */
        float *qa_ = slice(0, HQ, Tq, D, 0, Tq), *k = slice(1, HKV, Tkv, D, 0, Tkv);
        float *v = slice(2, HKV, Tkv, D, 0, Tkv);
        float *want = malloc((size_t)(B * HQ * Tq * D) * sizeof(float));
        float *want_l = malloc((size_t)(B * HQ * Tq) * sizeof(float));
        const sdpa_desc d = {.batch = B, .heads_q = HQ, .heads_kv = HKV, .len_q = Tq,
                             .len_kv = Tkv, .dim_qk = D, .dim_v = D,
                             .causal = causal ? SDPA_CAUSAL_BOTTOM_RIGHT : SDPA_CAUSAL_NONE};
        const sdpa_tensor tq_ = sdpa_tensor_bhtd(qa_, SDPA_F32, HQ, Tq, D);
        const sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, HKV, Tkv, D);
        const sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, HKV, Tkv, D);
        const sdpa_tensor tw = sdpa_tensor_bhtd(want, SDPA_F32, HQ, Tq, D);
        ok = sdpa_forward(&d, &tq_, &tk, &tv, &tw, want_l) == SDPA_OK;
        double max_abs = 0.0, max_rel = 0.0;
        int64_t bad = 0;
        for (int64_t e = 0; e < B * HQ * Tq * D + B * HQ * Tq; e++) {
            const int is_l = e >= B * HQ * Tq * D;
            const int64_t i = is_l ? e - B * HQ * Tq * D : e;
            const double x = is_l ? got_l[i] : got[i], r = is_l ? want_l[i] : want[i];
            const double err = fabs(x - r);
            /* the suite's fp32 rule: |x - r| <= 1e-5 + 1e-4 |r| (DESIGN section 6) */
            bad += !(err <= 1e-5 + 1e-4 * fabs(r));
            max_abs = err > max_abs ? err : max_abs;
            if (fabs(r) > 1e-3 && err / fabs(r) > max_rel)
                max_rel = err / fabs(r);
        }
        ok &= bad == 0;
        printf("context parallel, %d rank%s, %s, %s, Tq %lld Tkv %lld D %lld: against one "
               "process max_abs %.3g max_rel %.3g, %lld of %lld outside 1e-5 + 1e-4 |r|: %s\n",
               size, size > 1 ? "s" : "", mode, causal ? "causal" : "non-causal",
               (long long)Tq, (long long)Tkv, (long long)D, max_abs, max_rel, (long long)bad,
               (long long)(B * HQ * Tq * (D + 1)), ok ? "ok" : "MISMATCH");
        free(qa_), free(k), free(v), free(want), free(want_l), free(got), free(got_l);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(q), free(o), free(lse), free(po), free(pl);
    MPI_Finalize();
    return ok ? 0 : 1;
}
