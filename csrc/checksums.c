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

static inline uint32_t get_le32(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static PyObject *ChecksumError;

/* Exact types first: a pointer comparison, where the stable ABI's PyBytes_Check and
 * PyTuple_Check are function calls (PyType_GetFlags); subclasses take the call. */
#define IS_BYTES(o) (Py_TYPE(o) == &PyBytes_Type || PyBytes_Check(o))
#define IS_TUPLE(o) (Py_TYPE(o) == &PyTuple_Type || PyTuple_Check(o))

static inline int need_bytes(PyObject *o, const char *what) {
    if (!IS_BYTES(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", what);
        return -1;
    }
    return 0;
}

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
static PyObject *fail(PyObject *key, const char *reason) {
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
    if (vn < 4) return fail(key, "value shorter than its 4-byte checksum");
    if (get_le32(v + vn - 4) != entry_crc(k, kn, v, vn - 4)) return fail(key, "checksum mismatch");
    if (mine && Py_REFCNT(stored) == 1 && vn >= 6) {
        Py_SET_SIZE((PyVarObject *)stored, vn - 4);
        v[vn - 4] = '\0';
        Py_INCREF(stored);
        return stored;
    }
    return PyBytes_FromStringAndSize(v, vn - 4);
}

static int want_args(Py_ssize_t nargs, Py_ssize_t n, const char *name) {
    if (nargs != n) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, n, nargs);
        return -1;
    }
    return 0;
}

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

/* ---- sort_rows: the commit's one pass over an overlay's memory tier ----------------------
 *
 * The rows of a dict {key: value or None} in ascending key order (bytewise, as LMDB compares
 * them), each value sealed on the way when asked. Sorting in Python (``sorted(d.items(),
 * key=itemgetter(0))``) costs ~400 ns a row for 200k random 16-byte keys: every comparison is a
 * rich comparison of two bytes objects scattered in memory. Here the first 8 bytes of each key
 * are read once, in the dict's order, into a compact array with the row's address; a quicksort
 * of that array compares those 8-byte integers, and the whole keys (memcmp) only when they are
 * equal. The output rows are then built in key order, fetching each row's key and value a few
 * rows ahead, so the tuples and sealed values the commit hands to LMDB lie in memory in the
 * order LMDB reads them. */

typedef struct {
    const char *kp, *vp;
    Py_ssize_t kn, vn;
    PyObject *k; /* owned */
    PyObject *v; /* owned (None for a delete) */
} row_t;

typedef struct {
    uint64_t pfx; /* the key's first 8 bytes, big-endian, zero-padded */
    row_t *r;
} ix_t;

/* a < b: by the prefix, then (same first 8 bytes) the whole key */
static inline int ix_less(const ix_t *a, const ix_t *b) {
    if (a->pfx != b->pfx) return a->pfx < b->pfx;
    Py_ssize_t an = a->r->kn, bn = b->r->kn;
    int c = memcmp(a->r->kp, b->r->kp, (size_t)(an < bn ? an : bn));
    return c ? c < 0 : an < bn;
}

/* Sort ix[0..n): quicksort, median of three, insertion sort below 16, recursing into the
 * smaller side (depth O(log n)). Keys are distinct (a dict's). */
