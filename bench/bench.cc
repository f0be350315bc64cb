// bench.cc - libsdpa's benchmark as Google Benchmark registrations: every shape of the
// suite (bench/shim.c; the default suite leaves out those marked full_only) times every
// variant, the fused path on each ISA the library's
// registry says this host runs, the naive reference (the default suite leaves it out on
// the KV-cache shapes, paged or quantized), and with BLAS=openblas the unfused
// BLAS baseline (on the plain fp32 shapes), at 1 thread and at all cores; the projection
// GEMM (sdpa_linear) per ISA. Each row reports GFLOP/s, % of the FMA peak, and for decode
// K/V GB/s and % of the DRAM read bandwidth, as Google Benchmark counters; the peaks and
// the bandwidth are measured in the same process (peak.h) and written to the JSON
// context.
//
// Before anything is timed, each case runs once and its output is checked against the
// reference (whole, or exact slices when the whole would take the reference too long;
// the GEMM against a double-precision product on a few rows and columns); a mismatch
// aborts the run. That run also sizes the case's iterations, so the suite's length is
// planned, not discovered. The summary table and the comparisons between rows are
// tools/bench-report.py's, from the JSON (`make bench` runs it). It is not a test suite
// (make test is) and it times only public calls, through the C shim.
//
//   sdpa-bench [--suite=default|full] [Google Benchmark flags, e.g.
//              --benchmark_filter=seed --benchmark_out=build/bench.json
//              --benchmark_out_format=json]

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "peak.h"
#include "shim.h"
#ifdef SB_WITH_BLAS
#include "blas.h"
#endif

namespace {

// How long a suite may spend: `make bench` is meant to finish in under 3 minutes on the
// project's 2-core machine, build included (docs/PERFORMANCE.md, "Bench and tools
// measurements", has what each setting costs there).
struct Suite {
    const char *name;
    double case_seconds;     // timed seconds a case aims for, all repetitions together
    int reps;                // repetitions; reports use their median
    double max_case_seconds; // a slow case gets fewer repetitions to stay under this
    double ref_max_seconds;  // the reference row runs only if one call is estimated below
    int ref_reps;            // repetitions of the reference rows (only the speedup uses them)
    bool ref_kv_caches;      // reference rows on the KV-cache shapes too (paged or quantized
                             // K/V: the same oracle as their contiguous shape's, plus the
                             // dequantization)
    bool all_shapes;         // the shapes marked full_only too (bench/shim.c)
    bool scalar_everywhere;  // scalar rows on every shape even when a SIMD table exists
    double run_budget;       // seconds from start to the last timed run; iterations
                             // shrink to fit what the checks left
};

// 0.6 s per case gives a median of 3 repetitions of several calls for every case under
// 0.2 s; the full suite times everything, the slow reference rows included.
const Suite kDefaultSuite = {"default", 0.6, 3, 16.0, 20.0, 1, false, false, false, 100.0};
const Suite kFullSuite = {"full", 2.0, 5, 120.0, 600.0, 5, true, true, true, 1e9};

// In the default suite the scalar rows run only on shapes up to this many flops and K/V
// bytes when a SIMD table exists: beyond them one scalar call takes seconds, and
// decode-gqa already shows the scalar table's decode. With no SIMD table the scalar rows
// are the fused path and run on every shape.
constexpr double kScalarDefaultMaxFlops = 4e9;
constexpr double kScalarDefaultMaxKvBytes = 64.0 * (1 << 20);

// The reference's rate when a check computed nothing to measure it on (every checked
// row sees no key): the order of magnitude of one double-precision thread.
constexpr double kReferenceGflops = 4.0;

enum class Kind { Fused, Reference, Blas, Linear };

// An attention shape (s) or a GEMM shape (ls), with its data and expected output.
struct Shape {
    const sb_shape *s = nullptr;
    const sb_linear_shape *ls = nullptr;
    double flops = 0;
    sc_tensors t{};
    sb_expect expect{};
    sb_linear lin{};
    bool ready = false;
    double ref_estimate = 0; // seconds for one whole reference call
    std::string scope;       // what the check covers
    const char *name() const { return s ? s->name : ls->name; }
    bool decode() const { return s && sb_is_decode(&s->c); }
};

struct Case {
    Shape *shape;
    Kind kind;
    sdpa_isa isa;      // Fused, Linear: the forced table; Reference/Blas: none
    int threads;       // asked for
    int threads_used;  // what the fused path ran on (sdpa_stats; below ~4 MFLOP, or in a
                       // serial build, it is 1); for the other variants, as asked
    std::string name;  // shape/variant/threads:N
    double peak = 0;   // GFLOP/s this row's % of peak divides by; 0: none
    double dram = 0;   // GB/s of DRAM read at this thread count (decode rows); 0: none
    double t_check = 0; // seconds of the checking run
    sc_error err{};
    int iters = 1, reps = 1;
};

sdpa_status run_once(const Case &c, sdpa_stats *stats = nullptr) {
    const sc_tensors *t = &c.shape->t;
    switch (c.kind) {
    case Kind::Fused:
        return sb_run_fused(t, c.isa, c.threads, stats);
    case Kind::Reference:
        return sb_run_reference(t, nullptr);
    case Kind::Linear:
        return sb_run_linear(&c.shape->lin, c.isa, c.threads);
    case Kind::Blas:
#ifdef SB_WITH_BLAS
        return sb_run_blas(t, c.threads);
#else
        break;
#endif
    }
    return SDPA_ERR_BAD_ARGUMENT;
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char *fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "sdpa-bench: ");
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::exit(1);
}

