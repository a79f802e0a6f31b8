/*
 * txstore._checksums, the row paths of the engine (part of the extension csrc/checksums.c
 * builds): sort_rows, the commit's one pass over an overlay's memory tier (sorted, sealed), and
 * merge_rows, a merged scan's chunk of an upper tier over a lower one.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "checksums.h"

#define entry_crc txs_entry_crc
#define put_le32 txs_put_le32

/* ---- sort_rows: the commit's one pass over an overlay's memory tier ----------------------
 *
 * The rows of a dict {key: value or None} in ascending key order (bytewise, as LMDB compares
 * them), each value sealed on the way when asked. Sorting in Python (``sorted(d.items(),
 * key=itemgetter(0))``) costs ~400 ns a row for 200k random 16-byte keys: every comparison is a
 * rich comparison of two bytes objects scattered in memory. Here the first 8 bytes of each key
 * are read once, in the dict's order, into a compact array with the row's address; a bucket
 * pass on those 8-byte integers then a quicksort of each bucket (ix_sort_buckets) compare the
 * whole keys (memcmp) only when the integers are equal. The output rows are then built in key order, fetching each row's key and value a few
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

/* Sort ix[0..n) by a bucket pass first: the 16 bits of the prefix below the highest bit in
 * which the prefixes differ pick one of 65,536 buckets (a counting sort into tmp, then back),
 * and each bucket is sorted on its own (insertion sort when small, ix_sort otherwise). For n
 * random keys that is two sequential passes plus buckets of a few rows (sort_columns of 200k
 * random 16-byte keys: 104 ns a row against 168 with ix_sort alone). Keys sharing their first
 * bytes spread over the buckets by the bits that differ; skewed keys (a bucket holding many
 * rows) cost what ix_sort costs on them. ix_sort alone below BUCKET_MIN_ROWS rows, or when the
 * table cannot be allocated. */
#define BUCKET_BITS 16
#define BUCKET_MIN_ROWS 4096

static void ix_sort_buckets(ix_t *ix, Py_ssize_t n) {
    if (n < BUCKET_MIN_ROWS) {
        ix_sort(ix, n);
        return;
    }
    uint64_t first = ix[0].pfx, diff = 0;
    for (Py_ssize_t i = 1; i < n; i++) diff |= ix[i].pfx ^ first;
    if (diff == 0) { /* every prefix equal: only the whole keys tell */
        ix_sort(ix, n);
        return;
    }
    int top = 63 - __builtin_clzll(diff); /* highest bit in which some prefix differs */
    int shift = top + 1 - BUCKET_BITS;
    if (shift < 0) shift = 0;
    size_t nb = (size_t)1 << BUCKET_BITS;
    Py_ssize_t *start = PyMem_Calloc(nb + 1, sizeof(Py_ssize_t));
    ix_t *tmp = PyMem_Malloc(sizeof(ix_t) * (size_t)n);
    if (start == NULL || tmp == NULL) {
        PyMem_Free(start);
        PyMem_Free(tmp);
        ix_sort(ix, n);
        return;
    }
    uint64_t mask = nb - 1;
    for (Py_ssize_t i = 0; i < n; i++) start[((ix[i].pfx >> shift) & mask) + 1]++;
    for (size_t b = 0; b < nb; b++) start[b + 1] += start[b];
    /* start[b] is now where bucket b begins; fill, moving each start to its bucket's end */
    for (Py_ssize_t i = 0; i < n; i++) tmp[start[(ix[i].pfx >> shift) & mask]++] = ix[i];
    memcpy(ix, tmp, sizeof(ix_t) * (size_t)n);
    Py_ssize_t from = 0;
    for (size_t b = 0; b < nb; b++) {
        Py_ssize_t to = start[b]; /* the end of bucket b */
        if (to - from > 1) ix_sort(ix + from, to - from);
        from = to;
    }
    PyMem_Free(start);
    PyMem_Free(tmp);
}

#define PREFETCH_AHEAD 8

/* sort_rows (columns 0): a list of (key, value) tuples; sort_columns (columns 1): a tuple of
 * two lists, the keys and the values, for a cursor putmulti over zip(keys, values), which
 * reuses one tuple: no tuple a row to make, track (a tuple is a GC object: 200k of them set off
 * collections of the young generation) and free. */
static PyObject *sort_impl(PyObject *const *args, Py_ssize_t nargs, int columns) {
    const char *name = columns ? "sort_columns" : "sort_rows";
    if (want_args(nargs, 2, name)) return NULL;
    PyObject *mapping = args[0];
    if (!PyDict_Check(mapping)) {
        PyErr_Format(PyExc_TypeError, "%s() takes a dict", name);
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
    ix_sort_buckets(ix, m);
    PyObject *keys = NULL, *vals = NULL;
    if (columns) {
        keys = PyList_New(m);
        vals = PyList_New(m);
        out = keys && vals ? PyTuple_New(2) : NULL;
        if (out == NULL) {
            Py_XDECREF(keys);
            Py_XDECREF(vals);
            goto done;
        }
        PyTuple_SetItem(out, 0, keys); /* steals: out owns both lists */
        PyTuple_SetItem(out, 1, vals);
    } else {
        out = PyList_New(m);
        if (out == NULL) goto done;
    }
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
        if (columns) {
            PyList_SetItem(keys, i, r->k); /* steal the row's references */
            PyList_SetItem(vals, i, r->v);
            r->k = r->v = NULL;
            continue;
        }
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

PyObject *txs_sort_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return sort_impl(args, nargs, 0);
}

PyObject *txs_sort_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return sort_impl(args, nargs, 1);
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

PyObject *txs_merge_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