static void ix_sort(ix_t *ix, Py_ssize_t n) {
    while (n > 16) {
        Py_ssize_t mid = n / 2;
        ix_t t;
#define SWAP(i, j) (t = ix[i], ix[i] = ix[j], ix[j] = t)
        if (ix_less(&ix[mid], &ix[0])) SWAP(mid, 0);
        if (ix_less(&ix[n - 1], &ix[0])) SWAP(n - 1, 0);
        if (ix_less(&ix[n - 1], &ix[mid])) SWAP(n - 1, mid);
        ix_t pivot = ix[mid];
        Py_ssize_t i = 0, j = n - 1;
        for (;;) {
            while (ix_less(&ix[i], &pivot)) i++;
            while (ix_less(&pivot, &ix[j])) j--;
            if (i >= j) break;
            SWAP(i, j);
            i++;
            j--;
        }
#undef SWAP
        /* [0, j] <= pivot <= [j+1, n) */
        if (j + 1 < n - j - 1) {
            ix_sort(ix, j + 1);
            ix += j + 1;
            n -= j + 1;
        } else {
            ix_sort(ix + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t a = 1; a < n; a++) {
        ix_t x = ix[a];
        Py_ssize_t b = a;
        while (b > 0 && ix_less(&x, &ix[b - 1])) {
            ix[b] = ix[b - 1];
            b--;
        }
        ix[b] = x;
    }
}

#define PREFETCH_AHEAD 8

static PyObject *py_sort_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 2, "sort_rows")) return NULL;
    PyObject *mapping = args[0];
    if (!PyDict_Check(mapping)) {
        PyErr_SetString(PyExc_TypeError, "sort_rows() takes a dict");
        return NULL;
    }
    int seal = PyObject_IsTrue(args[1]);
    if (seal < 0) return NULL;
    Py_ssize_t n = PyDict_Size(mapping);
    row_t *rows = PyMem_Malloc(sizeof(row_t) * (size_t)(n ? n : 1));
    ix_t *ix = PyMem_Malloc(sizeof(ix_t) * (size_t)(n ? n : 1));
    if (rows == NULL || ix == NULL) {
        PyMem_Free(rows);
        PyMem_Free(ix);
        return PyErr_NoMemory();
    }
    Py_ssize_t m = 0, pos = 0;
    PyObject *key, *val, *out = NULL;
    /* Pass 1, in the dict's order (the order the objects were made in, mostly): read each
     * key's prefix and each value's address and size. */
    while (PyDict_Next(mapping, &pos, &key, &val)) {
        if (m == n) break; /* cannot happen: no Python code runs in this loop */
        row_t *r = &rows[m];
        char *kp, *vp = NULL;
        Py_ssize_t kn, vn = 0;
        if (need_bytes(key, "key") || PyBytes_AsStringAndSize(key, &kp, &kn) < 0) goto done;
        if (val != Py_None && (need_bytes(val, "value") || PyBytes_AsStringAndSize(val, &vp, &vn) < 0)) goto done;
        unsigned char b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        memcpy(b, kp, (size_t)(kn < 8 ? kn : 8));
        uint64_t p = 0;
        for (int i = 0; i < 8; i++) p = p << 8 | b[i];
        Py_INCREF(key); /* held while tuples are made (a collection may run finalizers) */
        Py_INCREF(val);
        *r = (row_t){kp, vp, kn, vn, key, val};
        ix[m] = (ix_t){p, r};
        m++;
    }
    ix_sort(ix, m);
    out = PyList_New(m);
    if (out == NULL) goto done;
    /* Pass 2, in key order: the rows and their objects are read out of order, so fetch them
     * ahead (the row, then its key and value). */
    for (Py_ssize_t i = 0; i < m; i++) {
        if (i + 2 * PREFETCH_AHEAD < m) {
            const char *far = (const char *)ix[i + 2 * PREFETCH_AHEAD].r;
            __builtin_prefetch(far);
            __builtin_prefetch(far + sizeof(row_t) - 1);
        }
        if (i + PREFETCH_AHEAD < m) {
            const row_t *ahead = ix[i + PREFETCH_AHEAD].r;
            __builtin_prefetch(ahead->kp);
            __builtin_prefetch(ahead->k);
            if (seal && ahead->vp != NULL) {
                __builtin_prefetch(ahead->vp);
                __builtin_prefetch(ahead->vp + ahead->vn - 1);
            }
        }
        row_t *r = ix[i].r;
        if (seal && r->v != Py_None) {
            PyObject *v = PyBytes_FromStringAndSize(NULL, r->vn + 4);
            if (v == NULL) goto fail;
            char *sv = PyBytes_AsString(v);
            memcpy(sv, r->vp, (size_t)r->vn);
            put_le32(sv + r->vn, entry_crc(r->kp, r->kn, r->vp, r->vn));
            Py_DECREF(r->v);
            r->v = v;
        }
        /* A copy of the key, made here, in key order, where LMDB will read it. */
        PyObject *k = PyBytes_FromStringAndSize(r->kp, r->kn);
        if (k == NULL) goto fail;
        Py_DECREF(r->k);
        r->k = k;
        PyObject *t = PyTuple_New(2);
        if (t == NULL) goto fail;
        PyTuple_SetItem(t, 0, r->k); /* steals the row's references */
        PyTuple_SetItem(t, 1, r->v);
        r->k = r->v = NULL;
        PyList_SetItem(out, i, t);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_XDECREF(rows[i].k);
        Py_XDECREF(rows[i].v);
    }
    PyMem_Free(rows);
    PyMem_Free(ix);
    return out;
}

