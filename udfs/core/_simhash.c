/* SimHash's arithmetic in one pass over a text's token string (udfs/core/fingerprints.py).
 *
 * simhash_codes(codes) -> int: the 64-bit SimHash of the sliding 4-grams of `codes`, a
 * buffer of code points (1 byte each for an ASCII token string, 4 bytes each otherwise),
 * at least 4 of them. Bit-identical to fingerprints._hashes_of_4grams and _majority:
 * each 4-gram's hash is FNV-1a over its four code points and its length, then
 * splitmix64's finalizer; bit j of the result is set when more than half the hashes
 * have bit j set. NumPy does the same in some twenty passes over the hashes; here it
 * is one loop (bench/RESULTS.md, standards: a 20 KB page's SimHash in about 0.4 of
 * NumPy's time). setup.py unrolls it (-O3 -funroll-loops: 94 against 134 us for a
 * page's 15,800 4-grams at -O2); no instruction set beyond the baseline is assumed.
 *
 * The bit majority counts eight bits of each hash at a time, one per byte of a 64-bit
 * lane ((h >> k) & 0x0101...01 holds bits k, k+8, ..., k+56), and empties the lanes
 * into 64-bit counts before any byte can pass 255. Built in place by ./dev setup
 * (setup.py); without it fingerprints.py runs the NumPy form.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define FNV_SEED 0xCBF29CE484222325ULL
#define FNV_PRIME 0x100000001B3ULL
#define MIX_1 0xBF58476D1CE4E5B9ULL
#define MIX_2 0x94D049BB133111EBULL
#define LANE_BITS 0x0101010101010101ULL

static inline uint64_t finish(uint64_t h)
{
    h ^= h >> 30;
    h *= MIX_1;
    h ^= h >> 27;
    h *= MIX_2;
    return h ^ (h >> 31);
}

static inline void empty_lanes(uint64_t lanes[8], uint64_t counts[64])
{
    for (int k = 0; k < 8; k++) {
        for (int b = 0; b < 8; b++)
            counts[8 * b + k] += (lanes[k] >> (8 * b)) & 0xFF;
        lanes[k] = 0;
    }
}

#define SIMHASH_LOOP(T)                                                            \
    do {                                                                           \
        const T *c = (const T *)data;                                              \
        for (Py_ssize_t i = 0; i < grams; i++) {                                   \
            uint64_t h = FNV_SEED;                                                 \
            h = (h ^ (uint64_t)c[i]) * FNV_PRIME;                                  \
            h = (h ^ (uint64_t)c[i + 1]) * FNV_PRIME;                              \
            h = (h ^ (uint64_t)c[i + 2]) * FNV_PRIME;                              \
            h = (h ^ (uint64_t)c[i + 3]) * FNV_PRIME;                              \
            h = finish((h ^ 4) * FNV_PRIME);                                       \
            for (int k = 0; k < 8; k++)                                            \
                lanes[k] += (h >> k) & LANE_BITS;                                  \
            if (++filled == 255) {                                                 \
                empty_lanes(lanes, counts);                                        \
                filled = 0;                                                        \
            }                                                                      \
        }                                                                          \
    } while (0)

static PyObject *simhash_codes(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    Py_ssize_t size = view.itemsize;
    if (size != 1 && size != 4) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError,
                            "code points are 1 or 4 bytes each, not %zd", size);
    }
    Py_ssize_t n = view.len / size;
    if (n < 4) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "at least 4 code points, got %zd", n);
    }
    const void *data = view.buf;
    Py_ssize_t grams = n - 3;
    uint64_t counts[64] = {0}, lanes[8] = {0};
    int filled = 0;
    Py_BEGIN_ALLOW_THREADS
    if (size == 1)
        SIMHASH_LOOP(uint8_t);
    else
        SIMHASH_LOOP(uint32_t);
    empty_lanes(lanes, counts);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    uint64_t result = 0;
    for (int j = 0; j < 64; j++)
        if (2 * counts[j] > (uint64_t)grams)
            result |= 1ULL << j;
    return PyLong_FromUnsignedLongLong(result);
}

static PyMethodDef methods[] = {
    {"simhash_codes", simhash_codes, METH_O,
     "64-bit SimHash of the sliding 4-grams of a buffer of code points (1 or 4 bytes each)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_simhash", "SimHash's arithmetic in C (see fingerprints.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__simhash(void)
{
    return PyModule_Create(&module);
}
