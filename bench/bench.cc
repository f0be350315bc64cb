// bench.cc - libsdpa's benchmark: Google Benchmark rows for every shape of the suite
// (bench/shim.c) and every variant, the fused path on each ISA this host can run, the
// naive reference, and with BLAS=openblas the unfused BLAS baseline (on the plain fp32
// shapes), at 1 thread and at all cores; the projection GEMM (sdpa_linear) per ISA; then
// a short table a person reads at a glance, and the performance targets of issues 6-8
// computed from its rows.
//
// Before anything is timed, each case runs once and its output is checked against the
// reference (whole, or exact slices when the whole would take the reference too long;
// the GEMM against a double-precision product on a few rows and columns); a mismatch
// aborts the run. That run also sizes the case's iterations, so the suite's length is
// planned, not discovered. The FMA peak and the DRAM read bandwidth the rows are measured
// against are measured in the same process (peak.h). It is not a test suite (make test
// is) and it calls only the public API, through the C shim.
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
#include <set>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "peak.h"
#include "shim.h"
#ifdef SB_WITH_BLAS
#include "blas.h"
#endif

namespace {

// How long a suite may spend. `make bench` must finish in under 3 minutes on this
// 2-core machine (issue 3), its build (~20-40 s) included, with three ISAs' tables and
// other people's jobs on the same cores.
struct Suite {
    const char *name;
    double case_seconds;     // timed seconds a case aims for, all repetitions together
    int reps;                // repetitions; the table reports their median
    double max_case_seconds; // a slow case gets fewer repetitions to stay under this
    double ref_max_seconds;  // the reference row runs only if one call is estimated below
    int ref_reps;            // repetitions of the reference rows (only the speedup uses them)
    bool scalar_everywhere;  // scalar rows on every shape even when a SIMD table exists
    double run_budget;       // seconds from start to the last timed run; repetitions and
                             // iterations shrink to fit what the checks left
};

// The default suite's ~60 cases, its checks and its set-up (peaks, DRAM, 1 GiB of data)
// take ~90 s on a quiet machine here with these settings; 0.6 s per case still gives a
// median of 3 repetitions of several calls for every case under 0.2 s.
const Suite kDefaultSuite = {"default", 0.6, 3, 16.0, 20.0, 1, false, 100.0};
const Suite kFullSuite = {"full", 2.0, 5, 120.0, 600.0, 5, true, 1e9};

// A loop of independent FMAs scales with the cores: on a quiet machine all-core peak is
// within ~10% of threads x the 1-thread peak (measured here: 1.97x on 2 cores). Below
// this fraction, other jobs held cores during the measurement, and % of peak divides by
// threads x the 1-thread peak instead (the footer and the JSON context say so).
constexpr double kContendedPeakRatio = 0.8;

// In the default suite the scalar rows run only on shapes up to this many flops and K/V
// bytes when a SIMD table exists (prefill: ~1 s per run at the scalar table's 3-5
// GFLOP/s here; the causal shapes would take 8-30 s, decode-long 0.2-0.7 s per call
// for what decode-gqa already shows); bench-full runs them everywhere. With no SIMD
// table the scalar rows are the fused path and run on every shape.
constexpr double kScalarDefaultMaxFlops = 4e9;
constexpr double kScalarDefaultMaxKvBytes = 64.0 * (1 << 20);

// The issues' targets, checked under the table (issue 6: thread scaling and decode
// bandwidth; issue 7: f16 decode speed; issue 8: the projection GEMM).
constexpr double kTargetPrefillScaling = 0.55; // 2-thread time / 1-thread time, at most
constexpr double kTargetDecodeDram = 70.0;     // decode-long fp32, % of DRAM read, at least
constexpr double kTargetF16Speedup = 1.7;      // decode-long f16 speed / fp32 speed
constexpr double kTargetLinearPeak = 60.0;     // linear at 1 thread, % of FMA peak

enum class Kind { Fused, Reference, Blas, Linear };

// An attention shape (s) or a GEMM shape (ls), with its data and expected output.
struct Shape {
    const sb_shape *s = nullptr;
    const sb_linear_shape *ls = nullptr;
    double flops = 0;
    sb_problem prob{};
    sb_expect expect{};
    sb_linear lin{};
    bool ready = false;
    double ref_estimate = 0; // seconds for one whole reference call
    std::string scope;       // what the check covers
    const char *name() const { return s ? s->name : ls->name; }
    bool decode() const { return s && sb_is_decode(s); }
};

struct Case {
    Shape *shape;
    Kind kind;
    sdpa_isa isa;  // Fused, Linear: the forced table; Reference/Blas: none
    int threads;        // asked for
    int threads_used;   // what the fused path ran on (sdpa_stats; below ~4 MFLOP, or in a
                        // serial build, it is 1); for the other variants, as asked
    std::string variant, name;
    double peak = 0;    // GFLOP/s this row's % of peak divides by; 0: none
    double dram = 0;    // GB/s of DRAM read at this thread count (decode rows); 0: none
    double t_check = 0; // seconds of the checking run
    sb_error err{};
    int iters = 1, reps = 1;
};

struct Result {
    bool ok = false;
    double ms = 0, gflops = 0, pct_peak = -1, kv_gbps = -1, pct_dram = -1, other = 0;
    std::string error;
};

std::vector<Shape> g_shapes;
std::vector<Case> g_cases;
std::vector<std::string> g_notes; // printed under the table
std::map<std::string, Result> g_results;
std::string g_best_isa;        // the first ISA of the list: the targets are checked on it
int g_nproc = 1;
std::map<int, double> g_dram;  // DRAM read GB/s per thread count (the fastest read loop)

sdpa_status run_once(const Case &c, sdpa_stats *stats = nullptr) {
    const sb_problem *p = &c.shape->prob;
    switch (c.kind) {
    case Kind::Fused:
        return sb_run_fused(p, c.isa, c.threads, stats);
    case Kind::Reference:
        return sb_run_reference(p);
    case Kind::Linear:
        return sb_run_linear(&c.shape->lin, c.isa, c.threads);
    case Kind::Blas:
#ifdef SB_WITH_BLAS
        return sb_run_blas(p, c.threads);
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

// CPU seconds the whole machine was busy (/proc/stat: user, nice, system, irq, softirq
// and steal, the time the hypervisor gave this guest's CPUs to others) and this
// process's own (getrusage, every thread). Over an interval, the first minus the second
// is what others took from the cores this run had: on a shared machine that, not the
// code, can explain a slow 2-thread row. machine < 0 where /proc/stat is unreadable.
struct CpuSample {
    double machine = -1, self = 0, wall = 0;
};

CpuSample cpu_sample() {
    CpuSample c;
    c.wall = sb_now();
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        c.self = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                 (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    if (FILE *f = std::fopen("/proc/stat", "r")) {
        // user nice system idle iowait irq softirq steal, in clock ticks
        unsigned long long v[8] = {0};
        if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                        &v[3], &v[4], &v[5], &v[6], &v[7]) == 8)
            c.machine = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) /
                        (double)sysconf(_SC_CLK_TCK);
        std::fclose(f);
    }
    return c;
}

// Cores' worth of CPU others used between two samples (0 when unknown); /proc/stat
// counts in ticks of 10 ms, so short intervals are rough.
double other_cores(const CpuSample &a, const CpuSample &b) {
    if (a.machine < 0 || b.machine < 0 || b.wall <= a.wall)
        return 0;
    return std::max(0.0, (b.machine - a.machine) - (b.self - a.self)) / (b.wall - a.wall);
}

void bench_case(benchmark::State &state, const Case *c) {
    const CpuSample before = cpu_sample();
    for (auto _ : state) {
        const sdpa_status st = run_once(*c);
        if (st != SDPA_OK) {
            state.SkipWithError(sdpa_strerror(st));
            break;
        }
    }
    state.counters["other_cores"] = other_cores(before, cpu_sample());
    const Shape &sh = *c->shape;
    const double flops = sh.flops;
    using benchmark::Counter;
    // Iteration-invariant rates: value x iterations / seconds (real time: UseRealTime).
    state.counters["gflops"] = Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
    if (c->peak > 0)
        state.counters["pct_peak"] =
            Counter(100.0 * flops / (c->peak * 1e9), Counter::kIsIterationInvariantRate);
    if (sh.decode()) {
        const double bytes = sb_kv_bytes(sh.s);
        state.counters["kv_gbps"] = Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
        if (c->dram > 0)
            state.counters["pct_dram"] =
                Counter(100.0 * bytes / (c->dram * 1e9), Counter::kIsIterationInvariantRate);
    }
    state.counters["check_max_abs"] = c->err.max_abs;
    state.counters["check_max_rel"] = c->err.max_rel;
    state.counters["threads_used"] = c->threads_used;
    state.SetLabel(sh.ls ? "checked: rows and columns against double"
                   : sh.expect.full ? "checked: whole output"
                                    : "checked: slice");
}

// ---- the table ---------------------------------------------------------------------

std::string fmt_ms(double ms) {
    char b[32];
    std::snprintf(b, sizeof b, ms >= 100 ? "%.0f" : ms >= 10 ? "%.1f" : ms >= 1 ? "%.2f" : "%.4f",
                  ms);
    return b;
}

class TableReporter : public benchmark::BenchmarkReporter {
  public:
    explicit TableReporter(size_t total) : total_(total) {}

