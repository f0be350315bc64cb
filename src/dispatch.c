/*
 * dispatch.c - the ISA registry and which kernel table runs: one row per instruction set
 * (its name, its table, the table it starts from, whether this CPU runs it), CPU feature
 * detection, the SDPA_ISA override and the process-wide choice, made once.
 *
 * The registry is the one list every part of the project reads (the driver, the tests,
 * the bench, sdpa-run, sdpa-cpuinfo). Adding an ISA is a row below, its kernels/<isa>/
 * file, its Makefile flags and its sdpa_isa value. A row's table may be partial: it
 * starts from its base row's composed table and overrides the entries it sets (BLIS's
 * context pattern), so an ISA can land kernel by kernel; the composed tables are checked
 * for missing entries once, at first use, and an incomplete one is not usable.
 *
 * Detection asks the CPU (CPUID) and the OS (XGETBV: is the register state saved on a
 * context switch?) on x86; a CPU that has AVX-512 under an OS that does not enable ZMM
 * state must not run AVX-512 code. On aarch64 it reads the kernel's HWCAP/HWCAP2 words
 * (getauxval), which the kernel sets only for state it supports. This file is compiled
 * with no -m flags; it only references the tables the Makefile built (SDPA_BUILD_<ISA>
 * macros). It does not choose tile sizes or threads: that is the driver's business.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

const char *sdpa_isa_name(sdpa_isa isa) {
    if (isa == SDPA_ISA_AUTO)
        return "auto";
    const sdpa_isa_info *r = sdpa_isa_lookup(isa);
    return r ? r->name : "unknown";
}

/* ---- CPU detection ------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    /* XGETBV with ECX = 0 reads XCR0 (Intel SDM Vol. 2B, XGETBV); encoded as bytes so
     * the file needs no -mxsave. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

void sdpa_cpu_x86(sdpa_x86_cpu *f) {
    memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    f->cpuid = 1;
    f->max_leaf = a;
    /* CPUID.0: the vendor string in EBX, EDX, ECX (Intel SDM Vol. 2A, CPUID) */
    memcpy(f->vendor, &b, 4);
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    /* CPUID.1:ECX (Intel SDM Vol. 2A, CPUID, Table 3-10): bit 12 FMA, bit 27 OSXSAVE,
     * bit 28 AVX, bit 29 F16C. */
    f->fma = (c >> 12) & 1;
    f->osxsave = (c >> 27) & 1;
    f->avx = (c >> 28) & 1;
    f->f16c = (c >> 29) & 1;
    if (f->osxsave) {
        f->xcr0 = xgetbv0();
        /* XCR0 (Intel SDM Vol. 1, 13.3): bit 1 SSE, bit 2 AVX (YMM upper halves) enabled;
         * bits 5-7 opmask, ZMM0-15 upper halves, ZMM16-31; bits 17-18 AMX TILECFG,
         * TILEDATA. */
        f->os_ymm = (f->xcr0 & 0x6) == 0x6;
        f->os_zmm = (f->xcr0 & 0xe6) == 0xe6;
        f->os_amx = ((f->xcr0 >> 17) & 3) == 3;
    }
    if (f->max_leaf < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    /* CPUID.(EAX=7,ECX=0):EBX (Table 3-8): bit 5 AVX2, bit 16 AVX512F, bit 17 AVX512DQ,
     * bit 30 AVX512BW, bit 31 AVX512VL; EDX: bit 22 AMX-BF16, bit 23 AVX512-FP16, bit 24
     * AMX-TILE, bit 25 AMX-INT8. */
    f->avx2 = (b >> 5) & 1;
    f->avx512f = (b >> 16) & 1;
    f->avx512dq = (b >> 17) & 1;
    f->avx512bw = (b >> 30) & 1;
    f->avx512vl = (b >> 31) & 1;
    f->amx_bf16 = (d >> 22) & 1;
    f->avx512_fp16 = (d >> 23) & 1;
    f->amx_tile = (d >> 24) & 1;
    f->amx_int8 = (d >> 25) & 1;
    /* CPUID.(EAX=7,ECX=0):EAX is the highest subleaf; CPUID.(EAX=7,ECX=1):EAX (Table
     * 3-8): bit 4 AVX-VNNI, bit 5 AVX512_BF16. */
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f->avx_vnni = (a >> 4) & 1;
        f->avx512_bf16 = (a >> 5) & 1;
    }
    /* L1 data cache size: AMD CPUID.80000005h:ECX[31:24] in KiB (AMD64 APM vol. 3,
     * appendix E.4.4); Intel CPUID.4 per cache, the level-1 data one: (ways + 1)
     * (partitions + 1) (line size + 1) (sets + 1) bytes (Intel SDM vol. 2A, CPUID leaf 4) */
    if (!memcmp(f->vendor, "AuthenticAMD", 12) || !memcmp(f->vendor, "HygonGenuine", 12)) {
        if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000005u &&
            __get_cpuid(0x80000005u, &a, &b, &c, &d))
            f->l1d_kb = (int)(c >> 24);
    } else if (f->max_leaf >= 4) {
        for (unsigned i = 0; i < 16 && __get_cpuid_count(4, i, &a, &b, &c, &d); i++) {
            const unsigned type = a & 0x1f, level = (a >> 5) & 7;
            if (type == 0)
                break;
            if (type == 1 && level == 1) {
                const unsigned bytes = (((b >> 22) & 0x3ff) + 1) * (((b >> 12) & 0x3ff) + 1) *
                                       ((b & 0xfff) + 1) * (c + 1);
                f->l1d_kb = (int)(bytes / 1024);
                break;
            }
        }
    }
