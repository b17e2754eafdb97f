/* The exact and poisson bootstraps' inner loops (autheval/estimation/compiled_stream.py explains why and how).
 *
 * 1. Multiplicities of numpy's bounded-integer stream.
 *
 * counts(state, G, out): fill `out` (rows x G doubles, C order) so that out[r][c] is how often cluster
 * c is drawn by the next G draws of `default_rng(seed).integers(0, G, ...)`, row after row; `state`
 * (uint64, STATE_LEN values, made by compiled_stream.CompiledStream) carries the generator between
 * calls. The GIL is released while counting, so independent streams count on several cores at once.
 *
 * numpy's stream, step by step: PCG64 (128-bit LCG state = state * A + C, XSL-RR output), each 64-bit
 * output used as two 32-bit values, low half first (numpy's next_uint32), and Lemire's bounded method
 * with numpy's rejection threshold (2^32 - G) mod G, a rejected value consuming the next 32 bits.
 * LANES copies of the generator, each jumped LANES steps at a time, fill a buffer in stream order, so
 * their multiplications overlap instead of waiting on each other.
 *
 * 2. poisson_weights(seed_mod_p, first_rep, first_rank, cutpoints, out): the Poisson(1) weights of
 * sql/estimates/portable_replicates_poisson.sql (its numpy fallback: autheval.estimation.bootstrap.numpy_poisson_weights),
 * out[r][i] for replicate first_rep + r and cluster rank first_rank + i, GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef unsigned __int128 u128;

#define LANES 4
#define BUFFER_RAWS 1024 /* 64-bit outputs per refill (8 KiB) */
/* state: [0, LANES) lane high halves, [LANES, 2 LANES) low halves, then the jump's multiplier and
 * increment (high, low each), the read position in 32-bit values, the buffer. */
#define JUMP (2 * LANES)
#define POSITION (JUMP + 4)
#define BUFFER (POSITION + 1)
#define STATE_LEN (BUFFER + BUFFER_RAWS)

static inline uint64_t xsl_rr(u128 s) {
    uint64_t high = (uint64_t)(s >> 64), x = high ^ (uint64_t)s;
    unsigned rot = (unsigned)(high >> 58);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static void fill(uint64_t *state) {
    u128 lane[LANES];
    u128 a = ((u128)state[JUMP] << 64) | state[JUMP + 1];
    u128 c = ((u128)state[JUMP + 2] << 64) | state[JUMP + 3];
    for (int j = 0; j < LANES; j++) lane[j] = ((u128)state[j] << 64) | state[LANES + j];
    uint64_t *buffer = state + BUFFER;
    for (int t = 0; t < BUFFER_RAWS; t += LANES) {
        for (int j = 0; j < LANES; j++) {
            buffer[t + j] = xsl_rr(lane[j]);
            lane[j] = lane[j] * a + c;
        }
    }
    for (int j = 0; j < LANES; j++) {
        state[j] = (uint64_t)(lane[j] >> 64);
        state[LANES + j] = (uint64_t)lane[j];
    }
}

static PyObject *counts(PyObject *self, PyObject *args) {
    Py_buffer state_view, out_view;
    unsigned long long g;
    if (!PyArg_ParseTuple(args, "w*Kw*", &state_view, &g, &out_view)) return NULL;
    if (state_view.len != STATE_LEN * 8 || g < 2 || g > 0xFFFFFFFFULL
        || out_view.len % (Py_ssize_t)(g * sizeof(double)) != 0) {
        PyBuffer_Release(&state_view);
        PyBuffer_Release(&out_view);
        PyErr_SetString(PyExc_ValueError, "counts: bad state length, cluster count or output size");
        return NULL;
    }
    uint64_t *state = (uint64_t *)state_view.buf;
    double *out = (double *)out_view.buf;
    Py_ssize_t rows = out_view.len / (Py_ssize_t)(g * sizeof(double));
    Py_BEGIN_ALLOW_THREADS
    const uint32_t *halves = (const uint32_t *)(state + BUFFER); /* little-endian: low half first */
    const uint64_t threshold = ((uint64_t)1 << 32) % g;          /* numpy's (2^32 - G) mod G */
    uint64_t position = state[POSITION];
    for (Py_ssize_t r = 0; r < rows; r++) {
        double *row = out + r * g;
        memset(row, 0, g * sizeof(double));
        uint64_t drawn = 0;
        while (drawn < g) {
            if (position == 2 * BUFFER_RAWS) {
                fill(state);
                position = 0;
            }
            uint64_t p = position; /* to the buffer's end or the row's, whichever comes first */
            while (p < 2 * BUFFER_RAWS) {
                uint64_t m = (uint64_t)halves[p++] * g;
                if ((uint32_t)m < threshold) continue; /* rejected: the next 32 bits decide */
                row[m >> 32] += 1.0;
                if (++drawn == g) break;
            }
            position = p;
        }
    }
    state[POSITION] = position;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&state_view);
    PyBuffer_Release(&out_view);
    Py_RETURN_NONE;
}

#define HASH_PRIME 2147483647ULL /* 2^31 - 1 */
#define N_CUTPOINTS 11