// The timed loop and its counters. Rates are iteration-invariant: value x iterations /
// seconds of real time (UseRealTime), which OpenMP's threads make the right clock.
void bench_case(benchmark::State &state, const Case *c) {
    for (auto _ : state) {
        const sdpa_status st = run_once(*c);
        if (st != SDPA_OK) {
            state.SkipWithError(sdpa_strerror(st));
            break;
        }
    }
    const Shape &sh = *c->shape;
    using benchmark::Counter;
    state.counters["gflops"] = Counter(sh.flops * 1e-9, Counter::kIsIterationInvariantRate);
    if (c->peak > 0)
        state.counters["pct_peak"] =
            Counter(100.0 * sh.flops / (c->peak * 1e9), Counter::kIsIterationInvariantRate);
    if (sh.decode()) {
        const double bytes = sb_kv_bytes(&sh.s->c);
        state.counters["kv_gbps"] = Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
        if (c->dram > 0)
            state.counters["pct_dram"] =
                Counter(100.0 * bytes / (c->dram * 1e9), Counter::kIsIterationInvariantRate);
    }
    state.counters["check_max_abs"] = c->err.max_abs;
    state.counters["check_max_rel"] = c->err.max_rel;
    state.counters["threads_used"] = c->threads_used;
    state.SetLabel(c->kind == Kind::Reference ? "the oracle"
                   : sh.ls                    ? "checked: rows+cols"
                   : sh.expect.full           ? "checked: whole"
                                              : "checked: slice");
}

std::string shape_str(const Shape &sh) {
    char b[320];
    if (sh.ls)
        std::snprintf(b, sizeof b, "sdpa_linear M=%lld K=%lld N=%lld%s", (long long)sh.ls->M,
                      (long long)sh.ls->K, (long long)sh.ls->N, sh.ls->bias ? " +bias" : "");
    else
        sb_case_str(&sh.s->c, b, sizeof b);
    return b;
}

// Data and expected output of a shape, made on first use. The GEMM's expectation is
// computed per case, after its run (sb_linear_check).
void prepare(Shape &sh) {
    if (sh.ready)
        return;
    if (sh.ls) {
        if (sb_linear_init(&sh.lin, sh.ls) != 0)
            die("%s: out of memory", sh.name());
        sh.scope = "rows 0, M/2, M-1 and columns 0, N/2, N-1 against a double-precision product";
    } else {
        if (sc_tensors_make(&sh.t, &sh.s->c) != 0)
            die("%s: out of memory", sh.name());
        const sdpa_status st = sb_expect_make(&sh.expect, &sh.t);
        if (st != SDPA_OK)
            die("sdpa_reference on %s: %s", sh.name(), sdpa_strerror(st));
        const double rate =
            sh.expect.flops > 0 ? sh.expect.flops / sh.expect.seconds : kReferenceGflops * 1e9;
        sh.ref_estimate = sh.flops / rate;
        char scope[512];
        sh.scope = sb_expect_scope(&sh.expect, &sh.t, scope, sizeof scope);
    }
    std::fprintf(stderr, "%-15s %s, %.3g GFLOP; checked on the %s\n", sh.name(),
                 shape_str(sh).c_str(), sh.flops * 1e-9, sh.scope.c_str());
    sh.ready = true;
}