/* ---- merge_rows: a merged scan's chunk of an upper tier over a lower one -----------------
 *
 * txstore.engine.iterators.merge_rows in C (that function's docstring gives the semantics):
 * two ascending lists of (key, value) rows, upper winning on equal keys, upper deletes (None)
 * hiding the lower row and kept only if asked. The lower list is mostly copied in runs; where
 * the upper tier is sparse (under a quarter of the lower's rows) each upper key is found by
 * binary search (memcmp on the bytes, no rich comparison of tuples), else both are walked. */

/* The key of a row (a 2-tuple whose first item is bytes); -1 with TypeError if not one. */
static inline int row_key(PyObject *row, const char **p, Py_ssize_t *n) {
    if (!IS_TUPLE(row) || PyTuple_Size(row) != 2) {
        PyErr_SetString(PyExc_TypeError, "each row must be a (key, value) tuple");
        return -1;
    }
    PyObject *k = PyTuple_GetItem(row, 0);
    char *kp;
    if (need_bytes(k, "key") || PyBytes_AsStringAndSize(k, &kp, n) < 0) return -1;
    *p = kp;
    return 0;
}

static inline int key_cmp(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn) {
    int c = memcmp(a, b, (size_t)(an < bn ? an : bn));
    if (c) return c;
    return an < bn ? -1 : (an > bn ? 1 : 0);
}

/* Append lower[lo:hi] to out; 0 or -1. */
static int extend_run(PyObject *out, PyObject *lower, Py_ssize_t lo, Py_ssize_t hi) {
    if (hi - lo > 8) {
        PyObject *run = PyList_GetSlice(lower, lo, hi);
        if (run == NULL) return -1;
        Py_ssize_t end = PyList_Size(out);
        int rc = PyList_SetSlice(out, end, end, run);
        Py_DECREF(run);
        return rc;
    }
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (PyList_Append(out, PyList_GetItem(lower, i)) < 0) return -1;
    }
    return 0;
}