#endif
}

/* Decode streams K and V from DRAM, and the kernels prefetch the rows a few KiB ahead.
 * Into L1 where the L1 data cache holds a block of K or V rows (32 KiB at fp32, Dk = 128)
 * with the lookahead beside it, else into L2, where a prefetch does not evict the block
 * being read. Measured (docs/PERFORMANCE.md, "Decode prefetching"): AMD Zen 5 (48 KiB
 * L1D) ran decode 8-12% faster with L1 prefetches; AMD Zen 4 (32 KiB L1D) ran it 10-35%
 * faster with L2 ones. How far ahead (bytes of rows, SDPA_PREFETCH_AHEAD): into L2,
 * 8 KiB (Zen 4: 4 KiB slower, 16 KiB no faster); into L1, 8 KiB on AMD and 2 KiB on
 * Intel, whose cores fill L1 from their own L2 stream prefetcher sooner (a 48 KiB-L1D
 * Intel Xeon with AMX: fp32 and f16 decode 7-13% faster than at 4 KiB, batched decode
 * 10-15%; 1.5-3 KiB within 2%; docs/PERFORMANCE.md, "The Intel host"). On Zen 5
 * (docs/PERFORMANCE.md, "Zen 5 again"), 8 KiB against 4: f16 decode on 1 thread 6-18%
 * faster, fp32 0-5%, paged 10-14%, 2 threads within 3%, quantized rows within the noise;
 * 6 and 12-16 KiB no faster. The vendor, CPUID.0, is the one property that told those
 * cores apart. */
