# libsdpa - fused scaled-dot-product attention for CPUs.
#
#   make                 build/libsdpa.a, build/libsdpa.so (soname libsdpa.so.$(SOVERSION))
#   make test            build and run the test suite (ends with "N passed, N failed")
#   make demo            build and run tools/sdpa-demo (fused vs reference, errors, times)
#   make cpuinfo         build and run tools/sdpa-cpuinfo (CPUID/XCR0 bits, usable ISAs)
#   make bench           build and run the benchmark (see "the benchmark" below)
#   make test-aarch64    cross-compile for aarch64 and run the suite under qemu-aarch64
#   make install PREFIX=/usr/local [DESTDIR=...]   header, both libraries, sdpa.pc
#   make clean
#   developer targets (aarch64 under qemu, fuzzing, sanitizers, valgrind): mk/dev.mk
#
# Knobs: CC=gcc|clang (or a cross compiler), OPENMP=0 for a serial library, WERROR=1
# (CI) for -Werror, SANITIZE=address,undefined for a sanitized build in its own
# directory, CFLAGS for optimisation/debug flags, CPPFLAGS and LDFLAGS as usual.
# AMX_MODEL=1 builds the AMX table on the tile model (kernels/amx/amx_model.h) instead of
# the AMX instructions, usable on any AVX512_BF16 host, so `sdpa-test --isa amx` tests
# that table's code without AMX hardware (use its own BUILD=, e.g. build-amxmodel).
#
# Per-ISA compiler flags apply to kernels/<isa>/ files only; src/ is compiled with no
# -m flags, so nothing outside the kernel tables can use an instruction the CPU may lack.
# The ISA list comes from the target architecture (CC -dumpmachine) and from which
# kernels/<isa> directories exist.

# The version is the header's (SDPA_VERSION_STRING); the soname changes with the ABI.
VERSION   = $(shell sed -n 's/^\#define SDPA_VERSION_STRING "\(.*\)"/\1/p' include/sdpa.h)
SOVERSION := 0
PREFIX    ?= /usr/local
LIBDIR    ?= $(PREFIX)/lib
INCDIR    ?= $(PREFIX)/include

OPENMP   ?= 1
WERROR   ?= 0
SANITIZE ?=
AMX_MODEL ?= 0
CFLAGS   ?= -O2 -g

ARCH := $(firstword $(subst -, ,$(shell $(CC) -dumpmachine)))
IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -qi clang && echo 1)

ifneq ($(SANITIZE),)
BUILD ?= build-san
else
BUILD ?= build
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
ifeq ($(WERROR),1)
WARN += -Werror
endif

OMP_CFLAGS :=
OMP_LIBS   :=
OMP_PC     :=
ifeq ($(OPENMP),1)
OMP_CFLAGS := -fopenmp
ifeq ($(IS_CLANG),1)
OMP_LIBS := -fopenmp=libomp
OMP_PC   := -lomp
else
OMP_LIBS := -fopenmp
OMP_PC   := -lgomp
endif
endif

SAN_FLAGS :=
ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

BASE_CFLAGS := -std=c11 -D_DEFAULT_SOURCE $(WARN) $(CPPFLAGS) $(CFLAGS) $(OMP_CFLAGS) \
               $(SAN_FLAGS) -Iinclude
LIB_CFLAGS  := $(BASE_CFLAGS) -fPIC -fvisibility=hidden
LDLIBS      := $(LDFLAGS) $(OMP_LIBS) $(SAN_FLAGS) -lm -lpthread

# ---- sources (sources.mk: the list CMakeLists.txt builds too) ---------------------------
include sources.mk
SIMD_ISAS := $(SDPA_ISAS_$(ARCH))
LIB_SRCS  := $(SDPA_SRCS) $(SDPA_KERNELS_scalar) $(foreach i,$(SIMD_ISAS),$(SDPA_KERNELS_$(i)))
LIB_OBJS  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
ISA_DEFS  := $(foreach i,$(SIMD_ISAS),-DSDPA_BUILD_$(shell echo $(i) | tr a-z A-Z))
# The tile model: amx.c without the AMX flags (the model is C), and src/dispatch.c's amx
# row usable wherever avx512bf16 is.
ifeq ($(AMX_MODEL),1)
ISA_DEFS += -DSDPA_AMX_MODEL
SDPA_ISAFLAGS_amx := $(SDPA_ISAFLAGS_avx512bf16) -DSDPA_AMX_MODEL
endif
# A source file in src/ or kernels/ that the list forgot is an error, not a missing symbol.
UNLISTED  := $(filter-out $(SDPA_SRCS) $(foreach i,scalar $(SDPA_ISAS_x86_64) \
                 $(SDPA_ISAS_aarch64),$(SDPA_KERNELS_$(i))),$(wildcard src/*.c kernels/*/*.c))