static PyObject *py_merge_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 3, "merge_rows")) return NULL;
    PyObject *upper = args[0], *lower = args[1];
    if (!PyList_Check(upper) || !PyList_Check(lower)) {
        PyErr_SetString(PyExc_TypeError, "merge_rows() takes two lists of rows");
        return NULL;
    }
    int keep = PyObject_IsTrue(args[2]);
    if (keep < 0) return NULL;
    Py_ssize_t nu = PyList_Size(upper), nl = PyList_Size(lower);
    if (nu == 0 || (nl == 0 && keep)) {
        PyObject *same = nu == 0 ? lower : upper;
        Py_INCREF(same);
        return same;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    int sparse = nu * 4 < nl;
    Py_ssize_t pos = 0; /* the first lower row not yet merged */
    const char *lk = NULL;
    Py_ssize_t ln = 0;
    for (Py_ssize_t i = 0; i < nu; i++) {
        PyObject *u = PyList_GetItem(upper, i);
        const char *uk;
        Py_ssize_t un;
        if (row_key(u, &uk, &un) < 0) goto fail;
        Py_ssize_t j = pos;
        int c = 1; /* key_cmp(lower[j] key, uk), once j < nl */
        if (sparse) {
            Py_ssize_t lo = pos, hi = nl; /* first lower key >= uk in [lo, hi) */
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (row_key(PyList_GetItem(lower, mid), &lk, &ln) < 0) goto fail;
                if (key_cmp(lk, ln, uk, un) < 0) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            j = lo;
            if (j < nl) {
                if (row_key(PyList_GetItem(lower, j), &lk, &ln) < 0) goto fail;
                c = key_cmp(lk, ln, uk, un);
            }
        } else {
            while (j < nl) {
                if (row_key(PyList_GetItem(lower, j), &lk, &ln) < 0) goto fail;
                c = key_cmp(lk, ln, uk, un);
                if (c >= 0) break;
                j++;
            }
        }
        if (extend_run(out, lower, pos, j) < 0) goto fail;
        if (keep || PyTuple_GetItem(u, 1) != Py_None) {
            if (PyList_Append(out, u) < 0) goto fail;
        }
        if (j < nl && c == 0) j++; /* the lower row the upper one replaces or deletes */
        pos = j;
    }
    if (extend_run(out, lower, pos, nl) < 0) goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
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

/* ---- window_items: a short single-key window fetch read and decoded in one call ----------
 *
 * window_items(cursor, key, time_from, time_to, limit, kv_type, decode, sealed, staged)
 *     -> list | None
 *
 * Seeks `cursor` (a py-lmdb cursor: set_range(), key(), value(), next()) to
 * lo = key || L(time_from) || I(0) and reads the rows up to hi = key || L(time_to) || I(MAX)
 * (inclusive), each of which must be a window row of `key`: key || L(start) || I(seq) (for
 * time_from >= 0, such a row is in the time range). For each, in order: the
 * trailer is checked and stripped when `sealed` (ChecksumError on a mismatch, as unseal), and
 * it becomes kv_type(start, value), kv_type a tuple subclass (txstore.types.KeyValue), value
 * the UTF-8 text of the stored bytes when `decode` is None, else decode(bytes). Returns None,
 * having made nothing, when the rows need the general path: more than `limit` rows of the key,
 * or more than `limit` rows of other keys between the bounds (rows of another length: of a
 * longer key sharing the prefix, or of a shorter key whose row sorts in range, as "k" || L(100)
 * between the bounds of "k\0"; they are skipped, as the general path's filter does), or bytes
 * that are not UTF-8 (the general path's serde raises its own error). `staged`: None, or the rows a transaction staged between
 * the bounds (the overlay's, ascending; (key, value) with unsealed values, None for a delete):
 * merged in, a staged row replacing the committed row of the same key. One call instead of a
 * Python loop over rows plus
 * unseal_rows plus a decode loop: measured 4-window fetch in perf/bench_window.py. */

static PyObject *str_set_range, *str_key, *str_value, *str_next;

/* The methods of the cursor type last seen (in practice py-lmdb's Cursor), looked up on the
 * type once and called with the cursor as their first argument: no bound method is made per
 * call (CPython calls a method descriptor this way without a tuple). */
static PyObject *cursor_type, *d_set_range, *d_key, *d_value, *d_next;

static int cursor_methods(PyObject *cursor) {
    PyObject *type = (PyObject *)Py_TYPE(cursor);
    if (type == cursor_type) return 0;
    PyObject *sr = PyObject_GetAttr(type, str_set_range), *k = PyObject_GetAttr(type, str_key);
    PyObject *v = PyObject_GetAttr(type, str_value), *n = PyObject_GetAttr(type, str_next);
    if (sr == NULL || k == NULL || v == NULL || n == NULL) {
        Py_XDECREF(sr);
        Py_XDECREF(k);
        Py_XDECREF(v);
        Py_XDECREF(n);
        return -1;
    }
    Py_XDECREF(d_set_range);
    Py_XDECREF(d_key);
    Py_XDECREF(d_value);
    Py_XDECREF(d_next);
    Py_XDECREF(cursor_type);
    d_set_range = sr, d_key = k, d_value = v, d_next = n;
    Py_INCREF(type);
    cursor_type = type;
    return 0;
}

/* kv_type(kobj, value), stealing both; NULL on error (both released). */
static PyObject *make_pair(PyObject *kv_type, allocfunc alloc, PyObject *kobj, PyObject *value) {
    PyObject *pair = alloc((PyTypeObject *)kv_type, 2);
    if (pair == NULL) {
        Py_DECREF(kobj);
        Py_DECREF(value);
        return NULL;
    }
    /* a fresh tuple (subclass) instance: the only reference, so SetItem applies */
    if (PyTuple_SetItem(pair, 0, kobj) < 0) { /* steals kobj even then */
        Py_DECREF(value);
        Py_DECREF(pair);
        return NULL;
    }
    if (PyTuple_SetItem(pair, 1, value) < 0) {
        Py_DECREF(pair);
        return NULL;
    }
    return pair;
}

#define WINDOW_KEY_MAX 1024 /* above LMDB's key size: a key of a window row is never longer */

static void put_be64(char *p, long long v) {
    unsigned long long u = (unsigned long long)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (char)(u & 0xff);
        u >>= 8;
    }
}

static long long get_be64(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned long long u = 0;
    for (int i = 0; i < 8; i++) u = (u << 8) | p[i];
    return (long long)u;
}

/* What the rows of one window_items call become. */
struct wctx {
    PyObject *out, *kv_type, *decode;
    allocfunc alloc;
    Py_ssize_t key_len, row_len, limit;
};

/* Append kv_type(kobj, value) for value bytes v[0:vn] (`raw`: a bytes object of exactly
 * them, or NULL to make one for decode); kobj is stolen. 0: appended; 1: the general path (not
 * UTF-8, or more than `limit` rows); -1: error. */