#define PREFETCH_L1_MIN_KB 48
int sdpa_prefetch_l1 = 1;
int sdpa_prefetch_ahead = 4096;
/* Rows read at addresses (a paged cache's, qk_rows_at and pv_at) jump from page to page,
 * where no hardware prefetcher follows, so their prefetch must cover the whole trip from
 * DRAM on its own. Where the stream's distance is short because the core's own L2
 * prefetcher runs ahead of it (Intel), they go 8 KiB ahead into L2 instead: on the
 * Intel Xeon above, 1 thread, three alternations, decode-long-paged16 ran 48.3 ms with
 * the stream's 2 KiB into L1, 45.4 / 45.7 / 46.4 at 4 / 8 / 16 KiB into L2 and 50.2 at
 * 8 KiB into L1 (f16 paged: 27.6, 26.2 / 26.2 / 28.1, 28.8). Elsewhere, the stream's
 * choice, which on AMD Zen 4 (8 KiB into L2) measured best of those tried (1 thread,
 * four alternations: decode-long-paged16 32.3 / 29.2 / 29.8 ms at 4 / 8 / 16 KiB,
 * decode-long-f16-paged16 18.2 / 17.4 ms at 4 / 8 KiB, into L1 29-34 ms against 19-22;
 * docs/PERFORMANCE.md, "Decode over a tokens-major cache"). */
int sdpa_prefetch_at_l1 = 1;
int sdpa_prefetch_at_ahead = 4096;
/* Decode's K and V streams take turns, K for a block's qk_rows, V for its pv, and each
 * stream stops while the other runs: at every block each restarts with one prefetch
 * distance in flight and waits about a DRAM latency for the rest (docs/PERFORMANCE.md,
 * "Zen 5 again": with V held in L1, 64 / 128 / 256-key blocks streamed K in 13.9 / 13.3
 * / 13.0 ms). Blocks of 256 keys instead of 64 there (1 / 2 threads, medians of 8 rounds
 * in one process, two runs): fp32 decode-long 8-10% / 6-8% faster, f16 2-10% / 7%; 512
 * keys 0-2% more. Measured on Zen 5 only: other cores keep the table's Bc until
 * measured (the same CPUID properties as the prefetch distance). */
int sdpa_decode_bc = 64;

/* ---- what each row needs ---------------------------------------------------------- */

static int usable_always(void) { return 1; }

#if defined(__x86_64__) || defined(__i386__)
/* The tables' -m flags (Makefile ISAFLAGS_*) decide what each needs: AVX2 + FMA + F16C
 * with YMM state for avx2; AVX512F/DQ/BW/VL with ZMM state, and all of avx2's, for
 * avx512. */
static int usable_avx2(void) {
    sdpa_x86_cpu f;
    sdpa_cpu_x86(&f);
    return f.os_ymm && f.avx && f.avx2 && f.fma && f.f16c;
}

static int usable_avx512(void) {
    sdpa_x86_cpu f;
    sdpa_cpu_x86(&f);
    return f.os_zmm && f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl && usable_avx2();
}

/* avx512 and AVX512_BF16 (CPUID.(EAX=7,ECX=1):EAX[5]), which uses the same ZMM state. */
static int usable_avx512_bf16(void) {
    sdpa_x86_cpu f;
    sdpa_cpu_x86(&f);
    return f.avx512_bf16 && usable_avx512();
}

/* avx512bf16 and AMX-TILE + AMX-BF16 (CPUID.(7,0):EDX[24], [22]) with the tile state
 * enabled in XCR0 (bits 17, 18), and the process's permission to use the tile data
 * state, which Linux grants on request (arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA), Documentation/arch/x86/xstate.rst; values from
 * arch/x86/include/uapi/asm/prctl.h and the XSAVE feature number 18 of the Intel SDM
 * vol. 1, 13.1). A thread that executes a tile instruction without it gets SIGILL. The
 * request is made once (usable() runs under the registry's pthread_once); a refusal
 * makes the ISA unusable. */
#ifdef SDPA_AMX_MODEL
/* The tile-model build (make AMX_MODEL=1): kernels/amx/amx.c runs its tiles on
 * kernels/amx/amx_model.h, plain C, and the rest of it is AVX-512 with AVX512_BF16, so
 * the row needs what avx512bf16 needs and no tile state or permission. */
