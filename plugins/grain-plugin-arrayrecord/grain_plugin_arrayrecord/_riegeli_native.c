/* The hot loop of the remote ArrayRecord reader in C: an optional accelerator of
   grain_plugin_arrayrecord.riegeli (built where a C compiler and the Python headers are present).

   highwayhash64(data, key) -> int
       64-bit HighwayHash of `data` with the 32-byte `key` (four little-endian uint64), written from
       the published algorithm (the portable, one-lane-at-a-time form); riegeli.py checks it
       against the highwayhash-cffi package where that is installed (tests/test_riegeli_native.py).

   decode_singles(data, base, begins, ends, key) -> (records, crossing)
       What riegeli.decode_singles computes for one-record simple chunks (group_size:1): entry k of
       `records` is chunk k's record as bytes, or None where this path does not apply or finds
       anything wrong (the caller then decodes the chunk with riegeli.decode_chunk, which names the
       problem); `crossing` lists the chunks a block header interrupts, left None for the caller.
       Chunk k spans file bytes [begins[k], ends[k]) of `data`, the file's bytes from offset
       `base`. A record passes exactly the checks decode_chunk makes: the header and data hashes,
       chunk type 'r' with one record, compression none or zstd, the sizes. zstd frames are
       decompressed by the system's libzstd, loaded with dlopen when the module is imported
       (ZSTD: whether it was found; without it zstd chunks come back None). Hashing and
       decompression run without the GIL.

   Format: a chunk is a 40-byte header (header_hash, data_size, data_hash, chunk_type (1 byte) and
   num_records (7 bytes), decoded_data_size; little-endian) and its data; a simple chunk's data is a
   compression byte, the varint size of the compressed sizes, the sizes, then the values (for zstd:
   the decompressed size as a varint, then a zstd frame). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef _WIN32
#include <dlfcn.h>
#include <pthread.h>
#define HAVE_DLOPEN 1
#endif

/* ---------------------------------------------------------------------------------------------- */
/* HighwayHash-64                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t v0[4], v1[4], mul0[4], mul1[4];
} hh_state;

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t swap32(uint64_t v) { return (v >> 32) | (v << 32); }

static void hh_reset(const uint64_t key[4], hh_state *s) {
    static const uint64_t init0[4] = {0xdbe6d5d5fe4cce2full, 0xa4093822299f31d0ull,
                                      0x13198a2e03707344ull, 0x243f6a8885a308d3ull};
    static const uint64_t init1[4] = {0x3bd39e10cb0ef593ull, 0xc0acf169b5f18a8cull,
                                      0xbe5466cf34e90c6cull, 0x452821e638d01377ull};
    for (int i = 0; i < 4; i++) {
        s->mul0[i] = init0[i];
        s->mul1[i] = init1[i];
        s->v0[i] = init0[i] ^ key[i];
        s->v1[i] = init1[i] ^ swap32(key[i]);
    }
}

static inline void zipper_merge_add(uint64_t v1, uint64_t v0, uint64_t *add1, uint64_t *add0) {
    *add0 += (((v0 & 0xff000000ull) | (v1 & 0xff00000000ull)) >> 24) |
             (((v0 & 0xff0000000000ull) | (v1 & 0xff000000000000ull)) >> 16) |
             (v0 & 0xff0000ull) | ((v0 & 0xff00ull) << 32) | ((v1 & 0xff00000000000000ull) >> 8) |
             (v0 << 56);
    *add1 += (((v1 & 0xff000000ull) | (v0 & 0xff00000000ull)) >> 24) | (v1 & 0xff0000ull) |
             ((v1 & 0xff0000000000ull) >> 16) | ((v1 & 0xff00ull) << 24) |
             ((v0 & 0xff000000000000ull) >> 8) | ((v1 & 0xffull) << 48) |
             (v0 & 0xff00000000000000ull);
}

static inline void hh_update(const uint64_t lanes[4], hh_state *s) {
    for (int i = 0; i < 4; i++) {
        s->v1[i] += s->mul0[i] + lanes[i];
        s->mul0[i] ^= (s->v1[i] & 0xffffffffull) * (s->v0[i] >> 32);
        s->v0[i] += s->mul1[i];
        s->mul1[i] ^= (s->v0[i] & 0xffffffffull) * (s->v1[i] >> 32);
    }
    zipper_merge_add(s->v1[1], s->v1[0], &s->v0[1], &s->v0[0]);
    zipper_merge_add(s->v1[3], s->v1[2], &s->v0[3], &s->v0[2]);
    zipper_merge_add(s->v0[1], s->v0[0], &s->v1[1], &s->v1[0]);
    zipper_merge_add(s->v0[3], s->v0[2], &s->v1[3], &s->v1[2]);
}

static inline void hh_packet(const uint8_t *p, hh_state *s) {
    uint64_t lanes[4] = {load64(p), load64(p + 8), load64(p + 16), load64(p + 24)};
    hh_update(lanes, s);
}

static void hh_remainder(const uint8_t *bytes, size_t size_mod32, hh_state *s) {
    /* 1 <= size_mod32 <= 31 */
    const size_t size_mod4 = size_mod32 & 3;
    const uint8_t *remainder = bytes + (size_mod32 & ~(size_t)3);
    uint8_t packet[32] = {0};
    for (int i = 0; i < 4; i++) s->v0[i] += ((uint64_t)size_mod32 << 32) + size_mod32;
    for (int i = 0; i < 4; i++) { /* each 32-bit half of v1 rotated left by size_mod32 */
        uint32_t lo = (uint32_t)s->v1[i], hi = (uint32_t)(s->v1[i] >> 32);
        unsigned c = (unsigned)size_mod32;
        lo = (lo << c) | (lo >> (32 - c));
        hi = (hi << c) | (hi >> (32 - c));
        s->v1[i] = ((uint64_t)hi << 32) | lo;
    }
    memcpy(packet, bytes, (size_t)(remainder - bytes));
    if (size_mod32 & 16) {
        for (int i = 0; i < 4; i++) packet[28 + i] = remainder[i + size_mod4 - 4];
    } else if (size_mod4) {
        packet[16] = remainder[0];
        packet[17] = remainder[size_mod4 >> 1];
        packet[18] = remainder[size_mod4 - 1];
    }
    hh_packet(packet, s);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HH_AVX2 1
