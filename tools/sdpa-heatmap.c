/*
 * sdpa-heatmap - render one head's attention weights as a PNG heatmap.
 *
 * The seed notebooks print 6 x 6 weight matrices; this draws them. Either it runs an
 * attention itself (random inputs from --seed, any shape and the common options) and
 * renders head --head of batch entry --entry from sdpa_attention_weights, or it reads a
 * matrix from a text file (--from FILE: the numbers of a printed tensor, e.g. pasted
 * from a notebook; words, brackets and commas are skipped, --cols gives the width).
 * Rows are queries, columns keys; colour is the weight on a fixed [0, 1] scale
 * (viridis), masked entries are exactly 0. A tool for looking, not a plotting library:
 * the PNG is written with zlib (Debian's zlib1g-dev), the inputs come from the case
 * library's data stream (common/case.h).
 *
 *   sdpa-heatmap -o w.png [--len T] [--len-kv T] [--dim D] [--heads H] [--head h]
 *                [--entry b] [--causal] [--window L,R] [--seed S] [--cell PX] [--print]
 *   sdpa-heatmap -o w.png --from weights.txt --cols N [--cell PX]
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "../common/case.h"
#include "sdpa.h"

/* ---- PNG (ISO/IEC 15948): signature, IHDR, one zlib-compressed IDAT, IEND ---------- */

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A chunk: length, type, data, and the CRC-32 of type and data (PNG 5.3). */
static int chunk(FILE *f, const char *type, const unsigned char *data, size_t n) {
    unsigned char hdr[8], tail[4];
    put32(hdr, (uint32_t)n);
    memcpy(hdr + 4, type, 4);
    uLong c = crc32_z(0, hdr + 4, 4);
    if (n)
        c = crc32_z(c, data, n);
    put32(tail, (uint32_t)c);
    return fwrite(hdr, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) &&
           fwrite(tail, 1, 4, f) == 4;
}

/* rgb: h rows of w pixels, 3 bytes each. */
static int write_png(const char *path, const unsigned char *rgb, int w, int h) {
    const size_t row = 1 + 3 * (size_t)w, raw = row * (size_t)h;
    unsigned char *lit = malloc(raw);
    uLongf zn = compressBound((uLong)raw);
    unsigned char *z = malloc(zn);
    int ok = lit && z;
    for (int y = 0; ok && y < h; y++) {
        lit[(size_t)y * row] = 0; /* filter type 0 (none) */
        memcpy(lit + (size_t)y * row + 1, rgb + (size_t)y * 3 * (size_t)w, 3 * (size_t)w);
    }
    ok = ok && compress2(z, &zn, lit, (uLong)raw, Z_BEST_COMPRESSION) == Z_OK;
    FILE *f = ok ? fopen(path, "wb") : NULL;
    if (f) {
        static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        unsigned char ihdr[13];
        put32(ihdr, (uint32_t)w);
        put32(ihdr + 4, (uint32_t)h);
        ihdr[8] = 8;  /* bit depth */
        ihdr[9] = 2;  /* colour type: truecolour RGB */
        ihdr[10] = 0; /* deflate */
        ihdr[11] = 0; /* adaptive filtering */
        ihdr[12] = 0; /* no interlace */
        ok = fwrite(sig, 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) &&
             chunk(f, "IDAT", z, zn) && chunk(f, "IEND", NULL, 0);
        ok &= fclose(f) == 0;
    }
    free(lit);
    free(z);
    return ok && f;
}

/* ---- colour ------------------------------------------------------------------------ */

/* viridis at 0, 1/4, 1/2, 3/4, 1 (the stops of matplotlib's viridis colormap: #440154,
 * #3b528b, #21918c, #5ec962, #fde725), linearly interpolated between them. */
static void viridis(float t, unsigned char *rgb) {
    static const unsigned char stops[5][3] = {
        {0x44, 0x01, 0x54}, {0x3b, 0x52, 0x8b}, {0x21, 0x91, 0x8c}, {0x5e, 0xc9, 0x62}, {0xfd, 0xe7, 0x25}};
    if (!(t >= 0)) /* NaN and negatives: the low end */
        t = 0;
    if (t > 1)
        t = 1;
    const float x = t * 4;
    const int i = x >= 4 ? 3 : (int)x;
    const float f = x - (float)i;
    for (int c = 0; c < 3; c++)
        rgb[c] = (unsigned char)lrintf((float)stops[i][c] + f * (float)(stops[i + 1][c] - stops[i][c]));
}