// Run a case once, check it, and note how long it took.
void check(Case &c) {
    Shape &sh = *c.shape;
    if (c.kind == Kind::Reference) { // the oracle: no check, its time is estimated
        c.t_check = sh.ref_estimate;
        return;
    }
    sdpa_stats stats{};
    if (c.kind == Kind::Linear) // every case's check sees its own answer, none left over
        std::memset(sh.lin.y, 0, (size_t)(sh.ls->M * sh.ls->N) * sizeof(float));
    const double t0 = sb_now();
    const sdpa_status st = run_once(c, &stats);
    c.t_check = sb_now() - t0;
    if (st != SDPA_OK)
        die("%s: %s", c.name.c_str(), sdpa_strerror(st));
    if (c.kind == Kind::Fused)
        c.threads_used = stats.threads;
    c.err = c.kind == Kind::Linear ? sb_linear_check(&sh.lin) : sb_compare(&sh.expect, &sh.t);
    if (c.err.bad != 0) {
        char tol[96];
        if (sh.ls)
            std::snprintf(tol, sizeof tol, "|y - r| <= (K + 3) 2^-24 sum|x w|");
        else
            std::snprintf(tol, sizeof tol, "|o - r| <= %g + %.3g |r|", SC_TOL_ABS,
                          sc_rel_tol(sh.s->c.dt[3]));
        die("%s is WRONG: %lld of %lld checked elements outside %s (max_abs %.3g, max_rel "
            "%.3g) on the %s of %s. Not timing it; aborting.",
            c.name.c_str(), (long long)c.err.bad, (long long)c.err.checked, tol, c.err.max_abs,
            c.err.max_rel, sh.scope.c_str(), shape_str(sh).c_str());
    }
    std::fprintf(stderr, "  ok  %-34s %9.2f ms  max_abs %.2g  max_rel %.2g\n", c.name.c_str(),
                 c.t_check * 1e3, c.err.max_abs, c.err.max_rel);
}

// Iterations and repetitions from the checking run's time, scaled by f <= 1 when the
// suite's timing budget is short.
void plan(Case &c, const Suite &su, double f) {
    const double t = std::max(c.t_check, 1e-7);
    c.reps = c.kind == Kind::Reference ? su.ref_reps : su.reps;
    if (t * c.reps > su.max_case_seconds * f)
        c.reps = std::max(1, (int)(su.max_case_seconds * f / t));
    c.iters = std::max(1, (int)(su.case_seconds * f / (c.reps * t)));
}

double planned_seconds(const std::vector<Case> &cases) {
    double total = 0;
    for (const Case &c : cases)
        total += c.t_check * c.iters * c.reps;
    return total;
}

// Google Benchmark's own filter rule (a regex search, '-' negates), applied before the
// cases are made so a filtered run prepares and checks only what it times.
bool matches(const std::string &filter, const std::string &name) {
    if (filter.empty() || filter == "all")
        return true;
    const bool negate = filter[0] == '-';
    const std::regex re(negate ? filter.substr(1) : filter, std::regex::extended);
    return std::regex_search(name, re) != negate;
}

int usage(const char *argv0) {
    std::fprintf(stderr,
                 "usage: %s [--suite=default|full] [Google Benchmark flags]\n"
                 "  --suite=default  what `make bench` runs (under 3 minutes on 2 cores)\n"
                 "  --suite=full     every ISA on every shape, the reference where it takes\n"
                 "                   under 10 minutes, more repetitions (`make bench-full`)\n"
                 "Google Benchmark's flags: --help\n",
                 argv0);
    return 2;
}

void context(const std::string &key, const std::string &value) {
    benchmark::AddCustomContext(key, value);
}

// The machine's ceilings, measured in this process: the fp32 FMA peak of each ISA and the
// DRAM read bandwidth, at each thread count, also written to the JSON context.
struct Ceilings {
    std::map<std::pair<sdpa_isa, int>, double> peak; // GFLOP/s of (isa, threads)
    std::map<int, double> dram;                      // GB/s of the fastest read loop
    std::map<std::pair<int64_t, int>, double> dram_paged; // (chunk bytes, threads): shuffled
    double best_peak(int threads) const {
        double best = 0;
        for (const auto &kv : peak)
            if (kv.first.second == threads)
                best = std::max(best, kv.second);
        return best;
    }
};