/* The 32-byte packets with AVX2 (HighwayHash's own AVX2 formulation: the four lanes of each state
 * vector in one register, ZipperMerge as one byte shuffle), the same state as hh_packet's; the
 * remainder and the finalisation stay scalar. Chosen at import where the CPU has AVX2. */
__attribute__((target("avx2"))) static void hh_packets_avx2(const uint8_t *data, size_t n,
                                                             hh_state *s) {
    __m256i v0 = _mm256_loadu_si256((const __m256i *)s->v0);
    __m256i v1 = _mm256_loadu_si256((const __m256i *)s->v1);
    __m256i mul0 = _mm256_loadu_si256((const __m256i *)s->mul0);
    __m256i mul1 = _mm256_loadu_si256((const __m256i *)s->mul1);
    const __m256i zipper = _mm256_set_epi64x(0x070806090D0A040Bll, 0x000F010E05020C03ll,
                                             0x070806090D0A040Bll, 0x000F010E05020C03ll);
    for (size_t i = 0; i < n; i += 32) {
        __m256i packet = _mm256_loadu_si256((const __m256i *)(data + i));
        v1 = _mm256_add_epi64(v1, _mm256_add_epi64(mul0, packet));
        mul0 = _mm256_xor_si256(mul0, _mm256_mul_epu32(v1, _mm256_srli_epi64(v0, 32)));
        v0 = _mm256_add_epi64(v0, mul1);
        mul1 = _mm256_xor_si256(mul1, _mm256_mul_epu32(v0, _mm256_srli_epi64(v1, 32)));
        v0 = _mm256_add_epi64(v0, _mm256_shuffle_epi8(v1, zipper));
        v1 = _mm256_add_epi64(v1, _mm256_shuffle_epi8(v0, zipper));
    }
    _mm256_storeu_si256((__m256i *)s->v0, v0);
    _mm256_storeu_si256((__m256i *)s->v1, v1);
    _mm256_storeu_si256((__m256i *)s->mul0, mul0);
    _mm256_storeu_si256((__m256i *)s->mul1, mul1);
}
#endif

static int hh_use_avx2; /* set at import (cpu support), changed by _set_simd for tests */