/* Cells of cell x cell pixels with a one-pixel dark grid, and a colour bar on the right. */
static int render(const char *path, const float *m, int rows, int cols, int cell) {
    const int bar = 3 * cell / 2 + 8, w = cols * (cell + 1) + 1 + bar, h = rows * (cell + 1) + 1;
    unsigned char *img = malloc((size_t)w * (size_t)h * 3);
    if (!img)
        return 0;
    memset(img, 0x20, (size_t)w * (size_t)h * 3);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            unsigned char rgb[3];
            viridis(m[(size_t)r * (size_t)cols + (size_t)c], rgb);
            for (int y = 0; y < cell; y++)
                for (int x = 0; x < cell; x++)
                    memcpy(img + 3 * ((size_t)(r * (cell + 1) + 1 + y) * (size_t)w +
                                      (size_t)(c * (cell + 1) + 1 + x)),
                           rgb, 3);
        }
    for (int y = 1; y < h - 1; y++) { /* the scale: 1 at the top, 0 at the bottom */
        unsigned char rgb[3];
        viridis(1.0f - (float)(y - 1) / (float)(h - 3 > 0 ? h - 3 : 1), rgb);
        for (int x = w - bar + 8; x < w; x++)
            memcpy(img + 3 * ((size_t)y * (size_t)w + (size_t)x), rgb, 3);
    }
    const int ok = write_png(path, img, w, h);
    free(img);
    return ok;
}

/* ---- inputs ------------------------------------------------------------------------ */

/* Every number in a text file, in order (a printed tensor's brackets, commas and words
 * are skipped). */
static float *read_numbers(const char *path, long *count) {
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    long n = 0, cap = 256;
    float *v = malloc((size_t)cap * sizeof(float));
    int ch, prev = ' ';
    char tok[64];
    while ((ch = fgetc(f)) != EOF) {
        /* a number starts a token: "Backward0" or "x1" hold no matrix entry */
        const int starts = (isdigit(ch) || ch == '-' || ch == '.') && !isalnum(prev) && prev != '_';
        prev = ch;
        if (!starts)
            continue;
        int k = 0;
        do {
            if (k < 63)
                tok[k++] = (char)ch;
            ch = fgetc(f);
        } while (ch != EOF && (isdigit(ch) || ch == '.' || ch == 'e' || ch == 'E' || ch == '-' ||
                               ch == '+'));
        tok[k] = 0;
        prev = ch;
        char *end;
        const float x = strtof(tok, &end);
        if (end == tok)
            continue;
        if (n == cap)
            v = realloc(v, (size_t)(cap *= 2) * sizeof(float));
        v[n++] = x;
    }
    fclose(f);
    *count = n;
    return v;
}