    bool ReportContext(const Context &) override { return true; }

    // One call per case: its repetitions, then (with more than one) the aggregates.
    void ReportRuns(const std::vector<Run> &runs) override {
        for (const Run &r : runs) {
            const std::string key = r.run_name.function_name;
            Result &res = g_results[key];
            if (r.error_occurred) {
                res.error = r.error_message;
                continue;
            }
            const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
            const bool single = r.run_type == Run::RT_Iteration && r.repetitions == 1;
            if (!median && !single)
                continue;
            res.ok = true;
            res.ms = r.GetAdjustedRealTime(); // the unit is ms (Unit(kMillisecond))
            auto get = [&](const char *name) {
                auto it = r.counters.find(name);
                return it == r.counters.end() ? -1.0 : it->second.value;
            };
            res.gflops = get("gflops");
            res.pct_peak = get("pct_peak");
            res.kv_gbps = get("kv_gbps");
            res.pct_dram = get("pct_dram");
            res.other = std::max(0.0, get("other_cores"));
        }
        // Google Benchmark reports a case's repetitions and its aggregates in two calls:
        // print the case once, when its result (or its error) is in.
        if (runs.empty())
            return;
        const std::string key = runs.front().run_name.function_name;
        const Result &res = g_results[key];
        if ((!res.ok && res.error.empty()) || done_keys_.count(key))
            return;
        done_keys_.insert(key);
        if (res.ok)
            std::fprintf(stderr, "  [%2zu/%zu] %-34s %10s ms  %8.1f GFLOP/s\n",
                         done_keys_.size(), total_, key.c_str(), fmt_ms(res.ms).c_str(),
                         res.gflops);
        else
            std::fprintf(stderr, "  [%2zu/%zu] %-34s error: %s\n", done_keys_.size(), total_,
                         key.c_str(), res.error.c_str());
    }