$(if $(UNLISTED),$(error sources.mk does not list $(UNLISTED)))

SO_NAME := libsdpa.so.$(SOVERSION)
SO_FILE := libsdpa.so.$(VERSION)

# The suite replays the fuzz corpus too (tests/test_fuzzcases.c), so the fuzz target's
# core joins it; common/ is the case library the tests, the bench and the tools share;
# bench/shim.c holds the bench's shape table, which the schedule suite checks.
TEST_SRCS := $(wildcard tests/*.c) tests/fuzz/fuzz_core.c common/case.c bench/shim.c
TEST_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRCS))

.PHONY: all lib tools test demo cpuinfo install uninstall clean
all: lib tools

lib: $(BUILD)/libsdpa.a $(BUILD)/libsdpa.so

# Everything that changes what an object is: the compiler, the flags, the ISA set. The
# stamp's rule rewrites it only when the line differs from the last build in $(BUILD),
# and every object depends on it, so switching CC, CFLAGS or OPENMP, or adding a
# kernels/<isa> directory, never leaves a stale object behind. (A rule, not parse-time
# work: `make clean` and `make install` do not touch it.)
CONFIG_LINE  := $(CC) | $(CPPFLAGS) | $(CFLAGS) | OPENMP=$(OPENMP) | SANITIZE=$(SANITIZE) | \
                AMX_MODEL=$(AMX_MODEL) | $(ARCH) | $(SIMD_ISAS)
CONFIG_STAMP := $(BUILD)/config.stamp
.PHONY: FORCE
$(CONFIG_STAMP): FORCE
	@mkdir -p $(dir $@)
	@test "$$(cat $@ 2>/dev/null)" = '$(CONFIG_LINE)' || printf '%s\n' '$(CONFIG_LINE)' > $@

$(BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(ISA_DEFS) -MMD -MP -c $< -o $@

# $(word 2,...) of the path is the ISA directory name.
# A sanitized build (SANITIZE=) instruments src/ and the scalar table; the SIMD tables are
# built plain: instrumented, their register-tile switches take minutes to compile (the
# fuzz build does the same). Their reads of caller memory are still checked: the suite's
# buffers end on unmapped pages, and valgrind runs the AVX2 table. The kernels use no
# OpenMP either, so their command line is the same in the default, serial, sanitized and
# tile-model builds of one compiler: a compiler cache (CI's ccache) compiles each SIMD
# table once per compiler and flags, not once per build directory.
KERN_CFLAGS := $(filter-out $(SAN_FLAGS) $(OMP_CFLAGS),$(LIB_CFLAGS))
$(BUILD)/obj/kernels/scalar/%.o: kernels/scalar/%.c
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/kernels/%.o: kernels/%.c
	@mkdir -p $(dir $@)
	$(CC) $(KERN_CFLAGS) $(SDPA_ISAFLAGS_$(word 2,$(subst /, ,$<))) -MMD -MP -c $< -o $@

$(BUILD)/libsdpa.a: $(LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libsdpa.so: $(LIB_OBJS)
	$(CC) -shared -Wl,-soname,$(SO_NAME) -o $(BUILD)/$(SO_FILE) $^ $(LDLIBS)
	ln -sf $(SO_FILE) $(BUILD)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

# Tests link the static library: they reach internal symbols (kernel tables, the driver
# with an explicit table), which the shared library hides.
$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -D_GNU_SOURCE -MMD -MP -c $< -o $@

$(BUILD)/obj/common/%.o: common/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/sdpa-test: $(TEST_OBJS) $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $(TEST_OBJS) $(BUILD)/libsdpa.a $(LDLIBS)

test: $(BUILD)/sdpa-test
	./$(BUILD)/sdpa-test

$(BUILD)/sdpa-demo: tools/sdpa-demo.c $(BUILD)/obj/common/case.o $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $^ $(LDLIBS)

demo: $(BUILD)/sdpa-demo
	./$(BUILD)/sdpa-demo

# sdpa-cpuinfo reads internal symbols (the raw CPUID bits), so it links the static library.
$(BUILD)/sdpa-cpuinfo: tools/sdpa-cpuinfo.c $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $< $(BUILD)/libsdpa.a $(LDLIBS)

cpuinfo: $(BUILD)/sdpa-cpuinfo
	./$(BUILD)/sdpa-cpuinfo

# sdpa-heatmap writes its PNG through zlib (Debian's zlib1g-dev).
$(BUILD)/sdpa-heatmap: tools/sdpa-heatmap.c $(BUILD)/obj/common/case.o $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $^ $(LDLIBS) -lz

# sdpa-kvq-error: what quantizing K/V costs (docs/PERFORMANCE.md, "KV caches").
$(BUILD)/sdpa-kvq-error: tools/sdpa-kvq-error.c $(BUILD)/obj/common/case.o $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $^ $(LDLIBS)

# The plain-C command-line tools (no Google Benchmark needed).
tools: $(BUILD)/sdpa-demo $(BUILD)/sdpa-cpuinfo $(BUILD)/sdpa-run $(BUILD)/sdpa-heatmap \
       $(BUILD)/sdpa-schedule $(BUILD)/sdpa-kvq-error

# ---- the benchmark (bench/) and the measuring tools (tools/) ---------------------------
#   make bench               build and run the standard suite (under 3 minutes on 2 cores):
#                            a table on stdout, Google Benchmark JSON in $(BENCH_JSON)
#   make bench-full          every ISA on every shape, the slow reference rows, more reps
#   make bench BLAS=openblas add the unfused OpenBLAS baseline rows (libopenblas-dev)
#   make sdpa-run            build/sdpa-run: one attention from flags (plain C)
#   make plot                $(BENCH_JSON) -> $(BUILD)/bench.png (python3-matplotlib)
#   make compare BASE=a.json [NEW=b.json]   per-case ratios of two bench JSON files
# Google Benchmark is Debian's libbenchmark-dev. Only bench/peak_<isa>.c (the FMA peak
# loops) get their ISA's -m flags; the rest of bench/ and tools/ is built without.
BLAS       ?=
BENCH_JSON ?= $(BUILD)/bench.json
BENCH_ARGS ?=
# Debian's python3 (where python3-matplotlib installs) even if another python3 is first
# in PATH.
PYTHON     ?= $(firstword $(wildcard /usr/bin/python3) python3)

# The C++ compiler that matches CC (and its OpenMP runtime), unless CXX is given.
ifeq ($(origin CXX),default)
CXX := $(if $(IS_CLANG),clang++,$(if $(filter %gcc,$(CC)),$(CC:%gcc=%g++),g++))
endif
BENCH_CFLAGS   := $(BASE_CFLAGS) -D_GNU_SOURCE
BENCH_CXXFLAGS := -std=c++17 -Wall -Wextra -Wshadow $(if $(filter 1,$(WERROR)),-Werror) \
                  $(CFLAGS) $(OMP_CFLAGS) $(SAN_FLAGS) -Iinclude
# Every SIMD table has its peak loop, bench/peak_<isa>.c.
PEAK_SIMD := $(SIMD_ISAS)
# The tile-model build (AMX_MODEL=1) has no AMX peak: its amx row is the model.
ifeq ($(AMX_MODEL),1)
PEAK_SIMD := $(filter-out amx,$(PEAK_SIMD))
endif
PEAK_ISAS := scalar $(PEAK_SIMD)
PEAK_DEFS := $(foreach i,$(PEAK_SIMD),-DSB_PEAK_$(shell echo $(i) | tr a-z A-Z))
BENCH_COBJS := $(BUILD)/obj/bench/shim.o $(BUILD)/obj/bench/peak.o $(BUILD)/obj/common/case.o \
               $(foreach i,$(PEAK_ISAS),$(BUILD)/obj/bench/peak_$(i).o)

# A BLAS build is its own binary, so switching BLAS= never leaves a stale one behind.
ifeq ($(BLAS),openblas)
BENCH_BIN   := $(BUILD)/sdpa-bench-openblas
BENCH_MAIN  := $(BUILD)/obj/bench/bench-openblas.o
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
BENCH_COBJS += $(BUILD)/obj/bench/blas.o
else ifeq ($(BLAS),)
BENCH_BIN   := $(BUILD)/sdpa-bench
BENCH_MAIN  := $(BUILD)/obj/bench/bench.o
else
$(error BLAS=$(BLAS): the benchmark knows BLAS=openblas only)
endif

$(BUILD)/obj/bench/peak_%.o: bench/peak_%.c
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) $(SDPA_ISAFLAGS_$*) -MMD -MP -c $< -o $@

$(BUILD)/obj/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) $(PEAK_DEFS) $(BLAS_CFLAGS) -MMD -MP -c $< -o $@

# A missing package says which one, instead of a compiler error about a header.
NEED_GBENCH = @echo '\#include <benchmark/benchmark.h>' | $(CXX) -x c++ -E - >/dev/null 2>&1 \
  || { echo "make bench needs Google Benchmark: apt-get install libbenchmark-dev"; exit 1; }
NEED_CBLAS  = @echo '\#include <cblas.h>' | $(CC) $(BLAS_CFLAGS) -x c -E - >/dev/null 2>&1 \
  || { echo "BLAS=openblas needs OpenBLAS: apt-get install libopenblas-dev"; exit 1; }

$(BUILD)/obj/bench/bench.o: bench/bench.cc
	$(NEED_GBENCH)
	@mkdir -p $(dir $@)
	$(CXX) $(BENCH_CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/bench/bench-openblas.o: bench/bench.cc
	$(NEED_GBENCH)
	$(NEED_CBLAS)
	@mkdir -p $(dir $@)
	$(CXX) $(BENCH_CXXFLAGS) -DSB_WITH_BLAS $(BLAS_CFLAGS) -MMD -MP -c $< -o $@

$(BENCH_BIN): $(BENCH_MAIN) $(BENCH_COBJS) $(BUILD)/libsdpa.a
	$(CXX) $(BENCH_CXXFLAGS) -o $@ $^ $(BLAS_LIBS) -lbenchmark $(LDLIBS)

$(BUILD)/sdpa-run: tools/sdpa-run.c $(BUILD)/obj/bench/shim.o $(BUILD)/obj/common/case.o \
                   $(BUILD)/libsdpa.a
	$(CC) $(BENCH_CFLAGS) -o $@ $^ $(LDLIBS)

# sdpa-schedule simulates the bench shapes' plans on many threads: it reads the driver's
# internals (src/schedule.h), so it links the static library.
$(BUILD)/sdpa-schedule: tools/sdpa-schedule.c $(BUILD)/obj/bench/shim.o \
                        $(BUILD)/obj/common/case.o $(BUILD)/libsdpa.a
	$(CC) $(BENCH_CFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: bench bench-full sdpa-run plot compare
bench: $(BENCH_BIN) $(BUILD)/sdpa-run
	./$(BENCH_BIN) --benchmark_out=$(BENCH_JSON) --benchmark_out_format=json $(BENCH_ARGS)
	$(PYTHON) tools/bench-report.py $(BENCH_JSON)

bench-full: $(BENCH_BIN) $(BUILD)/sdpa-run
	./$(BENCH_BIN) --suite=full --benchmark_out=$(BENCH_JSON) --benchmark_out_format=json \
	  $(BENCH_ARGS)
	$(PYTHON) tools/bench-report.py $(BENCH_JSON)

sdpa-run: $(BUILD)/sdpa-run

plot:
	@$(PYTHON) -c 'import matplotlib' 2>/dev/null || { echo "make plot needs matplotlib" \
	  "for $(PYTHON): apt-get install python3-matplotlib (Debian/Ubuntu)"; exit 1; }
	$(PYTHON) tools/bench-plot.py $(BENCH_JSON) $(BUILD)/bench.png

compare:
	@test -n "$(BASE)" || { echo "usage: make compare BASE=before.json [NEW=after.json]"; exit 2; }
	$(PYTHON) tools/bench-compare.py $(BASE) $(or $(NEW),$(BENCH_JSON))

# sdpa.pc is written at install time from sdpa.pc.in: its paths are that install's.
install: lib
	install -d $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/sdpa.h $(DESTDIR)$(INCDIR)/sdpa.h
	install -m 644 $(BUILD)/libsdpa.a $(DESTDIR)$(LIBDIR)/libsdpa.a
	install -m 755 $(BUILD)/$(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_FILE)
	ln -sf $(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(LIBDIR)/libsdpa.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	  -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(OMP_PC) -lm -lpthread|' \
	  sdpa.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/sdpa.pc

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/sdpa.h $(DESTDIR)$(LIBDIR)/libsdpa.a \
	  $(DESTDIR)$(LIBDIR)/$(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_NAME) \
	  $(DESTDIR)$(LIBDIR)/libsdpa.so $(DESTDIR)$(LIBDIR)/pkgconfig/sdpa.pc

clean:
	rm -rf build build-*

# Every object depends on the build's configuration stamp (see CONFIG_STAMP).
$(LIB_OBJS) $(TEST_OBJS) $(BENCH_COBJS) $(BENCH_MAIN): $(CONFIG_STAMP)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# The rest of the build, each part in its own fragment: developer targets (mk/dev.mk),
# and optional parts (mk/*.mk).
include $(wildcard mk/*.mk)