static int usable_amx(void) { return usable_avx512_bf16(); }
#else
static int usable_amx(void) {
    sdpa_x86_cpu f;
    sdpa_cpu_x86(&f);
    if (!(f.amx_tile && f.amx_bf16 && f.os_amx && usable_avx512_bf16()))
        return 0;
#if defined(__linux__) && defined(__x86_64__)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}
#endif /* SDPA_AMX_MODEL */
#endif

#if defined(__aarch64__)
/* AArch64 features as the kernel reports them in the auxiliary vector (getauxval, Linux
 * only: user space cannot read the ID registers portably, and HWCAP also says the kernel
 * supports the state). The NEON table needs only Advanced SIMD; the other bits are read
 * and kept for later optional tables (FP16 arithmetic, BF16 dot products, SVE) and shown
 * by SDPA_VERBOSE=1. */
static struct {
    int asimd, fphp, asimdhp, asimddp, sve, sve2, i8mm, bf16;
} arm_hw;

static int usable_neon(void) {
#if defined(__linux__)
    /* Bit positions from Linux <asm/hwcap.h> (arch/arm64/include/uapi/asm/hwcap.h),
     * spelled out so an older libc's <sys/auxv.h> without the newer names still builds. */
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    arm_hw.asimd = (hw >> 1) & 1;    /* HWCAP_ASIMD    (1 << 1) */
    arm_hw.fphp = (hw >> 9) & 1;     /* HWCAP_FPHP     (1 << 9): scalar FP16 arithmetic */
    arm_hw.asimdhp = (hw >> 10) & 1; /* HWCAP_ASIMDHP  (1 << 10): vector FP16 arithmetic */
    arm_hw.asimddp = (hw >> 20) & 1; /* HWCAP_ASIMDDP  (1 << 20): SDOT/UDOT */
    arm_hw.sve = (hw >> 22) & 1;     /* HWCAP_SVE      (1 << 22) */
    arm_hw.sve2 = (hw2 >> 1) & 1;    /* HWCAP2_SVE2    (1 << 1) */
    arm_hw.i8mm = (hw2 >> 13) & 1;   /* HWCAP2_I8MM    (1 << 13) */
    arm_hw.bf16 = (hw2 >> 14) & 1;   /* HWCAP2_BF16    (1 << 14): BFDOT, BFMMLA, BFCVT */
#else
    /* No HWCAP to ask: Advanced SIMD is part of every AArch64 application-profile CPU an
     * OS of this kind runs on; the optional features stay off. */
    arm_hw.asimd = 1;
#endif
    return arm_hw.asimd;
}

/* neon and FEAT_BF16 (BFDOT, BFMMLA, BFCVT): HWCAP2_BF16, read by usable_neon. */
static int usable_neon_bf16(void) { return usable_neon() && arm_hw.bf16; }
#endif

/* ---- the registry ------------------------------------------------------------------- */

/* The tables this build has (the Makefile defines SDPA_BUILD_<ISA> for each kernels/<isa>
 * directory it compiles). */
#ifdef SDPA_BUILD_AVX2
#define TABLE_AVX2 &sdpa_kernels_avx2
#else
#define TABLE_AVX2 NULL
#endif
#ifdef SDPA_BUILD_AVX512
#define TABLE_AVX512 &sdpa_kernels_avx512
#else
#define TABLE_AVX512 NULL
#endif
#ifdef SDPA_BUILD_NEON
#define TABLE_NEON &sdpa_kernels_neon
#else
#define TABLE_NEON NULL
#endif
#ifdef SDPA_BUILD_AVX512BF16
#define TABLE_AVX512BF16 &sdpa_kernels_avx512bf16
#else
#define TABLE_AVX512BF16 NULL
#endif
#ifdef SDPA_BUILD_AMX
#define TABLE_AMX &sdpa_kernels_amx
#else
#define TABLE_AMX NULL
#endif
#ifdef SDPA_BUILD_NEONBF16
#define TABLE_NEONBF16 &sdpa_kernels_neonbf16
#else
#define TABLE_NEONBF16 NULL
#endif

typedef struct row {
    sdpa_isa isa;
    const char *name;
    sdpa_isa base;               /* the row whose composed table this one starts from */
    const sdpa_kernels *table;   /* its own entries; NULL when not built in */
    int (*usable)(void);         /* the CPU and OS run it (called once) */
    unsigned computes;           /* the sdpa_compute modes it computes (bit per value) */
} row;

#define F32 (1u << SDPA_COMPUTE_F32)
#define BF16 (1u << SDPA_COMPUTE_BF16)

/* In order of preference: the automatic choice is the first usable row. A base row comes
 * after the rows built on it. */
static const row rows[] = {
#if defined(__x86_64__) || defined(__i386__)
    {SDPA_ISA_AMX, "amx", SDPA_ISA_AVX512BF16, TABLE_AMX, usable_amx, F32 | BF16},
    {SDPA_ISA_AVX512BF16, "avx512bf16", SDPA_ISA_AVX512, TABLE_AVX512BF16, usable_avx512_bf16,
     F32 | BF16},
    {SDPA_ISA_AVX512, "avx512", SDPA_ISA_SCALAR, TABLE_AVX512, usable_avx512, F32 | BF16},
    {SDPA_ISA_AVX2, "avx2", SDPA_ISA_SCALAR, TABLE_AVX2, usable_avx2, F32 | BF16},
#endif
#if defined(__aarch64__)
    {SDPA_ISA_NEONBF16, "neonbf16", SDPA_ISA_NEON, TABLE_NEONBF16, usable_neon_bf16, F32 | BF16},
    {SDPA_ISA_NEON, "neon", SDPA_ISA_SCALAR, TABLE_NEON, usable_neon, F32 | BF16},
#endif
    {SDPA_ISA_SCALAR, "scalar", SDPA_ISA_AUTO, &sdpa_kernels_scalar, usable_always, F32 | BF16},
};
enum { NROWS = sizeof rows / sizeof rows[0] };

/* Every ISA value names a row on some target; rows of other targets are listed as not
 * built, so names and lookups work everywhere. */
static const row foreign[] = {
    {SDPA_ISA_AMX, "amx", SDPA_ISA_AVX512BF16, NULL, NULL, 0},
    {SDPA_ISA_AVX512BF16, "avx512bf16", SDPA_ISA_AVX512, NULL, NULL, 0},
    {SDPA_ISA_AVX512, "avx512", SDPA_ISA_SCALAR, NULL, NULL, 0},
    {SDPA_ISA_AVX2, "avx2", SDPA_ISA_SCALAR, NULL, NULL, 0},
    {SDPA_ISA_NEONBF16, "neonbf16", SDPA_ISA_NEON, NULL, NULL, 0},
    {SDPA_ISA_NEON, "neon", SDPA_ISA_SCALAR, NULL, NULL, 0},
};

static sdpa_kernels composed[SDPA_ISA_COUNT_];
static sdpa_isa_info infos[SDPA_ISA_COUNT_];
static int ninfos;

/* dst = base with every entry src sets overriding it. */
static void overlay(sdpa_kernels *dst, const sdpa_kernels *src) {
    if (src->br)
        dst->br = src->br;
    if (src->bc)
        dst->bc = src->bc;
    if (src->pack_k) /* a property of the layout the table's own pack_k writes */
        dst->kp_split = src->kp_split;
#define TAKE(f)          \
    if (src->f)          \
        dst->f = src->f;
    TAKE(kp_align)
    TAKE(kpb_align)
    TAKE(vpb_align)
    TAKE(pack_k)
    TAKE(qk)
    TAKE(qk_rows)
    TAKE(softmax)
    TAKE(pv)
    TAKE(vexp)
    TAKE(dequant)
    TAKE(qk_rows_q)
    TAKE(pv_q)
    TAKE(qk_rows_at)
    TAKE(pv_at)
    TAKE(pack_q_bf16)
    TAKE(pack_k_bf16)
    TAKE(qk_bf16)
    TAKE(pack_v_bf16)
    TAKE(pv_bf16)
    TAKE(qk_rows_bf16)
    TAKE(pv_rows_bf16)
#undef TAKE
}

/* A composed table is complete when every fp32 entry is set (qk_rows_q and pv_q are
 * optional: without them the driver dequantizes into scratch; so are qk_rows_at and
 * pv_at: without them it calls qk_rows and pv page by page) and its dedicated bf16
 * tiles are all set or all absent (then the driver computes SDPA_COMPUTE_BF16 with the
 * fp32 tiles on operands rounded to bf16: exact products of bf16 values are exact in
 * fp32, so the mode's arithmetic is the same), and its bf16 decode pair (qk_rows_bf16,
 * pv_rows_bf16) both set or both absent, set only beside the five. A packing function
 * and the kernel that
 * reads what it packed come from the same row (the layout is private to the table that
 * packs), and so do qk_rows_q, qk_rows_at and qk_rows, pv_q, pv_at and pv (the fused and
 * the addressed kernels promise the bits of their row's plain pair). */
static int complete(const sdpa_kernels *k, const sdpa_kernels *own) {
    _Static_assert(SDPA_KERNELS_NFUNCS == 18, "complete() must check every entry");
    const int pairs = own == NULL || ((own->pack_k == NULL) == (own->qk == NULL) &&
                                      (own->pack_q_bf16 == NULL) == (own->qk_bf16 == NULL) &&
                                      (own->pack_k_bf16 == NULL) == (own->qk_bf16 == NULL) &&
                                      (own->pack_v_bf16 == NULL) == (own->pv_bf16 == NULL) &&
                                      (own->qk_rows_q == NULL || own->qk_rows != NULL) &&
                                      (own->pv_q == NULL || own->pv != NULL) &&
                                      (own->qk_rows_at == NULL || own->qk_rows != NULL) &&
                                      (own->pv_at == NULL || own->pv != NULL));
    const int f32 = k->br > 0 && k->bc > 0 && k->kp_align > 0 && k->pack_k && k->qk &&
                    k->qk_rows && k->softmax && k->pv && k->vexp && k->dequant;
    const int nb = !!k->pack_q_bf16 + !!k->pack_k_bf16 + !!k->qk_bf16 + !!k->pack_v_bf16 +
                   !!k->pv_bf16;
    const int bf16 = (nb == 0 || (nb == 5 && k->kpb_align > 0 && k->vpb_align > 0)) &&
                     (k->qk_rows_bf16 == NULL) == (k->pv_rows_bf16 == NULL) &&
                     (k->qk_rows_bf16 == NULL || nb == 5);
    return f32 && bf16 && pairs;
}

/* The modes whose tiles a row's own table provides (the rest it inherits from its base):
 * the tests run a mode's suites on the rows that own its tiles. */
static unsigned own_modes(const sdpa_kernels *t) {
    unsigned m = 0;
    if (t->pack_k || t->qk || t->qk_rows || t->softmax || t->pv || t->vexp || t->dequant ||
        t->qk_rows_q || t->pv_q || t->qk_rows_at || t->pv_at)
        m |= F32;
    if (t->pack_q_bf16 || t->pack_k_bf16 || t->qk_bf16 || t->pack_v_bf16 || t->pv_bf16 ||
        t->qk_rows_bf16 || t->pv_rows_bf16)
        m |= BF16;
    return m;
}

static void build_registry(void) {
    int have[SDPA_ISA_COUNT_] = {0};
    /* compose bottom up: rows are listed with their bases after them */
    for (int i = NROWS - 1; i >= 0; i--) {
        const row *r = &rows[i];
        if (!r->table)
            continue;
        sdpa_kernels k = {0};
        if (r->base != SDPA_ISA_AUTO) {
            if (!have[r->base])
                continue; /* its base is not built: neither is it */
            k = composed[r->base];
        }
        if (r->base == SDPA_ISA_SCALAR) {
            /* the scalar table's bf16 tiles are an emulation, orders of magnitude slower
             * than a SIMD table's fp32 ones: a SIMD row has dedicated bf16 tiles only if
             * it (or a SIMD base) provides them, else the driver computes the mode with
             * its fp32 tiles on rounded operands */
            k.kpb_align = k.vpb_align = 0;
            k.pack_q_bf16 = NULL;
            k.pack_k_bf16 = NULL;
            k.qk_bf16 = NULL;
            k.pack_v_bf16 = NULL;
            k.pv_bf16 = NULL;
        }
        overlay(&k, r->table);
        k.isa = r->isa;
        k.name = r->name;
        if (!complete(&k, r->table)) {
            fprintf(stderr, "libsdpa: the %s kernel table is incomplete; it will not be used\n",
                    r->name);
            continue;
        }
        composed[r->isa] = k;
        have[r->isa] = 1;
    }
    for (int i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        infos[ninfos++] = (sdpa_isa_info){r->isa,          r->name,
                                          have[r->isa] ? &composed[r->isa] : NULL,
                                          have[r->isa] && r->usable(),
                                          r->computes,     r->base,
                                          have[r->isa] ? own_modes(r->table) : 0};
    }
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        int listed = 0;
        for (int j = 0; j < ninfos; j++)
            listed |= infos[j].isa == foreign[i].isa;
        if (!listed)
            infos[ninfos++] =
                (sdpa_isa_info){foreign[i].isa, foreign[i].name, NULL, 0, 0, foreign[i].base, 0};
    }
}

