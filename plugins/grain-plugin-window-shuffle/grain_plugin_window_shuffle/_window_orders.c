/* Grain's window orders in C: an optional accelerator of grain_plugin_window_shuffle.

   window_orders(seeds, rounds, n, out) writes, for each seed s of `seeds`, the permutation
   index_shuffle(i, n - 1, s, rounds) for i in [0, n) into row r of `out` (a writable, C-contiguous
   buffer of int64 holding len(seeds) * n entries): the rows grain_core.shuffle_cipher.shuffle_tables
   computes with numpy. 1 <= n <= 65536, so the cipher block is 16 bits in every mode (Grain's
   and grain_core's block sizes differ only above that).

   The cipher: round keys are the low bytes of std::seed_seq{s}.generate(rounds words); the block
   v = (L << 8) | R goes through rounds / 2 double rounds L ^= F(R) ^ k[i]; R ^= F(L) ^ k[i + 1]
   with Simon's F(x) = (rotl(x, 1) & x) ^ rotl(x, 2) on 8-bit words; index i lands where the
   cycle of the cipher from i first re-enters [0, n). The computation releases the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void seed_seq_words(uint32_t seed, int n, uint32_t *w) {
    /* std::seed_seq{seed}.generate(w, w + n), C++ [rand.util.seedseq], for n >= 1. */
    for (int i = 0; i < n; i++) w[i] = 0x8B8B8B8Bu;
    int t = n >= 623 ? 11 : n >= 68 ? 7 : n >= 39 ? 5 : n >= 7 ? 3 : (n - 1) / 2;
    int p = (n - t) / 2, q = p + t, m = n > 2 ? n : 2;
    for (int k = 0; k < m; k++) {
        uint32_t x = w[k % n] ^ w[(k + p) % n] ^ w[(k + n - 1) % n];
        uint32_t r1 = 1664525u * (x ^ (x >> 27));
        uint32_t r2 = r1 + (k == 0 ? 1u : k == 1 ? (uint32_t)(k % n) + seed : (uint32_t)(k % n));
        w[(k + p) % n] += r1;
        w[(k + q) % n] += r2;
        w[k % n] = r2;
    }
    for (int k = m; k < m + n; k++) {
        uint32_t x = w[k % n] + w[(k + p) % n] + w[(k + n - 1) % n];
        uint32_t r3 = 1566083941u * (x ^ (x >> 27));
        uint32_t r4 = r3 - (uint32_t)(k % n);
        w[(k + p) % n] ^= r3;
        w[(k + q) % n] ^= r4;
        w[k % n] = r4;
    }
}

static inline uint8_t simon_f(uint8_t v) {
    uint8_t r1 = (uint8_t)((v << 1) | (v >> 7));
    uint8_t r2 = (uint8_t)((v << 2) | (v >> 6));
    return (uint8_t)((r1 & v) ^ r2); /* rotl(v, 8) is v itself on 8-bit words */
}

/* One permutation: keys[rounds] round keys, n in [1, 65536]; work: 4 * 65536 bytes. */
static void window_order(const uint8_t *keys, int rounds, int n, int64_t *out, uint8_t *work) {
    uint8_t *left = work, *right = work + 65536;
    uint16_t *step = (uint16_t *)(work + 2 * 65536);
    for (int v = 0; v < 65536; v++) {
        left[v] = (uint8_t)(v >> 8);
        right[v] = (uint8_t)v;
    }
    for (int i = 0; i < rounds; i += 2) { /* one half-round per loop: each loop vectorises */
        uint8_t a = keys[i], b = keys[i + 1];
        for (int v = 0; v < 65536; v++) left[v] ^= simon_f(right[v]) ^ a;
        for (int v = 0; v < 65536; v++) right[v] ^= simon_f(left[v]) ^ b;
    }
    for (int v = 0; v < 65536; v++) step[v] = (uint16_t)((left[v] << 8) | right[v]);
    /* Cycle walks, 16 at a time so that their table reads overlap. */
    enum { LANES = 16 };
    int start[LANES];
    uint32_t at[LANES];
    int live = 0, next = 0;
    while (live < LANES && next < n) {
        start[live] = next;
        at[live++] = step[next++];
    }
    while (live) {
        for (int j = 0; j < live;) {
            uint32_t c = at[j];
            if (c >= (uint32_t)n) {
                at[j++] = step[c];
            } else {
                out[start[j]] = c;
                if (next < n) {
                    start[j] = next;
                    at[j++] = step[next++];
                } else {
                    live--;
                    start[j] = start[live];
                    at[j] = at[live];
                }
            }
        }
    }
}

static PyObject *window_orders(PyObject *self, PyObject *args) {
    PyObject *seeds_obj, *out_obj;
    int rounds, n;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OiiO", &seeds_obj, &rounds, &n, &out_obj)) return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *seeds = NULL;
    uint32_t *words = NULL;
    uint8_t *keys = NULL, *work = NULL;
    PyObject *result = NULL;
    if (n < 1 || n > 65536) {
        PyErr_Format(PyExc_ValueError, "window_orders: n must be in [1, 65536], got %d", n);
        goto done;
    }
    if (rounds < 4 || rounds > 1024 || rounds % 2) {
        PyErr_Format(PyExc_ValueError, "window_orders: rounds must be even in [4, 1024], got %d",
                     rounds);
        goto done;
    }
    seeds = PySequence_Fast(seeds_obj, "window_orders: seeds must be a sequence of ints");
    if (!seeds) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seeds);
    /* int64 in native byte order: "l" or "q", optionally prefixed "@" or "=". */
    const char *fmt = out.format ? out.format : "B";
    if (fmt[0] == '@' || fmt[0] == '=') fmt++;
    int is_int64 = (fmt[0] == 'l' || fmt[0] == 'q') && fmt[1] == 0;
    if (out.itemsize != 8 || !is_int64 || out.len != (Py_ssize_t)(count * n * 8)) {
        PyErr_Format(PyExc_ValueError,
                     "window_orders: out must be a C-contiguous int64 buffer of len(seeds) * n = "
                     "%zd entries",
                     count * n);
        goto done;
    }
    keys = malloc((size_t)(count ? count : 1) * (size_t)rounds);
    words = malloc((size_t)rounds * sizeof(uint32_t));
    work = malloc(4 * 65536);
    if (!keys || !words || !work) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < count; r++) {
        unsigned long long s = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seeds, r));
        if (PyErr_Occurred()) goto done;
        if (s > 0xFFFFFFFFull) {
            PyErr_Format(PyExc_ValueError, "window_orders: seed %llu is not below 2**32", s);
            goto done;
        }
        seed_seq_words((uint32_t)s, rounds, words);
        for (int i = 0; i < rounds; i++) keys[r * rounds + i] = (uint8_t)words[i];
    }
    int64_t *dst = (int64_t *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < count; r++) window_order(keys + r * rounds, rounds, n, dst + r * n, work);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    free(keys);
    free(words);
    free(work);
    Py_XDECREF(seeds);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"window_orders", window_orders, METH_VARARGS,
     "window_orders(seeds, rounds, n, out): Grain's index_shuffle permutation of [0, n) for each "
     "seed, written into the rows of out (int64, len(seeds) * n entries)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_window_orders",
                                    "Grain's window orders in C (optional accelerator).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__window_orders(void) { return PyModule_Create(&module); }