static int append_pair(struct wctx *w, PyObject *kobj, const char *v, Py_ssize_t vn, PyObject *raw) {
    if (kobj == NULL) return -1;
    if (PyList_Size(w->out) >= w->limit) {
        Py_DECREF(kobj);
        return 1;
    }
    PyObject *value;
    if (w->decode == Py_None) {
        value = PyUnicode_DecodeUTF8(v, vn, NULL);
        if (value == NULL) {
            Py_DECREF(kobj);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                return 1;
            }
            return -1;
        }
    } else {
        if (raw == NULL) {
            raw = PyBytes_FromStringAndSize(v, vn);
            if (raw == NULL) {
                Py_DECREF(kobj);
                return -1;
            }
        } else {
            Py_INCREF(raw);
        }
        value = PyObject_CallFunctionObjArgs(w->decode, raw, NULL);
        Py_DECREF(raw);
        if (value == NULL) {
            Py_DECREF(kobj);
            return -1;
        }
    }
    PyObject *pair = make_pair(w->kv_type, w->alloc, kobj, value);
    if (pair == NULL) return -1;
    int rc = PyList_Append(w->out, pair);
    Py_DECREF(pair);
    return rc < 0 ? -1 : 0;
}

/* append_pair with the window start as the key */
static int append_item(struct wctx *w, long long start, const char *v, Py_ssize_t vn, PyObject *raw) {
    return append_pair(w, PyLong_FromLongLong(start), v, vn, raw);
}

/* bytes order: memcmp, then the shorter first */
static int cmp_keys(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn) {
    int c = memcmp(a, b, (size_t)(an < bn ? an : bn));
    return c != 0 ? c : an < bn ? -1 : an > bn ? 1 : 0;
}

/* Append the staged rows (key, value or None: a delete) of `staged` from *si on that sort
 * before the committed key k (all of them when k is NULL); one equal to k replaces it (*same
 * set). 0: done; 1: the general path (a row of another length); -1: error. */
static int merge_staged(struct wctx *w, PyObject *staged, Py_ssize_t *si, const char *k, Py_ssize_t kn, int *same) {
    Py_ssize_t sn = staged == Py_None ? 0 : PyList_Size(staged);
    while (*si < sn) {
        PyObject *row = PyList_GetItem(staged, *si); /* borrowed */
        if (row == NULL || !PyTuple_Check(row) || PyTuple_Size(row) != 2) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "staged rows must be (key, value) tuples");
            return -1;
        }
        PyObject *skey = PyTuple_GetItem(row, 0), *sval = PyTuple_GetItem(row, 1);
        char *sk, *sv = NULL;
        Py_ssize_t skn, svn = 0;
        if (need_bytes(skey, "staged key") || PyBytes_AsStringAndSize(skey, &sk, &skn) < 0) return -1;
        if (sval != Py_None && (need_bytes(sval, "staged value") || PyBytes_AsStringAndSize(sval, &sv, &svn) < 0))
            return -1;
        if (k != NULL) {
            int c = cmp_keys(sk, skn, k, kn);
            if (c > 0) break;
            *same = c == 0;
        }
        (*si)++;
        if (skn != w->row_len) continue; /* another key's row between the bounds */
        if (sval != Py_None) {
            int r = append_item(w, get_be64(sk + w->key_len), sv, svn, sval);
            if (r) return r;
        }
        if (*same) break;
    }
    return 0;
}