/* ---- the process-wide choice --------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* The choice made from SDPA_ISA or the CPU; SDPA_ISA_AUTO if SDPA_ISA named an ISA
 * that is not usable (every call then fails). */
static sdpa_isa initial_isa = SDPA_ISA_AUTO;
/* What sdpa_set_isa forced; SDPA_ISA_AUTO = use initial_isa. */
static _Atomic int forced_isa = SDPA_ISA_AUTO;
/* SDPA_ISA named an ISA: the process-wide choice is the user's, for every mode. */
static int env_forced;

/* The row of isa among the built registry (init's own lookups: no ensure_init). */
static const sdpa_isa_info *find(sdpa_isa isa) {
    for (int i = 0; i < ninfos; i++)
        if (infos[i].isa == isa)
            return &infos[i];
    return NULL;
}

static void init(void) {
#if defined(__aarch64__)
    (void)usable_always;
#endif
#if defined(__x86_64__) || defined(__i386__)
    {
        sdpa_x86_cpu f;
        sdpa_cpu_x86(&f);
        sdpa_prefetch_l1 = f.l1d_kb >= PREFETCH_L1_MIN_KB;
        const int intel = !memcmp(f.vendor, "GenuineIntel", 12);
        sdpa_prefetch_ahead = !sdpa_prefetch_l1 || !intel ? 8192 : 2048;
        sdpa_prefetch_at_l1 = sdpa_prefetch_l1 && !intel;
        sdpa_prefetch_at_ahead = sdpa_prefetch_l1 && intel ? 8192 : sdpa_prefetch_ahead;
        sdpa_decode_bc = sdpa_prefetch_l1 && !intel ? 256 : 64;
    }
#endif
    build_registry();
    sdpa_isa best = SDPA_ISA_SCALAR;
    for (int i = 0; i < ninfos; i++)
        if (infos[i].usable) {
            best = infos[i].isa;
            break;
        }
    initial_isa = best;

    const char *env = getenv("SDPA_ISA");
    if (env && *env) {
        sdpa_isa want = SDPA_ISA_COUNT_;
        if (strcmp(env, "auto") == 0)
            want = SDPA_ISA_AUTO;
        for (int i = 0; i < ninfos; i++)
            if (strcmp(env, infos[i].name) == 0)
                want = infos[i].isa;
        if (want == SDPA_ISA_AUTO) {
            initial_isa = best;
        } else if (want == SDPA_ISA_COUNT_ || !find(want)->usable) {
            fprintf(stderr,
                    "libsdpa: SDPA_ISA=%s is %s; every sdpa_forward call will fail with "
                    "SDPA_ERR_UNSUPPORTED_ISA. Usable here:",
                    env, want == SDPA_ISA_COUNT_ ? "not an ISA name" : "not usable on this CPU/build");
            for (int i = 0; i < ninfos; i++)
                if (infos[i].usable)
                    fprintf(stderr, " %s", infos[i].name);
            fprintf(stderr, "\n");
            initial_isa = SDPA_ISA_AUTO;
        } else {
            initial_isa = want;
            env_forced = 1;
        }
    }
    const char *verbose = getenv("SDPA_VERBOSE");
    if (verbose && strcmp(verbose, "1") == 0) {
        fprintf(stderr, "libsdpa %s: isa %s (usable:", SDPA_VERSION_STRING,
                initial_isa == SDPA_ISA_AUTO ? "none" : find(initial_isa)->name);
        for (int i = 0; i < ninfos; i++)
            if (infos[i].usable)
                fprintf(stderr, " %s", infos[i].name);
#if defined(__aarch64__)
        fprintf(stderr, "; hwcap:%s%s%s%s%s%s%s%s", arm_hw.asimd ? " asimd" : "",
                arm_hw.fphp ? " fphp" : "", arm_hw.asimdhp ? " asimdhp" : "",
                arm_hw.asimddp ? " asimddp" : "", arm_hw.sve ? " sve" : "",
                arm_hw.sve2 ? " sve2" : "", arm_hw.i8mm ? " i8mm" : "",
                arm_hw.bf16 ? " bf16" : "");
#endif
        fprintf(stderr, ")%s\n", env && *env ? " [from SDPA_ISA]" : "");
    }
}