    void Finalize() override;

  private:
    size_t total_;
    std::set<std::string> done_keys_;
};

const Result *result(const std::string &shape, const std::string &variant, int threads) {
    auto it = g_results.find(shape + "/" + variant + "/threads:" + std::to_string(threads));
    return it != g_results.end() && it->second.ok ? &it->second : nullptr;
}

const char *verdict(bool met) { return met ? "met" : "NOT met"; }

// The issues' targets and comparisons, from the table's rows (the best ISA's fused path;
// a line is left out when its rows were filtered out or failed).
void print_targets() {
    const std::string &v = g_best_isa;
    const int n = g_nproc;
    std::vector<int> counts = {1};
    if (n > 1)
        counts.push_back(n);
    auto thr = [](int t) { return std::to_string(t) + (t > 1 ? " threads" : " thread"); };
    std::vector<std::string> lines;
    char b[320];
    for (const char *shape : {"prefill-causal", "long-causal", "decode-gqa", "decode-long",
                              "decode-long-f16"}) {
        const Result *r1 = result(shape, v, 1), *rn = result(shape, v, n);
        if (n < 2 || !r1 || !rn)
            continue;
        const double ratio = rn->ms / r1->ms;
        int len = std::snprintf(b, sizeof b, "%s: %d-thread time = %.3fx the 1-thread time "
                                "(%.2fx speedup)", shape, n, ratio, 1.0 / ratio);
        if (std::strcmp(shape, "prefill-causal") == 0 && len > 0 && len < (int)sizeof b)
            std::snprintf(b + len, sizeof b - (size_t)len, "; issue 6 target <= %.2fx: %s",
                          kTargetPrefillScaling, verdict(ratio <= kTargetPrefillScaling));
        lines.push_back(b);
    }
    for (int t : counts) {
        const Result *r = result("decode-long", v, t);
        auto d = g_dram.find(t);
        if (!r || d == g_dram.end() || r->kv_gbps < 0)
            continue;
        const double pct = 100.0 * r->kv_gbps / d->second;
        int len = std::snprintf(b, sizeof b, "decode-long fp32, %s: K/V read at %.1f GB/s = "
                                "%.0f%% of the %s DRAM read bandwidth (%.1f GB/s)",
                                thr(t).c_str(), r->kv_gbps, pct, thr(t).c_str(), d->second);
        if (t == n && len > 0 && len < (int)sizeof b)
            std::snprintf(b + len, sizeof b - (size_t)len, "; issue 6 target >= %.0f%%: %s",
                          kTargetDecodeDram, verdict(pct >= kTargetDecodeDram));
        lines.push_back(b);
    }
    for (int t : counts) {
        const Result *a = result("decode-long", v, t), *h = result("decode-long-f16", v, t);
        if (!a || !h)
            continue;
        const double ratio = a->ms / h->ms;
        int len = std::snprintf(b, sizeof b, "decode-long f16 / fp32 speed, %s: %.2fx (%.2f "
                                "vs %.2f ms)", thr(t).c_str(), ratio, h->ms, a->ms);
        if (t == n && len > 0 && len < (int)sizeof b)
            std::snprintf(b + len, sizeof b - (size_t)len, "; issue 7 target >= %.1fx: %s",
                          kTargetF16Speedup, verdict(ratio >= kTargetF16Speedup));
        lines.push_back(b);
    }
    for (int t : counts) {
        const Result *w = result("window-8k", v, t), *c1 = result("causal-1k", v, t),
                     *lc = result("long-causal", v, t);
        if (!w || !c1)
            continue;
        int len = std::snprintf(b, sizeof b, "window-8k, %s: %.1f ms = %.2fx 8 x causal-1k "
                                "(%.1f ms)", thr(t).c_str(), w->ms, w->ms / (8 * c1->ms),
                                8 * c1->ms);
        if (lc && len > 0 && len < (int)sizeof b)
            std::snprintf(b + len, sizeof b - (size_t)len, ", %.2fx long-causal (%.1f ms)",
                          w->ms / lc->ms, lc->ms);
        lines.push_back(b);
    }
    for (int t : counts) {
        const Result *r = result("linear", v, t);
        if (!r || r->pct_peak < 0)
            continue;
        int len = std::snprintf(b, sizeof b, "linear, %s: %.1f GFLOP/s = %.1f%% of the FMA "
                                "peak", thr(t).c_str(), r->gflops, r->pct_peak);
        if (t == 1 && len > 0 && len < (int)sizeof b)
            std::snprintf(b + len, sizeof b - (size_t)len, "; issue 8 target >= %.0f%%: %s",
                          kTargetLinearPeak, verdict(r->pct_peak >= kTargetLinearPeak));
        lines.push_back(b);
    }
    if (lines.empty())
        return;
    std::printf("targets and comparisons, %s rows (medians above):\n", v.c_str());
    for (const std::string &l : lines)
        std::printf("  %s\n", l.c_str());
    std::printf("\n");
}

void TableReporter::Finalize() {
    std::printf("\n%-15s %-9s %5s %10s %10s %8s %8s %6s %8s %6s %5s  %s\n", "shape",
                "variant", "thr", "time ms", "ref ms", "speedup", "GFLOP/s", "%peak", "KV GB/s",
                "%DRAM", "other", "check max|err|");
    const Shape *prev = nullptr;
    for (const Case &c : g_cases) {
        const Result &r = g_results[c.name];
        if (prev && prev != c.shape)
            std::printf("\n");
        prev = c.shape;
        const std::string ref_key = std::string(c.shape->name()) + "/reference/threads:1";
        auto ref_it = g_results.find(ref_key);
        const bool have_ref = ref_it != g_results.end() && ref_it->second.ok;
        char ref[32] = "-", speed[32] = "-", gf[32] = "-", pk[32] = "-", kv[32] = "-";
        char dr[32] = "-", chk[48], thr[24];
        std::snprintf(thr, sizeof thr, c.threads_used == c.threads ? "%d" : "%d(%d)",
                      c.threads, c.threads_used);
        if (have_ref)
            std::snprintf(ref, sizeof ref, "%s", fmt_ms(ref_it->second.ms).c_str());
        if (c.kind == Kind::Reference)
            std::snprintf(chk, sizeof chk, "(the oracle)");
        else
            std::snprintf(chk, sizeof chk, "%.1e %s", c.err.max_abs,
                          c.shape->ls ? "rows+cols" : c.shape->expect.full ? "whole" : "slice");
        if (!r.ok) {
            std::printf("%-15s %-9s %5s %10s %10s  error: %s\n", c.shape->name(),
                        c.variant.c_str(), thr, "-", ref, r.error.c_str());
            continue;
        }
        if (have_ref)
            std::snprintf(speed, sizeof speed, "%.1fx", ref_it->second.ms / r.ms);
        std::snprintf(gf, sizeof gf, "%.1f", r.gflops);
        if (r.pct_peak >= 0)
            std::snprintf(pk, sizeof pk, "%.1f", r.pct_peak);
        if (r.kv_gbps >= 0)
            std::snprintf(kv, sizeof kv, "%.1f", r.kv_gbps);
        if (r.pct_dram >= 0)
            std::snprintf(dr, sizeof dr, "%.0f", r.pct_dram);
        std::printf("%-15s %-9s %5s %10s %10s %8s %8s %6s %8s %6s %5.1f  %s\n", c.shape->name(),
                    c.variant.c_str(), thr, fmt_ms(r.ms).c_str(), ref, speed, gf, pk, kv, dr,
                    r.other, chk);
    }
    std::printf("\n");
    print_targets();
    for (const std::string &n : g_notes)
        std::printf("%s\n", n.c_str());
}

// ---- setup -------------------------------------------------------------------------

std::string shape_str(const Shape &sh) {
    char b[320], f[160];
    if (sh.ls) {
        std::snprintf(b, sizeof b, "sdpa_linear M=%lld K=%lld N=%lld%s", (long long)sh.ls->M,
                      (long long)sh.ls->K, (long long)sh.ls->N, sh.ls->bias ? " +bias" : "");
        return b;
    }
    const sb_shape *s = sh.s;
    std::snprintf(b, sizeof b, "B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld Dk=%lld Dv=%lld%s%s",
                  (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->Tq,
                  (long long)s->Tkv, (long long)s->Dk, (long long)s->Dv,
                  s->causal ? " causal" : "", sb_features_str(s, f, sizeof f));
    return b;
}

// Problem and expected output of a shape, made on first use. The GEMM's expectation is
// computed per case, after its run (sb_linear_check).
void prepare(Shape &sh) {
    if (sh.ready)
        return;
    if (sh.ls) {
        if (sb_linear_init(&sh.lin, sh.ls) != 0)
            die("%s: out of memory", sh.name());
        sh.scope = "rows 0, M/2, M-1 and columns 0, N/2, N-1 against a double-precision product";
        std::fprintf(stderr, "%-15s %s, %.3g GFLOP; checked on %s\n", sh.name(),
                     shape_str(sh).c_str(), sh.flops * 1e-9, sh.scope.c_str());
        sh.ready = true;
        return;
    }
    if (sb_problem_init(&sh.prob, sh.s) != 0)
        die("%s: out of memory", sh.name());
    const sdpa_status st = sb_expect_make(&sh.expect, &sh.prob);
    if (st != SDPA_OK)
        die("sdpa_reference on %s: %s", sh.name(), sdpa_strerror(st));
    // The reference's rate on what it computed; the reference's own ~4 GFLOP/s here when
    // that was nothing (every checked row sees no key).
    const double rate = sh.expect.flops > 0 ? sh.expect.flops / sh.expect.seconds : 4e9;
    sh.ref_estimate = sh.flops / rate;
    char scope[512];
    sh.scope = sb_expect_scope(&sh.expect, sh.s, scope, sizeof scope);
    std::fprintf(stderr, "%-15s %s, %.3g GFLOP; reference on the %s: %.2f s\n", sh.name(),
                 shape_str(sh).c_str(), sh.flops * 1e-9, sh.scope.c_str(), sh.expect.seconds);
    sh.ready = true;
}

// Run a case once, check it, and note how long it took.
void check(Case &c) {
    Shape &sh = *c.shape;
    if (c.kind == Kind::Reference) { // the oracle: no check, its time is known or estimated
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
    c.err = c.kind == Kind::Linear ? sb_linear_check(&sh.lin) : sb_compare(&sh.expect, &sh.prob);
    if (c.err.bad != 0) {
        char tol[96];
        if (sh.ls)
            std::snprintf(tol, sizeof tol, "|y - r| <= (K + 3) 2^-24 sum|x w|");
        else
            std::snprintf(tol, sizeof tol, "|o - r| <= 1e-5 + %.3g |r|", sb_rel_tol(sh.s->dtype));
        std::fprintf(stderr,
                     "sdpa-bench: %s is WRONG: %lld of %lld checked elements outside %s "
                     "(max_abs %.3g, max_rel %.3g) on the %s of %s. Not timing it; "
                     "aborting.\n",
                     c.name.c_str(), (long long)c.err.bad, (long long)c.err.checked, tol,
                     c.err.max_abs, c.err.max_rel, sh.scope.c_str(), shape_str(sh).c_str());
        std::exit(1);
    }
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

double planned_seconds() {
    double total = 0;
    for (const Case &c : g_cases)
        total += c.t_check * c.iters * c.reps;
    return total;
}

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
    const std::string filter = benchmark::GetBenchmarkFilter();

    const int nproc = sb_nproc();
    std::vector<int> thread_counts = {1};
    if (nproc > 1)
        thread_counts.push_back(nproc);

    // ISAs: every table this build has and this CPU runs, best first.
    const sdpa_isa order[] = {SDPA_ISA_AVX512, SDPA_ISA_AVX2, SDPA_ISA_NEON, SDPA_ISA_SCALAR};
    std::vector<sdpa_isa> isas;
    std::string isa_list, missing;
    for (sdpa_isa isa : order) {
        if (sdpa_isa_supported(isa)) {
            isas.push_back(isa);
            isa_list += std::string(isa_list.empty() ? "" : " ") + sdpa_isa_name(isa);
        } else if (sb_peak_what(isa)) { // the CPU has it, this build has no table
            missing += std::string(missing.empty() ? "" : " ") + sdpa_isa_name(isa);
        }
    }
    const bool have_simd = isas.front() != SDPA_ISA_SCALAR;
    g_best_isa = sdpa_isa_name(isas.front());
    g_nproc = nproc;

    std::fprintf(stderr, "libsdpa %s benchmark, suite %s: ISAs %s%s%s; threads 1 and %d\n",
                 sdpa_version(), suite->name, isa_list.c_str(),
                 missing.empty() ? "" : " (CPU also has, no table built: ",
                 missing.empty() ? "" : (missing + ")").c_str(), nproc);
    benchmark::AddCustomContext("sdpa_version", sdpa_version());
    benchmark::AddCustomContext("sdpa_suite", suite->name);
    benchmark::AddCustomContext("sdpa_isas", isa_list);
    benchmark::AddCustomContext("sdpa_threads_all", std::to_string(nproc));
    benchmark::AddCustomContext("gflops_formula",
                                "2*(Dk+Dv)*visible scores; visible scores = Hq*sum_b sum_i "
                                "|keys row i of entry b sees|: j < Tkv_b, causal j <= d(i), "
                                "window d(i)-left <= j <= d(i)+right, d(i) = i+Tkv_b-Tq "
                                "(top-left: i); keys only an explicit mask hides count; "
                                "linear: 2*M*K*N");
    benchmark::AddCustomContext("kv_gbps_formula",
                                "bytes of the K and V rows some query row sees, once, at "
                                "their storage size (2 bytes for f16), / time");

    // Peaks of every ISA the CPU runs (tables or not), at 1 thread and at all cores.
    std::map<std::pair<int, int>, double> peak;
    std::string peak_line = "fp32 FMA peak, GFLOP/s (1 thread / " + std::to_string(nproc) +
                            " threads), measured in this run, as used for % of peak:";
    std::vector<std::string> contended;
    for (sdpa_isa isa : order) {
        if (!sb_peak_what(isa))
            continue;
        const std::string name = sdpa_isa_name(isa);
        for (int t : thread_counts) {
            const double measured = sb_peak_gflops(isa, t);
            const double scaled = t * peak[{isa, 1}]; // t > 1: the 1-thread figure is in
            peak[{isa, t}] = measured;
            if (t > 1 && measured < kContendedPeakRatio * scaled) {
                peak[{isa, t}] = scaled;
                char b[160];
                std::snprintf(b, sizeof b, "%s %d threads measured %.0f < %.0f%% of %d x %.0f",
                              name.c_str(), t, measured, 100 * kContendedPeakRatio, t,
                              peak[{isa, 1}]);
                contended.push_back(b);
            }
            const std::string key = "peak_gflops_" + name + "_threads" + std::to_string(t);
            benchmark::AddCustomContext(key, std::to_string(measured));
            benchmark::AddCustomContext(key + "_used", std::to_string(peak[{isa, t}]));
        }
        benchmark::AddCustomContext("peak_loop_" + name, sb_peak_what(isa));
        char b[96];
        std::snprintf(b, sizeof b, " %s %.0f / %.0f", name.c_str(), peak[{isa, 1}],
                      peak[{isa, thread_counts.back()}]);
        peak_line += b;
    }
    std::fprintf(stderr, "%s\n", peak_line.c_str());
    // Whether a BF16 QK^T table would pay: the vdpbf16ps rate against the fp32 FMA's.
    if (const double bf16 = sb_peak_bf16_gflops(1); bf16 > 0 && peak[{SDPA_ISA_AVX512, 1}] > 0) {
        benchmark::AddCustomContext("peak_gflops_avx512_bf16_threads1", std::to_string(bf16));
        std::fprintf(stderr,
                     "AVX512-BF16 dot-product peak (vdpbf16ps, 16 chains x 16 lanes), 1 thread: "
                     "%.0f GFLOP/s = %.2fx the avx512 fp32 FMA peak (no table uses it)\n",
                     bf16, bf16 / peak[{SDPA_ISA_AVX512, 1}]);
    }
    for (const std::string &c : contended) {
        const std::string note = "all-core peak measured while other jobs held cores (" + c +
                                 "): % of peak there divides by threads x the 1-thread peak";
        std::fprintf(stderr, "%s\n", note.c_str());
        g_notes.push_back(note);
    }

    // DRAM read bandwidth at 1 thread and at all cores, with each ISA's read loop; the
    // best loop's figure is what the decode rows' "% of DRAM" divides by.
    std::string dram_line = "DRAM read, GB/s (1 thread / " + std::to_string(nproc) +
                            " threads), streaming read of " +
                            std::to_string(SB_DRAM_BUFFER_BYTES >> 20) +
                            " MiB, best of 12 passes, measured in this run:";
    for (sdpa_isa isa : order) {
        if (!sb_peak_what(isa))
            continue;
        const std::string name = sdpa_isa_name(isa);
        std::string figures;
        for (int t : thread_counts) {
            const double g = sb_dram_read_gbps(isa, t);
            g_dram[t] = std::max(g_dram[t], g);
            benchmark::AddCustomContext("dram_read_gbps_" + name + "_threads" + std::to_string(t),
                                        std::to_string(g));
            char b[32];
            std::snprintf(b, sizeof b, "%s%.1f", figures.empty() ? "" : " / ", g);
            figures += b;
        }
        dram_line += " " + name + " loop " + figures;
    }
    sb_dram_release();
    for (int t : thread_counts)
        benchmark::AddCustomContext("dram_read_gbps_threads" + std::to_string(t),
                                    std::to_string(g_dram[t]));
    std::fprintf(stderr, "%s\n", dram_line.c_str());
#ifdef SB_WITH_BLAS
    benchmark::AddCustomContext("blas", sb_blas_name());
    auto best_peak = [&](int t) {
        double best = 0;
        for (const auto &kv : peak)
            if (kv.first.second == t)
                best = std::max(best, kv.second);
        return best;
    };
#endif

    // The cases, in the table's order, filtered like Google Benchmark filters names: the
    // attention shapes, then the GEMM.
    g_shapes.resize((size_t)(sb_suite_len + sb_linear_suite_len));
    std::vector<std::string> scalar_skipped;
    for (size_t si = 0; si < g_shapes.size(); si++) {
        Shape &sh = g_shapes[si];
        if (si < (size_t)sb_suite_len) {
            sh.s = &sb_suite[si];
            sh.flops = sb_flops(sh.s);
        } else {
            sh.ls = &sb_linear_suite[si - (size_t)sb_suite_len];
            sh.flops = sb_linear_flops(sh.ls);
        }
        auto add = [&](Kind kind, sdpa_isa isa, const std::string &variant, int t, double pk) {
            Case c{&sh, kind, isa, t, t, variant,
                   std::string(sh.name()) + "/" + variant + "/threads:" + std::to_string(t)};
            c.peak = pk;
            if (sh.decode())
                c.dram = g_dram[t];
            if (matches(filter, c.name))
                g_cases.push_back(c);
        };
        for (sdpa_isa isa : isas) {
            if (isa == SDPA_ISA_SCALAR && have_simd && !suite->scalar_everywhere &&
                (sh.flops > kScalarDefaultMaxFlops ||
                 (sh.s && sb_kv_bytes(sh.s) > kScalarDefaultMaxKvBytes))) {
                if (matches(filter, std::string(sh.name()) + "/scalar/threads:1"))
                    scalar_skipped.push_back(sh.name());
                continue;
            }
            for (int t : thread_counts)
                add(sh.ls ? Kind::Linear : Kind::Fused, isa, sdpa_isa_name(isa), t,
                    peak[{isa, t}]);
        }
        if (sh.ls)
            continue;
#ifdef SB_WITH_BLAS
        if (sb_is_plain(sh.s)) // the baseline knows plain fp32 attention only
            for (int t : thread_counts)
                add(Kind::Blas, SDPA_ISA_AUTO, "openblas", t, best_peak(t));
#endif
        add(Kind::Reference, SDPA_ISA_AUTO, "reference", 1, 0.0);
    }
    if (g_cases.empty()) {
        std::fprintf(stderr, "sdpa-bench: no case matches --benchmark_filter=%s\n",
                     filter.c_str());
        return 1;
    }

    // Check every case once (this also measures it), and drop reference rows that would
    // take too long.
    std::fprintf(stderr, "checking every case against the reference before timing it:\n");
    std::vector<Case> kept_cases;
    for (Case &c : g_cases) {
        prepare(*c.shape);
        if (c.kind == Kind::Reference && c.shape->ref_estimate > suite->ref_max_seconds) {
            char b[256];
            std::snprintf(b, sizeof b,
                          "reference not timed on %s: about %.0f s per call (this suite's "
                          "limit: %.0f s)%s",
                          c.shape->name(), c.shape->ref_estimate, suite->ref_max_seconds,
                          suite == &kDefaultSuite ? "; make bench-full times it" : "");
            g_notes.push_back(b);
            continue;
        }
        check(c);
        if (c.kind != Kind::Reference)
            std::fprintf(stderr, "  ok  %-34s %9.2f ms  max_abs %.2g  max_rel %.2g\n",
                         c.name.c_str(), c.t_check * 1e3, c.err.max_abs, c.err.max_rel);
        kept_cases.push_back(c);
    }
    g_cases = kept_cases;

    double f = 1.0;
    for (Case &c : g_cases)
        plan(c, *suite, f);
    const double left = std::max(0.0, suite->run_budget - (sb_now() - start));
    if (planned_seconds() > left) { // shrink once to fit what the budget has left
        f = left / planned_seconds();
        for (Case &c : g_cases)
            plan(c, *suite, f);
    }
    std::fprintf(stderr, "timing %zu cases, about %.0f s:\n", g_cases.size(), planned_seconds());

    for (const Case &c : g_cases)
        benchmark::RegisterBenchmark(c.name.c_str(), bench_case, &c)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(c.iters)
            ->Repetitions(c.reps);

    if (!scalar_skipped.empty()) {
        char b[256];
        std::snprintf(b, sizeof b,
                      "scalar rows only on shapes up to %.0f GFLOP and %.0f MiB of K/V in this "
                      "suite (SIMD tables present); make bench-full runs them on all; skipped "
                      "here:",
                      kScalarDefaultMaxFlops * 1e-9, kScalarDefaultMaxKvBytes / (1 << 20));
        std::string s = b;
        for (const std::string &n : scalar_skipped)
            s += " " + n;
        g_notes.push_back(s);
    }
    g_notes.push_back("time: median of repetitions, real time; ref: the naive reference "
                      "(double, 1 thread); speedup = ref / time; thr 2(1): 2 asked, 1 used.");
    g_notes.push_back("GFLOP/s counts 2*(Dk+Dv) flops per visible score (causal, window: "
                      "only the keys each row sees); %peak: of the row ISA's measured FMA peak "
                      "at that thread count (openblas: of the best ISA's).");
    g_notes.push_back("KV GB/s: bytes of K and V stored (f16: 2 per element), once per call, / "
                      "time; %DRAM: of the DRAM read bandwidth measured at that thread count.");
    g_notes.push_back("other: cores' worth of CPU other processes (and the hypervisor's steal) "
                      "took while the row was timed, median of its repetitions (/proc/stat); "
                      "above ~0.2, a 2-thread row shared a core and says little.");
    for (const Shape &sh : g_shapes) // what the names do not say: features, the GEMM
        if ((sh.ls || !sb_is_plain(sh.s)) &&
            std::any_of(g_cases.begin(), g_cases.end(), [&](const Case &c) { return c.shape == &sh; }))
            g_notes.push_back(std::string(sh.name()) + ": " + shape_str(sh));
    g_notes.push_back(peak_line);
    g_notes.push_back(dram_line);
    for (const Shape &sh : g_shapes)
        if (sh.ready && sh.s && !sh.expect.full)
            g_notes.push_back("check on " + std::string(sh.name()) + ": " + sh.scope);

    TableReporter reporter(g_cases.size());
    benchmark::RunSpecifiedBenchmarks(&reporter, "all");
    benchmark::Shutdown();
    for (Shape &sh : g_shapes)
        if (sh.ready) {
            sb_expect_free(&sh.expect);
            sb_problem_free(&sh.prob);
            sb_linear_free(&sh.lin);
        }
    return 0;
}
