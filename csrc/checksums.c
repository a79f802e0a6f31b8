/*
 * txstore._checksums: the CRC32C trailer of every LMDB entry (docs/formats.md, "Entry
 * checksums"), as a small CPython extension on the stable ABI (Python 3.11+).
 *
 * Why not the cffi module (txstore._codecs): a cffi call costs 200 ns and more with its
 * argument conversion, and a get is about 1 us, so the check must cost tens of nanoseconds.
 * A METH_FASTCALL function that reads the bytes objects in place and builds the stripped
 * value costs about 25 ns for a 16-byte key and a 100-byte value (measured on the build
 * machine), less than a Python slice.
 *
 * Layout: stored value = value || LE32(crc32c(key || value)). CRC32C (Castagnoli, the CRC of
 * iSCSI, ext4 and Kafka's record batches), computed with the SSE4.2 crc32 instruction on
 * x86-64 or the ARMv8 CRC32C instructions on aarch64 when the CPU has them (checked once at
 * import), else with a slicing-by-8 table.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "checksums.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TXS_X86 1
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#define TXS_ARM 1
#endif

#define POLY 0x82F63B78u /* CRC32C, reflected */

static uint32_t table[8][256];
static int have_hw = 0;

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    }
}

/* Slicing-by-8 over the raw (not inverted) register. */
static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(TXS_X86)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c64;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#elif defined(TXS_ARM)
__attribute__((target("+crc"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __crc32cd(c, w);
        p += 8;
        n -= 8;
    }
    while (n--) c = __crc32cb(c, *p++);
    return c;
}
#endif

static inline uint32_t crc_update(uint32_t c, const unsigned char *p, size_t n) {
#if defined(TXS_X86) || defined(TXS_ARM)
    if (have_hw) return crc_hw(c, p, n);
#endif
    return crc_table(c, p, n);
}

/* crc32c(key || value) */
static inline uint32_t entry_crc(const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    uint32_t c = crc_update(0xFFFFFFFFu, (const unsigned char *)k, (size_t)kn);
    return crc_update(c, (const unsigned char *)v, (size_t)vn) ^ 0xFFFFFFFFu;
}

static inline void put_le32(char *p, uint32_t c) {
    p[0] = (char)(c & 0xff);
    p[1] = (char)((c >> 8) & 0xff);
    p[2] = (char)((c >> 16) & 0xff);
    p[3] = (char)(c >> 24);
}

uint32_t txs_entry_crc(const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    return entry_crc(k, kn, v, vn);
}

void txs_put_le32(char *p, uint32_t c) { put_le32(p, c); }


static PyObject *ChecksumError;



/* The sealed value of (key, value): a new bytes object, value || trailer. (``unused``: the
 * signature map_rows calls.) */
static PyObject *seal_one(PyObject *key, PyObject *value, int unused) {
    (void)unused;
    char *k, *v;
    Py_ssize_t kn, vn;
    if (need_bytes(key, "key") || need_bytes(value, "value")) return NULL;
    if (PyBytes_AsStringAndSize(key, &k, &kn) < 0 || PyBytes_AsStringAndSize(value, &v, &vn) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, vn + 4);
    if (out == NULL) return NULL;
    char *o = PyBytes_AsString(out);
    memcpy(o, v, (size_t)vn);
    put_le32(o + vn, entry_crc(k, kn, v, vn));
    return out;
}

/* Raise ChecksumError(key, reason); returns NULL. */
PyObject *txs_fail(PyObject *key, const char *reason) {
    PyObject *args = Py_BuildValue("(Os)", key, reason);
    if (args != NULL) {
        PyErr_SetObject(ChecksumError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* The value of a sealed (key, stored): bytes without the trailer; NULL with ChecksumError
 * when the trailer does not match.
 *
 * When ``mine`` says the caller's reference to ``stored`` is the only way to reach it and its
 * reference count says it is the only one (a value py-lmdb just made, passed straight on:
 * ``unseal(k, txn.get(k))``, or in a row that only a list being unsealed holds), nobody else
 * can see it, so it is shortened in place (its size lowered by 4, the terminating NUL moved)
 * and returned, instead of copied into a new object: the check then costs the CRC alone, about
 * half of a copy's cost. Its allocation keeps the 4 bytes, which go with it. Never done to a
 * value shorter than 2 bytes once stripped (CPython shares its 0- and 1-byte objects). Such
 * a value was never hashed (py-lmdb makes a new object per read), so no cached hash goes
 * stale. */
static PyObject *unseal_one(PyObject *key, PyObject *stored, int mine) {
    char *k, *v;
    Py_ssize_t kn, vn;
    if (need_bytes(key, "key") || need_bytes(stored, "value")) return NULL;
    if (PyBytes_AsStringAndSize(key, &k, &kn) < 0 || PyBytes_AsStringAndSize(stored, &v, &vn) < 0) return NULL;
    if (vn < 4) return txs_fail(key, "value shorter than its 4-byte checksum");
    if (get_le32(v + vn - 4) != entry_crc(k, kn, v, vn - 4)) return txs_fail(key, "checksum mismatch");
    if (mine && Py_REFCNT(stored) == 1 && vn >= 6) {
        Py_SET_SIZE((PyVarObject *)stored, vn - 4);
        v[vn - 4] = '\0';
        Py_INCREF(stored);
        return stored;
    }
    return PyBytes_FromStringAndSize(v, vn - 4);
}


PyObject *txs_unseal_owned(PyObject *key, PyObject *stored) { return unseal_one(key, stored, 1); }

PyObject *txs_checksum_error(void) { return ChecksumError; }

static PyObject *py_seal(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 2, "seal")) return NULL;
    return seal_one(args[0], args[1], 0);
}

static PyObject *py_unseal(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 2, "unseal")) return NULL;
    if (args[1] == Py_None) Py_RETURN_NONE;
    return unseal_one(args[0], args[1], 1);
}