static void ensure_init(void) { pthread_once(&once, init); }

const sdpa_isa_info *sdpa_isa_registry(int *n) {
    ensure_init();
    *n = ninfos;
    return infos;
}

const sdpa_isa_info *sdpa_isa_lookup(sdpa_isa isa) {
    ensure_init();
    return find(isa);
}

int sdpa_isa_supported(sdpa_isa isa) {
    const sdpa_isa_info *r = sdpa_isa_lookup(isa);
    return r && r->usable;
}

sdpa_isa sdpa_get_isa(void) {
    ensure_init();
    int f = atomic_load(&forced_isa);
    return f != SDPA_ISA_AUTO ? (sdpa_isa)f : initial_isa;
}

sdpa_status sdpa_set_isa(sdpa_isa isa) {
    ensure_init();
    if (isa == SDPA_ISA_AUTO) {
        atomic_store(&forced_isa, SDPA_ISA_AUTO);
        return SDPA_OK;
    }
    if (!sdpa_isa_supported(isa))
        return SDPA_ERR_UNSUPPORTED_ISA;
    atomic_store(&forced_isa, (int)isa);
    return SDPA_OK;
}

const sdpa_kernels *sdpa_dispatch_table(sdpa_isa isa, int compute) {
    ensure_init();
    const unsigned want = 1u << compute;
    if (isa == SDPA_ISA_AUTO) {
        isa = sdpa_get_isa();
        /* the automatic choice for a mode its best table lacks: the best that has it,
         * but never the scalar emulation in place of a SIMD table (that would be a
         * silent slowdown of orders of magnitude; ask for it by name instead) */
        const sdpa_isa_info *r = find(isa);
        if (atomic_load(&forced_isa) == SDPA_ISA_AUTO && !env_forced && r && !(r->computes & want))
            for (int i = 0; i < ninfos; i++)
                if (infos[i].usable && (infos[i].computes & want) &&
                    infos[i].isa != SDPA_ISA_SCALAR) {
                    isa = infos[i].isa;
                    break;
                }
    }
    const sdpa_isa_info *r = sdpa_isa_lookup(isa);
    return r && r->usable && (r->computes & want) ? r->kernels : NULL;
}