static uint64_t highwayhash64(const uint8_t *data, size_t size, const uint64_t key[4]) {
    hh_state s;
    size_t i = 0;
    hh_reset(key, &s);
#ifdef HH_AVX2
    if (hh_use_avx2 && size >= 32) {
        i = size & ~(size_t)31;
        hh_packets_avx2(data, i, &s);
    }
#endif
    for (; i + 32 <= size; i += 32) hh_packet(data + i, &s);
    if (size & 31) hh_remainder(data + i, size & 31, &s);
    for (int r = 0; r < 4; r++) {
        uint64_t permuted[4] = {swap32(s.v0[2]), swap32(s.v0[3]), swap32(s.v0[0]),
                                swap32(s.v0[1])};
        hh_update(permuted, &s);
    }
    return s.v0[0] + s.v1[0] + s.mul0[0] + s.mul1[0];
}

/* ---------------------------------------------------------------------------------------------- */
/* libzstd, loaded at import                                                                       */
/* ---------------------------------------------------------------------------------------------- */

typedef void *(*zstd_create_fn)(void);
typedef size_t (*zstd_free_fn)(void *);
typedef size_t (*zstd_decompress_fn)(void *, void *, size_t, const void *, size_t);
typedef unsigned (*zstd_is_error_fn)(size_t);

static zstd_create_fn zstd_create;
static zstd_free_fn zstd_free;
static zstd_decompress_fn zstd_decompress;
static zstd_is_error_fn zstd_is_error;

#ifdef HAVE_DLOPEN
static pthread_key_t dctx_key; /* each thread's decompression context, freed when it exits */

static void free_dctx(void *dctx) {
    if (dctx != NULL) zstd_free(dctx);
}

static int load_zstd(void) {
    static const char *names[] = {"libzstd.so.1", "libzstd.so", "libzstd.1.dylib",
                                  "libzstd.dylib"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) continue;
        zstd_create = (zstd_create_fn)dlsym(lib, "ZSTD_createDCtx");
        zstd_free = (zstd_free_fn)dlsym(lib, "ZSTD_freeDCtx");
        zstd_decompress = (zstd_decompress_fn)dlsym(lib, "ZSTD_decompressDCtx");
        zstd_is_error = (zstd_is_error_fn)dlsym(lib, "ZSTD_isError");
        if (zstd_create && zstd_free && zstd_decompress && zstd_is_error &&
            pthread_key_create(&dctx_key, free_dctx) == 0)
            return 1;
        dlclose(lib);
    }
    zstd_create = NULL;
    return 0;
}

static void *thread_dctx(void) {
    void *dctx = pthread_getspecific(dctx_key);
    if (dctx == NULL) {
        dctx = zstd_create();
        if (dctx != NULL && pthread_setspecific(dctx_key, dctx) != 0) {
            zstd_free(dctx);
            dctx = NULL;
        }
    }
    return dctx;
}
#else
static int load_zstd(void) { return 0; }
static void *thread_dctx(void) { return NULL; }
#endif

/* ---------------------------------------------------------------------------------------------- */
/* decode_singles                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

#define CHUNK_HEADER_SIZE 40
#define ONE_SIMPLE ((1ull << 8) | 'r') /* chunk_type 'r', num_records 1 */

typedef struct {
    const uint8_t *body;  /* the chunk's data */
    size_t size;          /* data_size */
    const uint8_t *value; /* the stored value (after the compression's size varint) */
    size_t stored;        /* its bytes */
    int compression;      /* 0 or 'z' */
    PyObject *out;        /* the record's bytes object (decoded_data_size), or NULL */
    uint8_t *flat;        /* a block-crossing chunk's bytes without the block header, or NULL */
} single;

#define BLOCK_SIZE 65536
#define BLOCK_HEADER_SIZE 24

static int parse_key(PyObject *obj, uint64_t key[4]) {
    Py_buffer kb;
    if (PyObject_GetBuffer(obj, &kb, PyBUF_SIMPLE) < 0) return -1;
    if (kb.len != 32) {
        PyBuffer_Release(&kb);
        PyErr_SetString(PyExc_ValueError, "the HighwayHash key must be 32 bytes");
        return -1;
    }
    for (int i = 0; i < 4; i++) key[i] = load64((const uint8_t *)kb.buf + 8 * i);
    PyBuffer_Release(&kb);
    return 0;
}

/* Reads a varint of at most 5 bytes at p (before end); returns the bytes read, 0 if malformed. */
static size_t varint32(const uint8_t *p, const uint8_t *end, uint64_t *value) {
    uint64_t v = 0;
    for (size_t i = 0; i < 5 && p + i < end; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (p[i] < 0x80) {
            *value = v;
            return i + 1;
        }
    }
    return 0;
}

