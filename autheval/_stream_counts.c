/* Multiplicities of numpy's bounded-integer stream (autheval/compiled_stream.py explains why and how).
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
            uint64_t m = (uint64_t)halves[position++] * g;
            if ((uint32_t)m < threshold) continue; /* rejected: the next 32 bits decide */
            row[m >> 32] += 1.0;
            drawn++;
        }
    }
    state[POSITION] = position;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&state_view);
    PyBuffer_Release(&out_view);
    Py_RETURN_NONE;
}

static PyObject *layout(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{s:i,s:i,s:i}", "lanes", LANES, "buffer_raws", BUFFER_RAWS, "state_len", STATE_LEN);
}

static PyMethodDef methods[] = {
    {"counts", counts, METH_VARARGS, "counts(state, n_clusters, out): the next rows' multiplicities"},
    {"layout", layout, METH_NOARGS, "the state layout: lanes, buffer_raws, state_len"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stream_counts", NULL, -1, methods};

PyMODINIT_FUNC PyInit__stream_counts(void) { return PyModule_Create(&module); }