static PyObject *py_window_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 9, "window_items")) return NULL;
    PyObject *cursor = args[0], *wkey = args[1], *kv_type = args[5], *decode = args[6], *staged = args[8];
    long long t_from = PyLong_AsLongLong(args[2]);
    if (t_from == -1 && PyErr_Occurred()) return NULL;
    long long t_to = PyLong_AsLongLong(args[3]);
    if (t_to == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    int sealed = PyObject_IsTrue(args[7]);
    if (sealed < 0) return NULL;
    char *kp;
    Py_ssize_t key_len;
    if (need_bytes(wkey, "key") || PyBytes_AsStringAndSize(wkey, &kp, &key_len) < 0) return NULL;
    if (key_len > WINDOW_KEY_MAX) {
        PyErr_SetString(PyExc_ValueError, "key too long for a window row");
        return NULL;
    }
    if (!PyType_Check(kv_type) || !PyType_IsSubtype((PyTypeObject *)kv_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "kv_type must be a tuple subclass");
        return NULL;
    }
    if (decode != Py_None && !PyCallable_Check(decode)) {
        PyErr_SetString(PyExc_TypeError, "decode must be None or callable");
        return NULL;
    }
    if (staged != Py_None && !PyList_Check(staged)) {
        PyErr_SetString(PyExc_TypeError, "staged must be None or a list");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)kv_type, Py_tp_alloc);
    if (alloc == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "kv_type has no allocator");
        return NULL;
    }
    /* the bounds: lo = key || L(from) || I(0), hi = key || L(to) || I(INT_MAX) */
    Py_ssize_t row_len = key_len + 12, hn = row_len;
    char hp[WINDOW_KEY_MAX + 12];
    memcpy(hp, kp, (size_t)key_len);
    put_be64(hp + key_len, t_from);
    memset(hp + key_len + 8, 0, 4);
    PyObject *lo = PyBytes_FromStringAndSize(hp, row_len);
    if (lo == NULL) return NULL;
    put_be64(hp + key_len, t_to);
    hp[key_len + 8] = 0x7f;
    memset(hp + key_len + 9, 0xff, 3);

    /* Reading key, then value, then moving on costs less than iterating the cursor (no
     * iterator object, no (key, value) tuple, and the value of the row past the range is never
     * copied). */
    if (cursor_methods(cursor) < 0) {
        Py_DECREF(lo);
        return NULL;
    }
    /* own references: py-lmdb releases the GIL in its calls, and another thread may meet a
     * cursor of another type meanwhile and replace the cached methods */
    PyObject *m_key = d_key, *m_value = d_value, *m_next = d_next;
    Py_INCREF(m_key);
    Py_INCREF(m_value);
    Py_INCREF(m_next);
    PyObject *found = PyObject_CallFunctionObjArgs(d_set_range, cursor, lo, NULL);
    Py_DECREF(lo);
    struct wctx w = {NULL, kv_type, decode, alloc, key_len, row_len, limit};
    Py_ssize_t si = 0; /* the next staged row */
    int r = 0, same = 0;
    Py_ssize_t skipped = 0;
    int more = found == NULL ? -1 : PyObject_IsTrue(found);
    Py_XDECREF(found);
    if (more < 0) goto error;
    w.out = PyList_New(0);
    if (w.out == NULL) goto error;
    while (more) {
        PyObject *key = PyObject_CallFunctionObjArgs(m_key, cursor, NULL);
        if (key == NULL) goto error;
        char *k, *v;
        Py_ssize_t kn, vn;
        if (need_bytes(key, "key") || PyBytes_AsStringAndSize(key, &k, &kn) < 0) {
            Py_DECREF(key);
            goto error;
        }
        if (cmp_keys(k, kn, hp, hn) > 0) { /* past hi: the range ends */
            Py_DECREF(key);
            break;
        }
        if (kn != row_len) { /* another key's row between the bounds: skipped, a few */
            Py_DECREF(key);
            if (++skipped > limit) {
                r = 1;
                break;
            }
            goto advance;
        }
        r = merge_staged(&w, staged, &si, k, kn, &same);
        if (r != 0 || same) { /* the general path, an error, or a staged row replaced it */
            Py_DECREF(key);
            if (r) break;
            same = 0;
        } else {
            PyObject *stored = PyObject_CallFunctionObjArgs(m_value, cursor, NULL);
            if (stored == NULL || need_bytes(stored, "value") || PyBytes_AsStringAndSize(stored, &v, &vn) < 0) {
                Py_XDECREF(stored);
                Py_DECREF(key);
                goto error;
            }
            if (sealed) {
                const char *bad = vn < 4 ? "value shorter than its 4-byte checksum"
                                  : get_le32(v + vn - 4) != entry_crc(k, kn, v, vn - 4) ? "checksum mismatch"
                                                                                          : NULL;
                if (bad != NULL) {
                    fail(key, bad);
                    Py_DECREF(stored);
                    Py_DECREF(key);
                    goto error;
                }
                vn -= 4;
            }
            long long start = get_be64(k + key_len);
            Py_DECREF(key);
            r = append_item(&w, start, v, vn, sealed ? NULL : stored);
            Py_DECREF(stored);
            if (r) break;
        }
    advance:;
        PyObject *next = PyObject_CallFunctionObjArgs(m_next, cursor, NULL);
        if (next == NULL) goto error;
        more = PyObject_IsTrue(next);
        Py_DECREF(next);
        if (more < 0) goto error;
    }
    if (r == 0) r = merge_staged(&w, staged, &si, NULL, 0, &same); /* staged rows after the last */
    if (r < 0) goto error;
    if (r > 0) {
        Py_DECREF(w.out);
        Py_INCREF(Py_None);
        w.out = Py_None;
    }
