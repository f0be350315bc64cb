/*
 * test_fuzzcases.c - replays the fuzz inputs on every ISA: the committed seed corpus
 * (tests/fuzz/corpus) and every input a campaign found failing (tests/fuzz/regress:
 * library bugs, and cases the checks themselves got wrong), through the same checks as
 * the libFuzzer target (tests/fuzz/fuzz_core.c).
 *
 * Paths are relative to the repository root, where `make test` runs the suite; run
 * elsewhere, the suite says it found no corpus and records a failure, so a CI that
 * silently stopped replaying would be noticed.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz_core.h"
#include "harness.h"
#include "suites.h"

static int replay_dir(const char *dir) {
    struct dirent **names;
    const int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0)
        return -1;
    int files = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        struct stat sb;
        if (names[i]->d_name[0] != '.' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            FILE *f = fopen(path, "rb");
            uint8_t *data = malloc((size_t)sb.st_size + 1);
            const size_t got = f ? fread(data, 1, (size_t)sb.st_size, f) : 0;
            if (f)
                fclose(f);
            char msg[1536];
            const int ok = fz_run(data, got, th_isa, msg, sizeof msg);
            CHECK(ok, "%s (isa %s): %s", path, sdpa_isa_name(th_isa), ok ? "" : msg);
            free(data);
            files++;
        }
        free(names[i]);
    }
    free(names);
    return files;
}

void suite_fuzzcases(void) {
    const int seeds = replay_dir("tests/fuzz/corpus");
    CHECK(seeds > 0, "no fuzz corpus in tests/fuzz/corpus (run from the repository root)");
    replay_dir("tests/fuzz/regress"); /* may be empty or absent */
}