static int usage(void) {
    fprintf(stderr,
            "usage: sdpa-heatmap -o OUT.png [--len T] [--len-kv T] [--dim D] [--heads H] "
            "[--head h]\n"
            "                    [--entry b] [--causal] [--window L,R] [--seed S] [--cell PX] "
            "[--print]\n"
            "       sdpa-heatmap -o OUT.png --from FILE --cols N [--cell PX]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *out = NULL, *from = NULL;
    long T = 6, Tkv = 0, D = 16, H = 2, head = 0, entry = 0, cell = 40, cols = 0;
    long wl = -1, wr = -1;
    int causal = 0, print = 0;
    unsigned long long seed = 1;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
        char *end = NULL;
#define NUM(var)                                   \
    do {                                           \
        if (!v)                                    \
            return usage();                        \
        var = strtol(v, &end, 10);                 \
        if (*end)                                  \
            return usage();                        \
        a++;                                       \
    } while (0)
        if (!strcmp(f, "-o") && v)
            out = argv[++a];
        else if (!strcmp(f, "--from") && v)
            from = argv[++a];
        else if (!strcmp(f, "--cols"))
            NUM(cols);
        else if (!strcmp(f, "--len"))
            NUM(T);
        else if (!strcmp(f, "--len-kv"))
            NUM(Tkv);
        else if (!strcmp(f, "--dim"))
            NUM(D);
        else if (!strcmp(f, "--heads"))
            NUM(H);
        else if (!strcmp(f, "--head"))
            NUM(head);
        else if (!strcmp(f, "--entry"))
            NUM(entry);
        else if (!strcmp(f, "--cell"))
            NUM(cell);
        else if (!strcmp(f, "--causal"))
            causal = 1;
        else if (!strcmp(f, "--print"))
            print = 1;
        else if (!strcmp(f, "--seed") && v) {
            seed = strtoull(v, &end, 10);
            if (*end)
                return usage();
            a++;
        } else if (!strcmp(f, "--window") && v && sscanf(v, "%ld,%ld", &wl, &wr) == 2 && wl >= 0 &&
                   wr >= 0)
            a++;
        else
            return usage();
#undef NUM
    }
    if (!out || cell < 1 || cell > 200)
        return usage();

    float *m = NULL;
    long rows, ncols;
    if (from) {
        long n;
        m = read_numbers(from, &n);
        if (!m || cols < 1 || n < cols || n % cols) {
            fprintf(stderr, "sdpa-heatmap: %s: need a multiple of --cols numbers\n", from);
            return 1;
        }
        rows = n / cols;
        ncols = cols;
    } else {
        if (Tkv == 0)
            Tkv = T;
        if (T < 1 || Tkv < 1 || D < 1 || H < 1 || head < 0 || head >= H || entry != 0 ||
            T * Tkv > (1L << 24))
            return usage();
        const size_t nq = (size_t)(H * T * D), nk = (size_t)(H * Tkv * D);
        float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float));
        float *v = malloc(nk * sizeof(float)), *o = malloc(nq * sizeof(float));
        float *lse = malloc((size_t)(H * T) * sizeof(float));
        float *w = malloc((size_t)(H * T * Tkv) * sizeof(float));
        uint64_t s = seed;
        for (size_t i = 0; i < nq; i++)
            q[i] = 2.0f * sc_rand_float(&s);
        for (size_t i = 0; i < nk; i++) {
            k[i] = 2.0f * sc_rand_float(&s);
            v[i] = sc_rand_float(&s);
        }
        sdpa_desc d = {.batch = 1, .heads_q = H, .heads_kv = H, .len_q = T, .len_kv = Tkv,
                       .dim_qk = D, .dim_v = D, .causal = causal, .window = wl >= 0,
                       .window_left = wl, .window_right = wr};
        const sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, H, T, D);
        const sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, H, Tkv, D);
        const sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, H, Tkv, D);
        const sdpa_tensor to = sdpa_tensor_bhtd(o, SDPA_F32, H, T, D);
        sdpa_status st = sdpa_forward(&d, &tq, &tk, &tv, &to, lse);
        if (st == SDPA_OK)
            st = sdpa_attention_weights(&d, &tq, &tk, lse, w);
        if (st != SDPA_OK) {
            fprintf(stderr, "sdpa-heatmap: %s\n", sdpa_strerror(st));
            return 1;
        }
        m = malloc((size_t)(T * Tkv) * sizeof(float));
        memcpy(m, w + (size_t)(head * T * Tkv), (size_t)(T * Tkv) * sizeof(float));
        rows = T;
        ncols = Tkv;
        free(q);
        free(k);
        free(v);
        free(o);
        free(lse);
        free(w);
    }
    if (print)
        for (long r = 0; r < rows; r++)
            for (long c = 0; c < ncols; c++)
                printf("%.4f%s", (double)m[r * ncols + c], c + 1 < ncols ? " " : "\n");
    if ((rows + 1) * (cell + 1) > 32768 || (ncols + 2) * (cell + 1) > 32768) {
        fprintf(stderr, "sdpa-heatmap: %ld x %ld cells of %ld px is too large; lower --cell\n",
                rows, ncols, cell);
        return 1;
    }
    if (!render(out, m, (int)rows, (int)ncols, (int)cell)) {
        fprintf(stderr, "sdpa-heatmap: cannot write %s\n", out);
        return 1;
    }
    printf("sdpa-heatmap: %ld x %ld weights -> %s\n", rows, ncols, out);
    free(m);
    return 0;
}