Ceilings measure_ceilings(const std::vector<sdpa_isa> &isas, const std::vector<int> &counts) {
    Ceilings ce;
    for (sdpa_isa isa : isas) {
        const std::string name = sdpa_isa_name(isa);
        context("peak_loop_" + name, sb_peak_what(isa));
        for (int t : counts) {
            const std::string at = "_threads" + std::to_string(t);
            const double p = ce.peak[{isa, t}] = sb_peak_gflops(isa, t);
            const double g = sb_dram_read_gbps(isa, t);
            ce.dram[t] = std::max(ce.dram[t], g);
            context("peak_gflops_" + name + at, std::to_string(p));
            context("dram_read_gbps_" + name + at, std::to_string(g));
            std::string shuffled;
            for (int64_t chunk : SB_PAGED_CHUNKS) {
                const double gp = sb_dram_read_paged_gbps(isa, t, chunk);
                double &best = ce.dram_paged[{chunk, t}];
                best = std::max(best, gp);
                const std::string kib = std::to_string(chunk >> 10);
                context("dram_read_paged" + kib + "k_gbps_" + name + at, std::to_string(gp));
                char buf[48];
                std::snprintf(buf, sizeof buf, "%s %s KiB %.1f", shuffled.empty() ? "" : ",",
                              kib.c_str(), gp);
                shuffled += buf;
            }
            std::fprintf(stderr,
                         "%-7s %d thread%s: FMA peak %.1f GFLOP/s, DRAM read %.1f GB/s "
                         "(shuffled chunks%s)\n",
                         name.c_str(), t, t > 1 ? "s" : " ", p, g, shuffled.c_str());
        }
    }
    sb_dram_release();
    for (int t : counts) {
        context("dram_read_gbps_threads" + std::to_string(t), std::to_string(ce.dram[t]));
        for (int64_t chunk : SB_PAGED_CHUNKS)
            context("dram_read_paged" + std::to_string(chunk >> 10) + "k_gbps_threads" +
                        std::to_string(t),
                    std::to_string(ce.dram_paged[{chunk, t}]));
    }
    context("dram_buffer_mib", std::to_string(SB_DRAM_BUFFER_BYTES >> 20));
    return ce;
}