done:
    Py_DECREF(m_key);
    Py_DECREF(m_value);
    Py_DECREF(m_next);
    return w.out;
error:
    Py_CLEAR(w.out);
    goto done;
}

/* session_items(cursor, key, end_from, start_to, limit, kv_type, make, key_obj, decode, sealed)
 *     -> list | None
 *
 * window_items for a session store's single-key search: the rows between
 * key || L(end_from) || L(0) and key || L(MAX) || L(start_to), each key || L(end) || L(start),
 * whose start is at most start_to (a row past it is skipped unread; more than `limit` skipped
 * rows, of this key or others, hand over to the general path as window_items does); each becomes
 * kv_type(make(key_obj, start, end), value). No staged rows: the caller merges those. */
static PyObject *py_session_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 10, "session_items")) return NULL;
    PyObject *cursor = args[0], *skey = args[1], *kv_type = args[5], *make = args[6], *key_obj = args[7];
    PyObject *decode = args[8];
    long long end_from = PyLong_AsLongLong(args[2]);
    if (end_from == -1 && PyErr_Occurred()) return NULL;
    long long start_to = PyLong_AsLongLong(args[3]);
    if (start_to == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    int sealed = PyObject_IsTrue(args[9]);
    if (sealed < 0) return NULL;
    char *kp;
    Py_ssize_t key_len;
    if (need_bytes(skey, "key") || PyBytes_AsStringAndSize(skey, &kp, &key_len) < 0) return NULL;
    if (key_len > WINDOW_KEY_MAX) {
        PyErr_SetString(PyExc_ValueError, "key too long for a session row");
        return NULL;
    }
    if (!PyType_Check(kv_type) || !PyType_IsSubtype((PyTypeObject *)kv_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "kv_type must be a tuple subclass");
        return NULL;
    }
    if (!PyCallable_Check(make) || (decode != Py_None && !PyCallable_Check(decode))) {
        PyErr_SetString(PyExc_TypeError, "make must be callable, decode None or callable");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)kv_type, Py_tp_alloc);
    if (alloc == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "kv_type has no allocator");
        return NULL;
    }
    Py_ssize_t row_len = key_len + 16, hn = row_len;
    char hp[WINDOW_KEY_MAX + 16];
    memcpy(hp, kp, (size_t)key_len);
    put_be64(hp + key_len, end_from);
    memset(hp + key_len + 8, 0, 8);
    PyObject *lo = PyBytes_FromStringAndSize(hp, row_len);
    if (lo == NULL) return NULL;
    put_be64(hp + key_len, 0x7fffffffffffffffLL);
    put_be64(hp + key_len + 8, start_to);
    if (cursor_methods(cursor) < 0) {
        Py_DECREF(lo);
        return NULL;
    }
    PyObject *m_key = d_key, *m_value = d_value, *m_next = d_next;
    Py_INCREF(m_key);
    Py_INCREF(m_value);
    Py_INCREF(m_next);
    PyObject *found = PyObject_CallFunctionObjArgs(d_set_range, cursor, lo, NULL);
    Py_DECREF(lo);
    struct wctx w = {NULL, kv_type, decode, alloc, key_len, row_len, limit};
    int r = 0;
    Py_ssize_t skipped = 0;
    int more = found == NULL ? -1 : PyObject_IsTrue(found);
    Py_XDECREF(found);
    if (more < 0) goto error;
    w.out = PyList_New(0);
    if (w.out == NULL) goto error;
    while (more) {
        PyObject *key = PyObject_CallFunctionObjArgs(m_key, cursor, NULL);
        if (key == NULL) goto error;
        char *k, *v;
        Py_ssize_t kn, vn;
        if (need_bytes(key, "key") || PyBytes_AsStringAndSize(key, &k, &kn) < 0) {
            Py_DECREF(key);
            goto error;
        }
        if (cmp_keys(k, kn, hp, hn) > 0) { /* past hi: the range ends */
            Py_DECREF(key);
            break;
        }
        if (kn != row_len) { /* another key's row between the bounds: skipped, a few */
            Py_DECREF(key);
            if (++skipped > limit) {
                r = 1;
                break;
            }
            goto advance;
        }
        long long end = get_be64(k + key_len), start = get_be64(k + key_len + 8);
        if (start <= start_to) {
            PyObject *stored = PyObject_CallFunctionObjArgs(m_value, cursor, NULL);
            if (stored == NULL || need_bytes(stored, "value") || PyBytes_AsStringAndSize(stored, &v, &vn) < 0) {
                Py_XDECREF(stored);
                Py_DECREF(key);
                goto error;
            }
            if (sealed) {
                const char *bad = vn < 4 ? "value shorter than its 4-byte checksum"
                                  : get_le32(v + vn - 4) != entry_crc(k, kn, v, vn - 4) ? "checksum mismatch"
                                                                                          : NULL;
                if (bad != NULL) {
                    fail(key, bad);
                    Py_DECREF(stored);
                    Py_DECREF(key);
                    goto error;
                }
                vn -= 4;
            }
            PyObject *ps = PyLong_FromLongLong(start), *pe = PyLong_FromLongLong(end);
            PyObject *kobj = ps == NULL || pe == NULL ? NULL : PyObject_CallFunctionObjArgs(make, key_obj, ps, pe, NULL);
            Py_XDECREF(ps);
            Py_XDECREF(pe);
            r = append_pair(&w, kobj, v, vn, sealed ? NULL : stored);
            Py_DECREF(stored);
        } else if (++skipped > limit) { /* a session starting too late: skipped, a few */
            r = 1;
        }
        Py_DECREF(key);
        if (r) break;
    advance:;
        PyObject *next = PyObject_CallFunctionObjArgs(m_next, cursor, NULL);
        if (next == NULL) goto error;
        more = PyObject_IsTrue(next);
        Py_DECREF(next);
        if (more < 0) goto error;
    }
    if (r < 0) goto error;
    if (r > 0) {
        Py_DECREF(w.out);
        Py_INCREF(Py_None);
        w.out = Py_None;
    }