/* Plans chunk k (GIL held): fills `one` and allocates its output, or leaves one->out NULL. */
static void plan_single(const uint8_t *data, Py_ssize_t len, long long base, long long b,
                        long long e, int have_zstd, single *one) {
    one->out = NULL;
    long long off = b - base, end = e - base;
    if (off < 0 || end > len || end - off < CHUNK_HEADER_SIZE + 3) return;
    const uint8_t *h = data + off;
    uint64_t size = load64(h + 8), kind = load64(h + 24), decoded = load64(h + 32);
    if (kind != ONE_SIMPLE || size < 3 || size > (uint64_t)(end - off - CHUNK_HEADER_SIZE)) return;
    const uint8_t *body = h + CHUNK_HEADER_SIZE, *stop = body + size;
    int compression = body[0];
    uint8_t sizes_len = body[1];
    if (sizes_len >= 0x80 || body + 2 + sizes_len > stop) return;
    const uint8_t *pos = body + 2 + sizes_len;
    if (compression == 'z') {
        uint64_t n;
        size_t used;
        if (!have_zstd || pos + 1 >= stop || (used = varint32(pos, stop, &n)) == 0) return;
        if (n != decoded) return;
        pos += used;
    } else if (compression == 0) {
        if ((uint64_t)(stop - pos) != decoded) return;
    } else {
        return; /* brotli, snappy: the general path */
    }
    if (decoded > (uint64_t)PY_SSIZE_T_MAX) return;
    one->body = body;
    one->size = (size_t)size;
    one->value = pos;
    one->stored = (size_t)(stop - pos);
    one->compression = compression;
    one->out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)decoded);
    if (one->out == NULL) PyErr_Clear(); /* out of memory: the general path raises it */
}

/* Checks and decodes a planned chunk (no GIL): 1 when one->out holds the record. */
static int finish_single(const uint64_t key[4], single *one) {
    const uint8_t *h = one->body - CHUNK_HEADER_SIZE;
    if (highwayhash64(h + 8, 32, key) != load64(h)) return 0;
    if (highwayhash64(one->body, one->size, key) != load64(h + 16)) return 0;
    char *dst = PyBytes_AS_STRING(one->out);
    size_t n = (size_t)PyBytes_GET_SIZE(one->out);
    if (one->compression == 0) {
        memcpy(dst, one->value, n);
        return 1;
    }
    void *dctx = thread_dctx();
    if (dctx == NULL) return 0;
    size_t got = zstd_decompress(dctx, dst, n ? n : 1, one->value, one->stored);
    return !zstd_is_error(got) && got == n;
}

static PyObject *py_decode_singles(PyObject *self, PyObject *args) {
    PyObject *data_obj, *begins, *ends, *key_obj;
    long long base;
    if (!PyArg_ParseTuple(args, "OLOOO", &data_obj, &base, &begins, &ends, &key_obj)) return NULL;
    uint64_t key[4];
    if (parse_key(key_obj, key) < 0) return NULL;
    PyObject *bseq = PySequence_Fast(begins, "begins must be a sequence of ints");
    if (bseq == NULL) return NULL;
    PyObject *eseq = PySequence_Fast(ends, "ends must be a sequence of ints");
    if (eseq == NULL) {
        Py_DECREF(bseq);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(bseq);
    PyObject *records = NULL, *crossing = NULL, *result = NULL;
    single *plan = NULL;
    Py_buffer buf;
    int have_buf = 0;
    if (PySequence_Fast_GET_SIZE(eseq) != count) {
        PyErr_SetString(PyExc_ValueError, "begins and ends differ in length");
        goto done;
    }
    if (PyObject_GetBuffer(data_obj, &buf, PyBUF_SIMPLE) < 0) goto done;
    have_buf = 1;
    records = PyList_New(count);
    crossing = PyList_New(0);
    plan = PyMem_Calloc(count ? (size_t)count : 1, sizeof(single));
    if (records == NULL || crossing == NULL || plan == NULL) {
        if (plan == NULL) PyErr_NoMemory();
        goto done;
    }
    int have_zstd = zstd_create != NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        long long b = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(bseq, k));
        long long e = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(eseq, k));
        if (PyErr_Occurred()) goto done;
        if ((b >> 16) != ((e - 1) >> 16)) { /* a block header (every 64 KiB) interrupts it */
            /* One whole header inside the chunk, its hash right: decoded from a copy without it
             * (as riegeli.decode_singles does in Python); anything else goes back to Python. */
            const uint8_t *data = buf.buf;
            long long B = ((b >> 16) + 1) << 16; /* the block boundary */
            if (b - base >= 0 && e - base <= buf.len && ((e - 1) >> 16) == (b >> 16) + 1 &&
                B + BLOCK_HEADER_SIZE <= e && e - b < BLOCK_SIZE &&
                highwayhash64(data + (B - base) + 8, BLOCK_HEADER_SIZE - 8, key) ==
                    load64(data + (B - base))) {
                size_t before = (size_t)(B - b), after = (size_t)(e - B - BLOCK_HEADER_SIZE);
                uint8_t *flat = PyMem_RawMalloc(before + after ? before + after : 1);
                if (flat != NULL) {
                    memcpy(flat, data + (b - base), before);
                    memcpy(flat + before, data + (B + BLOCK_HEADER_SIZE - base), after);
                    plan_single(flat, (Py_ssize_t)(before + after), 0, 0,
                                (long long)(before + after), have_zstd, &plan[k]);
                    if (plan[k].out != NULL) {
                        plan[k].flat = flat;
                        continue;
                    }
                    PyMem_RawFree(flat);
                }
            }
            PyObject *kk = PyLong_FromSsize_t(k);
            if (kk == NULL || PyList_Append(crossing, kk) < 0) {
                Py_XDECREF(kk);
                goto done;
            }
            Py_DECREF(kk);
            continue;
        }
        plan_single(buf.buf, buf.len, base, b, e, have_zstd, &plan[k]);
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count; k++) {
        if (plan[k].out != NULL && !finish_single(key, &plan[k])) plan[k].compression = -1;
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *out = plan[k].out;
        if (out != NULL && plan[k].compression == -1) {
            Py_DECREF(out);
            out = NULL;
        }
        plan[k].out = NULL;
        if (out == NULL) out = Py_NewRef(Py_None);
        PyList_SET_ITEM(records, k, out);
    }
    result = PyTuple_Pack(2, records, crossing);