// The cases, in the report's order (the attention shapes, then the GEMM), filtered like
// Google Benchmark filters names; shapes gets one entry per shape of the suites.
std::vector<Case> make_cases(std::vector<Shape> &shapes, const Suite &su,
                             const std::vector<sdpa_isa> &isas, const std::vector<int> &counts,
                             const Ceilings &ce, const std::string &filter,
                             std::vector<std::string> &notes) {
    const bool have_simd = isas.front() != SDPA_ISA_SCALAR;
    // Which rows time which mode: fp32 shapes on the tables with fp32 tiles of their own
    // (a bf16 table inherits its base's, which would time the same code twice); bf16
    // shapes on the tables with bf16 tiles of their own except the scalar emulation, or
    // the best table (its fp32 tiles on rounded operands) where none has them.
    const unsigned kF32 = 1u << SDPA_COMPUTE_F32, kBF16 = 1u << SDPA_COMPUTE_BF16;
    std::vector<sdpa_isa> f32_isas, bf16_isas;
    for (sdpa_isa isa : isas) {
        if (sb_isa_own(isa) & kF32)
            f32_isas.push_back(isa);
        if ((sb_isa_own(isa) & kBF16) && isa != SDPA_ISA_SCALAR)
            bf16_isas.push_back(isa);
    }
    if (bf16_isas.empty())
        bf16_isas.push_back(f32_isas.front());
    shapes.assign((size_t)(sb_suite_len + sb_linear_suite_len), Shape{});
    std::vector<Case> cases;
    std::string scalar_skipped, ref_skipped, full_only;
    for (size_t si = 0; si < shapes.size(); si++) {
        Shape &sh = shapes[si];
        if (si < (size_t)sb_suite_len) {
            sh.s = &sb_suite[si];
            sh.flops = sb_flops(&sh.s->c);
        } else {
            sh.ls = &sb_linear_suite[si - (size_t)sb_suite_len];
            sh.flops = sb_linear_flops(sh.ls);
        }
        auto add = [&](Kind kind, sdpa_isa isa, const std::string &variant, int t, double pk) {
            Case c{&sh, kind, isa, t, t,
                   std::string(sh.name()) + "/" + variant + "/threads:" + std::to_string(t)};
            c.peak = pk;
            if (sh.decode())
                c.dram = ce.dram.at(t);
            if (matches(filter, c.name))
                cases.push_back(c);
        };
        if (sh.s && sh.s->full_only && !su.all_shapes) {
            if (matches(filter, std::string(sh.name()) + "/"))
                full_only += std::string(" ") + sh.name();
            continue;
        }
        const std::vector<sdpa_isa> &rows =
            sh.s && sh.s->c.compute == SDPA_COMPUTE_BF16 ? bf16_isas : f32_isas;
        for (sdpa_isa isa : rows) {
            if (sh.s && sh.s->best_isa_only && !su.scalar_everywhere && isa != rows.front())
                continue;
            if (isa == SDPA_ISA_SCALAR && have_simd && !su.scalar_everywhere &&
                (sh.flops > kScalarDefaultMaxFlops ||
                 (sh.s && sb_kv_bytes(&sh.s->c) > kScalarDefaultMaxKvBytes))) {
                if (matches(filter, std::string(sh.name()) + "/scalar/threads:1"))
                    scalar_skipped += std::string(" ") + sh.name();
                continue;
            }
            for (int t : counts)
                add(sh.ls ? Kind::Linear : Kind::Fused, isa, sdpa_isa_name(isa), t,
                    ce.peak.at({isa, t}));
        }
        if (sh.ls)
            continue;
#ifdef SB_WITH_BLAS
        if (sb_is_plain(&sh.s->c)) // the baseline knows plain fp32 attention only
            for (int t : counts)
                add(Kind::Blas, SDPA_ISA_AUTO, "openblas", t, ce.best_peak(t));
#endif
        if (sh.s->c.compute != SDPA_COMPUTE_F32) // the fp32 shape's row shows the reference
            continue;
        if (sb_is_kv_cache(&sh.s->c) && !su.ref_kv_caches) {
            if (matches(filter, std::string(sh.name()) + "/reference/threads:1"))
                ref_skipped += std::string(" ") + sh.name();
            continue;
        }
        add(Kind::Reference, SDPA_ISA_AUTO, "reference", 1, 0.0);
    }
    if (!scalar_skipped.empty()) {
        char b[256];
        std::snprintf(b, sizeof b,
                      "scalar rows only on shapes up to %.0f GFLOP and %.0f MiB of K/V in this "
                      "suite (SIMD tables present); make bench-full runs them on all; skipped "
                      "here:",
                      kScalarDefaultMaxFlops * 1e-9, kScalarDefaultMaxKvBytes / (1 << 20));
        notes.push_back(b + scalar_skipped);
    }
    if (!full_only.empty())
        notes.push_back("shapes only make bench-full times (sdpa-bench --suite=full "
                        "--benchmark_filter=NAME times one):" + full_only);
    if (!ref_skipped.empty())
        notes.push_back("reference not timed on the KV-cache shapes in this suite (their "
                        "contiguous shapes' rows time the same oracle); make bench-full times "
                        "it; skipped here:" + ref_skipped);
    return cases;
}

// Checks every case once (this also measures it) and returns those to time: all but the
// reference rows that would take longer than the suite allows.
std::vector<Case> check_cases(std::vector<Case> &cases, const Suite &su,
                              std::vector<std::string> &notes) {
    std::fprintf(stderr, "checking every case against the reference before timing it:\n");
    std::vector<Case> timed;
    for (Case &c : cases) {
        prepare(*c.shape);
        if (c.kind == Kind::Reference && c.shape->ref_estimate > su.ref_max_seconds) {
            char b[256];
            std::snprintf(b, sizeof b,
                          "reference not timed on %s: about %.0f s per call (this suite's "
                          "limit: %.0f s)%s",
                          c.shape->name(), c.shape->ref_estimate, su.ref_max_seconds,
                          &su == &kDefaultSuite ? "; make bench-full times it" : "");
            notes.push_back(b);
            continue;
        }
        check(c);
        timed.push_back(c);
    }
    return timed;
}