done:
    Py_DECREF(m_key);
    Py_DECREF(m_value);
    Py_DECREF(m_next);
    return w.out;
error:
    Py_CLEAR(w.out);
    goto done;
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
    {"sort_rows", (PyCFunction)(void (*)(void))py_sort_rows, METH_FASTCALL,
     "sort_rows(mapping, seal) -> the (key, value) rows of a dict of bytes keys (values bytes or "
     "None) in key order, a new list; values sealed if seal (None stays None)"},
    {"merge_rows", (PyCFunction)(void (*)(void))py_merge_rows, METH_FASTCALL,
     "merge_rows(upper, lower, keep_tombstones) -> the rows of two ascending lists merged, upper "
     "winning on equal keys (txstore.engine.iterators.merge_rows)"},
    {"restore_rows", (PyCFunction)(void (*)(void))txs_restore_rows, METH_FASTCALL,
     "restore_rows(keys, values, timestamps, headers, fmt, seal, max_key) -> (puts, deletes): "
     "the last record of each key, sorted, converted and sealed (see csrc/restore_rows.c)"},
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL, "crc32c(data, crc=0) -> int"},
    {"set_hardware", py_set_hardware, METH_O,
     "set_hardware(on) -> previous: use the CPU's CRC32C instruction when on and available "
     "(tests compare both implementations)"},
    {"hardware", py_hardware, METH_NOARGS, "hardware() -> whether the CPU instruction is used"},
    {"window_items", (PyCFunction)(void (*)(void))py_window_items, METH_FASTCALL,
     "window_items(cursor, key, time_from, time_to, limit, kv_type, decode, sealed, staged) -> the KeyValue "
     "pairs of a short single-key window fetch, or None for the general path"},
    {"session_items", (PyCFunction)(void (*)(void))py_session_items, METH_FASTCALL,
     "session_items(cursor, key, end_from, start_to, limit, kv_type, make, key_obj, decode, sealed) "
     "-> the pairs of a short single-key session search, or None for the general path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "txstore._checksums", "CRC32C entry checksums (see csrc/checksums.c)", -1, methods,
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
    str_set_range = PyUnicode_InternFromString("set_range");
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    str_next = PyUnicode_InternFromString("next");
    if (str_set_range == NULL || str_key == NULL || str_value == NULL || str_next == NULL) {
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