done:
    if (plan != NULL) {
        for (Py_ssize_t k = 0; k < count; k++) {
            Py_XDECREF(plan[k].out);
            PyMem_RawFree(plan[k].flat);
        }
        PyMem_Free(plan);
    }
    Py_XDECREF(records);
    Py_XDECREF(crossing);
    if (have_buf) PyBuffer_Release(&buf);
    Py_DECREF(bseq);
    Py_DECREF(eseq);
    return result;
}

static PyObject *py_highwayhash64(PyObject *self, PyObject *args) {
    PyObject *data_obj, *key_obj;
    if (!PyArg_ParseTuple(args, "OO", &data_obj, &key_obj)) return NULL;
    uint64_t key[4];
    if (parse_key(key_obj, key) < 0) return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(data_obj, &buf, PyBUF_SIMPLE) < 0) return NULL;
    uint64_t h;
    if (buf.len >= 4096) {
        Py_BEGIN_ALLOW_THREADS
        h = highwayhash64(buf.buf, (size_t)buf.len, key);
        Py_END_ALLOW_THREADS
    } else {
        h = highwayhash64(buf.buf, (size_t)buf.len, key);
    }
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *py_set_simd(PyObject *self, PyObject *arg) {
    /* _set_simd(on) -> bool: HighwayHash with AVX2 where on and the CPU has it; returns whether
     * it is used (tests compare both paths with the reference). */
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
#ifdef HH_AVX2
    hh_use_avx2 = on && __builtin_cpu_supports("avx2");
#else
    hh_use_avx2 = 0;
#endif
    return PyBool_FromLong(hh_use_avx2);
}

static PyMethodDef methods[] = {
    {"_set_simd", py_set_simd, METH_O,
     "_set_simd(on) -> bool: HighwayHash's packet loop with AVX2 where on and supported."},
    {"highwayhash64", py_highwayhash64, METH_VARARGS,
     "highwayhash64(data, key) -> int: 64-bit HighwayHash of data with a 32-byte key."},
    {"decode_singles", py_decode_singles, METH_VARARGS,
     "decode_singles(data, base, begins, ends, key) -> (records, crossing): see the module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_riegeli_native",
    "The remote ArrayRecord reader's decode loop and HighwayHash in C (see _riegeli_native.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__riegeli_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
#ifdef HH_AVX2
    __builtin_cpu_init();
    hh_use_avx2 = __builtin_cpu_supports("avx2");
#endif
    if (PyModule_AddObjectRef(m, "ZSTD", load_zstd() ? Py_True : Py_False) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