// Iterations and repetitions of every case, shrunk once to fit the seconds left.
void plan_all(std::vector<Case> &timed, const Suite &su, double left) {
    for (Case &c : timed)
        plan(c, su, 1.0);
    const double planned = planned_seconds(timed);
    if (planned > left)
        for (Case &c : timed)
            plan(c, su, left / planned);
}

} // namespace

int main(int argc, char **argv) {
    const double start = sb_now();
    const Suite *suite = &kDefaultSuite;
    int kept = 1;
    for (int i = 1; i < argc; i++) { // our flags out, Google Benchmark's left in argv
        if (std::strcmp(argv[i], "--suite=default") == 0)
            suite = &kDefaultSuite;
        else if (std::strcmp(argv[i], "--suite=full") == 0)
            suite = &kFullSuite;
        else if (std::strncmp(argv[i], "--suite", 7) == 0)
            return usage(argv[0]);
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return usage(argv[0]);

    const int nproc = sb_nproc();
    std::vector<int> counts = {1};
    if (nproc > 1)
        counts.push_back(nproc);
    // The ISAs the registry says this build has and this CPU runs, best first.
    sdpa_isa isa_buf[SDPA_ISA_COUNT_];
    const std::vector<sdpa_isa> isas(isa_buf, isa_buf + sb_usable_isas(isa_buf, SDPA_ISA_COUNT_));
    std::string isa_list;
    for (sdpa_isa isa : isas)
        isa_list += std::string(isa_list.empty() ? "" : " ") + sdpa_isa_name(isa);

    std::fprintf(stderr, "libsdpa %s benchmark, suite %s: ISAs %s; threads 1 and %d\n",
                 sdpa_version(), suite->name, isa_list.c_str(), nproc);
    context("sdpa_version", sdpa_version());
    context("sdpa_suite", suite->name);
    context("sdpa_isas", isa_list);
    context("sdpa_threads_all", std::to_string(nproc));
    context("gflops_formula",
            "2*(Dk+Dv)*visible scores; visible scores = Hq*sum_b sum_i |keys row i of entry b "
            "sees|: j < Tkv_b, causal j <= d(i), window d(i)-left <= j <= d(i)+right, "
            "d(i) = i+Tkv_b-Tq (top-left: i); keys only an explicit mask hides count; "
            "linear: 2*M*K*N");
    context("kv_gbps_formula", "bytes of the K and V rows some query row sees, once, at their "
                               "storage size (2 bytes for f16/bf16, 1 for int8/fp8, 1/2 for "
                               "int4), plus their scales and block-table entries, / time");
#ifdef SB_WITH_BLAS
    context("blas", sb_blas_name());
#endif
    const Ceilings ce = measure_ceilings(isas, counts);

    std::vector<Shape> shapes;
    std::vector<std::string> notes;
    const std::string filter = benchmark::GetBenchmarkFilter();
    std::vector<Case> cases = make_cases(shapes, *suite, isas, counts, ce, filter, notes);
    if (cases.empty()) {
        std::fprintf(stderr, "sdpa-bench: no case matches --benchmark_filter=%s\n",
                     filter.c_str());
        for (const std::string &n : notes) // a shape left out of this suite, say
            std::fprintf(stderr, "  %s\n", n.c_str());
        return 1;
    }
    std::vector<Case> timed = check_cases(cases, *suite, notes);
    plan_all(timed, *suite, std::max(0.0, suite->run_budget - (sb_now() - start)));
    std::fprintf(stderr, "timing %zu cases, about %.0f s:\n", timed.size(), planned_seconds(timed));
    for (const Case &c : timed)
        benchmark::RegisterBenchmark(c.name.c_str(), bench_case, &c)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(c.iters)
            ->Repetitions(c.reps)
            ->DisplayAggregatesOnly(true);
    // What the names do not say, for the report: each shape's case and check, and what
    // was left out.
    for (const Shape &sh : shapes)
        if (sh.ready) {
            context("shape_" + std::string(sh.name()), shape_str(sh));
            context("check_" + std::string(sh.name()), sh.scope);
        }
    for (size_t i = 0; i < notes.size(); i++)
        context("note_" + std::to_string(i + 1), notes[i]);

    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    for (Shape &sh : shapes)
        if (sh.ready) {
            sb_expect_free(&sh.expect);
            sc_tensors_free(&sh.t);
            sb_linear_free(&sh.lin);
        }
    return 0;
}