/* x mod (2^31 - 1) for x < 2^63, by folding (2^31 = 1 mod p): no division */
static inline uint64_t mod_p(uint64_t x) {
    x = (x & HASH_PRIME) + (x >> 31);
    x = (x & HASH_PRIME) + (x >> 31);
    return x >= HASH_PRIME ? x - HASH_PRIME : x;
}

#define WEIGHT_RUN 256 /* grid indices computed, then weighed, a run at a time (in L1) */

/* The weights of consecutive hash values h1 .. h1 + n - 1 (no wrap past 2^31 - 1 inside: the caller
 * splits there) of one replicate, as doubles. Written as two simple loops over a run, the hash and
 * then the weight as the count of cutpoints at or below the grid index (the same whole number as the
 * bucket tables give), so the compiler vectorises both: 32-bit products (h1, h2 < 2^31), folds mod
 * 2^31 - 1, compares; cloned for AVX-512 and AVX2 where the compiler can, picked at run time (1.2-1.5x
 * the bucket tables' loop here: docs/benchmarks.md, issue 30). The same whole numbers on every machine. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

VECTOR_CLONES
static void weights_run(uint64_t rep_key, uint64_t h1, Py_ssize_t n, const uint32_t *cut, double *row) {
    uint32_t k[WEIGHT_RUN];
    for (Py_ssize_t at = 0; at < n; at += WEIGHT_RUN) {
        const int m = n - at < WEIGHT_RUN ? (int)(n - at) : WEIGHT_RUN;
        const uint32_t first = (uint32_t)(h1 + (uint64_t)at);
        for (int i = 0; i < m; i++) {
            const uint64_t a = (uint64_t)(first + (uint32_t)i);
            const uint64_t h2 = mod_p(a * a + rep_key);
            k[i] = (uint32_t)mod_p((uint64_t)(uint32_t)h2 * 48271ULL + 12345ULL);
        }
        for (int i = 0; i < m; i++) {
            int32_t w = 0;
            for (int j = 0; j < N_CUTPOINTS; j++) w += k[i] >= cut[j];
            row[at + i] = (double)w;
        }
    }
}

static PyObject *poisson_weights(PyObject *self, PyObject *args) {
    unsigned long long seed_mod_p, first_rep, first_rank;
    Py_buffer cut_view, out_view;
    Py_ssize_t reps;
    if (!PyArg_ParseTuple(args, "KKKy*w*n", &seed_mod_p, &first_rep, &first_rank, &cut_view, &out_view, &reps))
        return NULL;
    if (cut_view.len != N_CUTPOINTS * 8 || reps < 0 || (reps > 0 && out_view.len % (reps * (Py_ssize_t)sizeof(double)) != 0)
        || seed_mod_p >= HASH_PRIME || first_rank >= HASH_PRIME) {
        PyBuffer_Release(&cut_view);
        PyBuffer_Release(&out_view);
        PyErr_SetString(PyExc_ValueError, "poisson_weights: bad cutpoints, output size or arguments");
        return NULL;
    }
    const uint64_t *cut64 = (const uint64_t *)cut_view.buf;
    double *out = (double *)out_view.buf;
    Py_ssize_t n = reps ? out_view.len / (reps * (Py_ssize_t)sizeof(double)) : 0;
    Py_BEGIN_ALLOW_THREADS
    uint32_t cut[N_CUTPOINTS]; /* every cutpoint is below 2^31 - 1: 32 bits, as the grid indices */
    for (int j = 0; j < N_CUTPOINTS; j++) cut[j] = (uint32_t)cut64[j];
    for (Py_ssize_t r = 0; r < reps; r++) {
        const uint64_t rep_key = ((first_rep + (uint64_t)r) * 48271ULL + seed_mod_p) % HASH_PRIME;
        const uint64_t h1 = (rep_key * 69621ULL + first_rank) % HASH_PRIME; /* h1 of rank first_rank */
        double *row = out + r * n;
        /* h1 of rank first_rank + i is h1 + i until it reaches 2^31 - 1, then counts up from 0 */
        const Py_ssize_t before = (Py_ssize_t)(HASH_PRIME - h1) < n ? (Py_ssize_t)(HASH_PRIME - h1) : n;
        weights_run(rep_key, h1, before, cut, row);
        if (before < n) weights_run(rep_key, 0, n - before, cut, row + before);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&cut_view);
    PyBuffer_Release(&out_view);
    Py_RETURN_NONE;
}

static PyObject *layout(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{s:i,s:i,s:i}", "lanes", LANES, "buffer_raws", BUFFER_RAWS, "state_len", STATE_LEN);
}

static PyMethodDef methods[] = {
    {"counts", counts, METH_VARARGS, "counts(state, n_clusters, out): the next rows' multiplicities"},
    {"poisson_weights", poisson_weights, METH_VARARGS,
     "poisson_weights(seed_mod_p, first_rep, first_rank, cutpoints, out, reps): the poisson scheme's weights"},
    {"layout", layout, METH_NOARGS, "the state layout: lanes, buffer_raws, state_len"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stream_counts", NULL, -1, methods};

PyMODINIT_FUNC PyInit__stream_counts(void) { return PyModule_Create(&module); }