/* rows: a list of (key, value-or-None) tuples. map_rows builds a new list whose values went
 * through fn (None stays None); in_place replaces the list's items instead. */
static PyObject *map_rows(PyObject *rows, PyObject *(*fn)(PyObject *, PyObject *, int), int in_place) {
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "rows must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_Size(rows);
    PyObject *out = in_place ? rows : PyList_New(n);
    if (out == NULL) return NULL;
    if (in_place) Py_INCREF(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GetItem(rows, i); /* borrowed */
        if (row == NULL || !IS_TUPLE(row) || PyTuple_Size(row) != 2) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "each row must be a (key, value) tuple");
            Py_DECREF(out);
            return NULL;
        }
        PyObject *key = PyTuple_GetItem(row, 0), *val = PyTuple_GetItem(row, 1);
        PyObject *nrow;
        if (val == Py_None) {
            Py_INCREF(row);
            nrow = row;
        } else {
            /* the value is the row's; the row is the list's alone, or shared */
            PyObject *nval = fn(key, val, in_place && Py_REFCNT(row) == 1);
            if (nval == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            if (nval == val) { /* stripped in place: the row already holds it */
                Py_DECREF(nval);
                continue;
            }
            if (in_place && Py_REFCNT(row) == 1) {
                /* The list holds the only reference (a fresh row from py-lmdb): replace the
                 * value inside it, saving a tuple (about a quarter of the cost of a row). */
                if (PyTuple_SetItem(row, 1, nval) < 0) { /* steals nval, releases val */
                    Py_DECREF(out);
                    return NULL;
                }
                continue;
            }
            nrow = PyTuple_New(2);
            if (nrow == NULL) {
                Py_DECREF(nval);
                Py_DECREF(out);
                return NULL;
            }
            Py_INCREF(key);
            PyTuple_SetItem(nrow, 0, key);
            PyTuple_SetItem(nrow, 1, nval);
        }
        if (PyList_SetItem(out, i, nrow) < 0) { /* steals nrow; releases the old row */
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *py_seal_rows(PyObject *self, PyObject *rows) {
    (void)self;
    return map_rows(rows, seal_one, 0);
}

static PyObject *py_unseal_rows(PyObject *self, PyObject *rows) {
    (void)self;
    return map_rows(rows, unseal_one, 1);
}

static PyObject *py_crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    char *p;
    Py_ssize_t n;
    if (need_bytes(args[0], "data") || PyBytes_AsStringAndSize(args[0], &p, &n) < 0) return NULL;
    uint32_t crc = 0;
    if (nargs == 2) {
        unsigned long c = PyLong_AsUnsignedLong(args[1]);
        if (c == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        if (c > 0xFFFFFFFFul) {
            PyErr_SetString(PyExc_ValueError, "crc must fit in 32 bits");
            return NULL;
        }
        crc = (uint32_t)c;
    }
    uint32_t c = crc_update(crc ^ 0xFFFFFFFFu, (const unsigned char *)p, (size_t)n) ^ 0xFFFFFFFFu;
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_set_hardware(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    int had = have_hw;
#if defined(TXS_X86)
    have_hw = on && __builtin_cpu_supports("sse4.2");
#elif defined(TXS_ARM)
    have_hw = on && (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#else
    have_hw = 0;
#endif
    return PyBool_FromLong(had);
}

static PyObject *py_hardware(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(have_hw);
}

static PyMethodDef methods[] = {
    {"seal", (PyCFunction)(void (*)(void))py_seal, METH_FASTCALL,
     "seal(key, value) -> value with its 4-byte CRC32C trailer (over key || value)"},
    {"unseal", (PyCFunction)(void (*)(void))py_unseal, METH_FASTCALL,
     "unseal(key, stored) -> the value without its trailer; None for None; ChecksumError on a "
     "mismatch"},
    {"seal_rows", py_seal_rows, METH_O, "seal_rows(rows) -> a new list of (key, sealed value or None)"},
    {"unseal_rows", py_unseal_rows, METH_O,
     "unseal_rows(rows) -> rows, each value replaced in place by unseal(key, value)"},
    {"sort_rows", (PyCFunction)(void (*)(void))txs_sort_rows, METH_FASTCALL,
     "sort_rows(mapping, seal) -> the (key, value) rows of a dict of bytes keys (values bytes or "
     "None) in key order, a new list; values sealed if seal (None stays None)"},
    {"sort_columns", (PyCFunction)(void (*)(void))txs_sort_columns, METH_FASTCALL,
     "sort_columns(mapping, seal) -> (keys, values): sort_rows's rows as two lists"},
    {"merge_rows", (PyCFunction)(void (*)(void))txs_merge_rows, METH_FASTCALL,
     "merge_rows(upper, lower, keep_tombstones) -> the rows of two ascending lists merged, upper "
     "winning on equal keys (txstore.engine.iterators.merge_rows)"},
    {"restore_rows", (PyCFunction)(void (*)(void))txs_restore_rows, METH_FASTCALL,
     "restore_rows(keys, values, timestamps, headers, fmt, seal, max_key) -> (puts, deletes): "
     "the last record of each key, sorted, converted and sealed (see csrc/restore_rows.c)"},
    {"encode_run", (PyCFunction)(void (*)(void))txs_encode_run, METH_FASTCALL,
     "encode_run(keys, stored, deletes) -> bytes: one sorted run of a sorted restore "
     "(see csrc/restore_runs.c)"},
    {"merge_runs", (PyCFunction)(void (*)(void))txs_merge_runs, METH_FASTCALL,
     "merge_runs(bufs, pos, more, limit) -> (keys, values, need): the k-way merge of sorted "
     "runs, the latest run winning (see csrc/restore_runs.c)"},
    {"decode_columns", (PyCFunction)(void (*)(void))txs_decode_columns, METH_FASTCALL,
     "decode_columns(buf, pos, end, n, has_headers, keys_only) -> (timestamps, keys, values, "
     "headers, nbytes): the columns of a changelog batch (see csrc/changelog_columns.c)"},
    {"column_bytes", (PyCFunction)(void (*)(void))txs_column_bytes, METH_FASTCALL,
     "column_bytes(buf, pos, end, n, has_headers, lo, hi) -> the bytes of records [lo, hi) of a "
     "changelog batch whose columns are checked as decode_columns checks them"},
    {"restore_frames", (PyCFunction)(void (*)(void))txs_restore_frames, METH_FASTCALL,
     "restore_frames(frames, fmt, seal, max_key) -> restore_rows's (keys, stored, deletes) of "
     "changelog batches read in place: frames a list of (buf, pos, end, n, has_headers, lo, hi)"},
    {"restore_frames_run", (PyCFunction)(void (*)(void))txs_restore_frames_run, METH_FASTCALL,
     "restore_frames_run(frames, fmt, seal, max_key) -> bytes: restore_frames' rows as one sorted "
     "run (encode_run of its output; see csrc/restore_frames.c)"},
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL, "crc32c(data, crc=0) -> int"},
    {"set_hardware", py_set_hardware, METH_O,
     "set_hardware(on) -> previous: use the CPU's CRC32C instruction when on and available "
     "(tests compare both implementations)"},
    {"hardware", py_hardware, METH_NOARGS, "hardware() -> whether the CPU instruction is used"},
    {"window_items", (PyCFunction)(void (*)(void))txs_window_items, METH_FASTCALL,
     "window_items(cursor, key, time_from, time_to, limit, kv_type, decode, sealed, staged) -> the KeyValue "
     "pairs of a short single-key window fetch, or None for the general path"},
    {"session_items", (PyCFunction)(void (*)(void))txs_session_items, METH_FASTCALL,
     "session_items(cursor, key, end_from, start_to, limit, kv_type, make, key_obj, decode, sealed) "
     "-> the pairs of a short single-key session search, or None for the general path"},
    {"kv_getter", txs_kv_getter, METH_O,
     "kv_getter(state) -> a builtin get(key) for one key-value store (see csrc/kv_get.c)"},
    {"scan_rows", (PyCFunction)(void (*)(void))txs_scan_rows, METH_FASTCALL,
     "scan_rows(it, n, bound, inclusive, reverse, sealed) -> (rows, stopped), or None for the "
     "general path: one chunk of a py-lmdb cursor iterator (see csrc/scan_rows.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "txstore._checksums", "CRC32C entry checksums and the C row paths (see csrc/checksums.c)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__checksums(void) {
    init_table();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    ChecksumError = PyErr_NewException("txstore._checksums.ChecksumError", PyExc_ValueError, NULL);
    if (ChecksumError == NULL || PyModule_AddObjectRef(m, "ChecksumError", ChecksumError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (txs_window_reader_init() < 0 || txs_kv_get_init() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *r = py_set_hardware(m, Py_True);
    if (r == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(r);
    return m;
}
