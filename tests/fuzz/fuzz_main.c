/*
 * fuzz_main.c - the libFuzzer entry points of sdpa-fuzz (make fuzz): every input is one
 * fz_run case (fuzz_core.c) on the process-wide ISA, which SDPA_ISA selects (the Makefile
 * sets it from FUZZ_ISA). A failed check prints the case and aborts, so libFuzzer saves
 * the input as a crash artifact.
 *
 * Not a test runner: the committed corpus and the regression inputs are replayed on every
 * ISA by the normal suite (tests/test_fuzzcases.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_core.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sdpa_isa fuzz_isa;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_isa = sdpa_get_isa();
    if (fuzz_isa == SDPA_ISA_AUTO) {
        fprintf(stderr, "sdpa-fuzz: SDPA_ISA names no usable ISA\n");
        exit(2);
    }
    fprintf(stderr, "sdpa-fuzz: isa %s\n", sdpa_isa_name(fuzz_isa));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char msg[1536];
    if (!fz_run(data, size, fuzz_isa, msg, sizeof msg)) {
        fprintf(stderr, "sdpa-fuzz: check failed (isa %s): %s\n", sdpa_isa_name(fuzz_isa), msg);
        abort();
    }
    return 0;
}
