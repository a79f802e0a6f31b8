/*
 * txstore._checksums.encode_run and merge_runs: the sorted runs of a sorted restore
 * (txstore.bytestores.restore_runs; docs/performance.md, "Sorted restore").
 *
 * A run is the output of restore_rows for one restore chunk (sorted keys with their stored
 * values, and the sorted keys whose last record is a tombstone) as one byte string, in key
 * order (unsigned bytewise, a shorter prefix first: LMDB's default order), one record after
 * the other:
 *
 *   [u32 native: key size | TOMBSTONE][u32 native: value size][key][value]
 *
 * A tombstone has no value (size 0). Runs live in a temporary file of the process that wrote
 * them (native byte order is enough).
 *
 * encode_run(keys, stored, deletes) -> bytes: the run of restore_rows' output (keys and
 * deletes disjoint, each sorted). csrc/restore_frames.c's restore_frames_run writes the same
 * run straight from changelog records.
 *
 * merge_runs(bufs, pos, more, limit) -> (keys, values, need): the k-way merge of runs, each
 * whole or read through a window: bufs[i] (bytes, or any contiguous buffer such as a
 * memoryview of the mapped run file) holds bytes of run i from pos[i] on, more[i] says whether
 * the run goes on past bufs[i] (the sorted restore passes every run whole: more false). It emits, in key order, up to about ``limit`` rows (keys and
 * values lists: the values as stored), one per key: the record of the LATEST run (the highest
 * index) holding the key; a key whose latest record is a tombstone is dropped (the store was
 * empty). It stops when ``limit`` rows are out, when every run is done (need -1 and empty
 * lists: the end), or when the next record of a run is not wholly in its window (need: that
 * run's index; the caller reads more of it and calls again). pos is updated in place. A run
 * that ends inside a record (more false) raises ValueError.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checksums.h"
#include "restore_rows.h"

#define TOMBSTONE TXS_RUN_TOMBSTONE
#define HEAD TXS_RUN_HEAD

static int key_cmp(const char *a, size_t la, const char *b, size_t lb) {
    int r = memcmp(a, b, la < lb ? la : lb);
    if (r) return r;
    return la < lb ? -1 : (la > lb);
}

static char *put_record(char *p, const char *k, uint32_t kn, uint32_t flag, const char *v, uint32_t vn) {
    uint32_t h[2] = {kn | flag, vn};
    memcpy(p, h, HEAD);
    memcpy(p + HEAD, k, kn);
    if (vn) memcpy(p + HEAD + kn, v, vn);
    return p + HEAD + kn + vn;
}

static int bytes_of(PyObject *o, char **p, Py_ssize_t *n, const char *what) {
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", what);
        return 0;
    }
    return PyBytes_AsStringAndSize(o, p, n) == 0;
}

PyObject *txs_encode_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "encode_run(keys, stored, deletes) takes 3 lists");
        return NULL;
    }
    PyObject *keys = args[0], *stored = args[1], *deletes = args[2];
    Py_ssize_t n = PyList_Size(keys), d = PyList_Size(deletes);
    if (PyList_Size(stored) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and stored differ in length");
        return NULL;
    }
    size_t total = 0;
    char *p;
    Py_ssize_t len;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!bytes_of(PyList_GetItem(keys, i), &p, &len, "a key")) return NULL;
        total += HEAD + (size_t)len;
        if (!bytes_of(PyList_GetItem(stored, i), &p, &len, "a stored value")) return NULL;
        if ((size_t)len >= TOMBSTONE) {
            PyErr_SetString(PyExc_ValueError, "a value of 2 GiB or more");
            return NULL;
        }
        total += (size_t)len;
    }
    for (Py_ssize_t i = 0; i < d; i++) {
        if (!bytes_of(PyList_GetItem(deletes, i), &p, &len, "a deleted key")) return NULL;
        total += HEAD + (size_t)len;
    }
    if (total > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL) return NULL;
    char *w = PyBytes_AsString(out);
    Py_ssize_t i = 0, j = 0;
    while (i < n || j < d) {
        char *k, *v = NULL, *dk = NULL;
        Py_ssize_t kn = 0, vn = 0, dn = 0;
        if (i < n) PyBytes_AsStringAndSize(PyList_GetItem(keys, i), &k, &kn);
        if (j < d) PyBytes_AsStringAndSize(PyList_GetItem(deletes, j), &dk, &dn);
        if (i < n && (j >= d || key_cmp(k, (size_t)kn, dk, (size_t)dn) < 0)) {
            PyBytes_AsStringAndSize(PyList_GetItem(stored, i), &v, &vn);
            w = put_record(w, k, (uint32_t)kn, 0, v, (uint32_t)vn);
            i++;
        } else {
            w = put_record(w, dk, (uint32_t)dn, TOMBSTONE, NULL, 0);
            j++;
        }
    }
    return out;
}

typedef struct {
    const char *buf;
    size_t len, pos;
    int more;
    /* the head record, once head_state found it whole */
    const char *key;
    size_t kn, vn;
    uint64_t pre; /* the key's first 8 bytes, big-endian, zero-padded: most compares end here */
    int dead;
} run_t;

/* The state of run r's next record: 1 whole in the window (its fields then describe it), 0 the
 * run is done, -1 the window ends inside it and the run goes on (read more), -2 the run ends
 * inside it (damaged). */
static int head_state(run_t *r) {
    size_t left = r->len - r->pos;
    if (left == 0) return r->more ? -1 : 0;
    if (left >= HEAD) {
        uint32_t h[2];
        memcpy(h, r->buf + r->pos, HEAD);
        size_t kn = h[0] & ~TOMBSTONE;
        if (left >= HEAD + kn + h[1]) {
            const unsigned char *k = (const unsigned char *)r->buf + r->pos + HEAD;
            uint64_t pre = 0;
            for (size_t b = 0; b < 8; b++) pre = (pre << 8) | (b < kn ? k[b] : 0);
            r->key = (const char *)k;
            r->kn = kn;
            r->vn = h[1];
            r->dead = (h[0] & TOMBSTONE) != 0;
            r->pre = pre;
            return 1;
        }
    }
    return r->more ? -1 : -2;
}

/* heap order: the smaller key first; on equal keys the later run (higher index) first */
static int before(const run_t *runs, uint32_t a, uint32_t b) {
    const run_t *x = &runs[a], *y = &runs[b];
    if (x->pre != y->pre) return x->pre < y->pre;
    int c = key_cmp(x->key, x->kn, y->key, y->kn);
    return c < 0 || (c == 0 && a > b);
}

static void sift_down(const run_t *runs, uint32_t *heap, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && before(runs, heap[l], heap[m])) m = l;
        if (l + 1 < n && before(runs, heap[l + 1], heap[m])) m = l + 1;
        if (m == i) return;
        uint32_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static int append_new(PyObject *list, const char *p, size_t n) {
    PyObject *o = PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
    if (o == NULL) return 0;
    int r = PyList_Append(list, o);
    Py_DECREF(o);
    return r == 0;
}

PyObject *txs_merge_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "merge_runs(bufs, pos, more, limit) takes 3 lists and an int");
        return NULL;
    }
    PyObject *bufs = args[0], *pos = args[1], *more = args[2];
    Py_ssize_t k = PyList_Size(bufs);
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (PyList_Size(pos) != k || PyList_Size(more) != k || k > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, "bufs, pos and more differ in length");
        return NULL;
    }
    run_t *runs = PyMem_Malloc((size_t)(k ? k : 1) * sizeof *runs);
    uint32_t *heap = PyMem_Malloc((size_t)(k ? k : 1) * sizeof *heap);
    Py_buffer *views = PyMem_Malloc((size_t)(k ? k : 1) * sizeof *views);
    Py_ssize_t held = 0; /* views[0:held] to release */
    PyObject *keys = PyList_New(0), *values = PyList_New(0), *res = NULL;
    long need = -1;
    size_t h = 0;
    if (runs == NULL || heap == NULL || views == NULL || keys == NULL || values == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t p = PyLong_AsSsize_t(PyList_GetItem(pos, i));
        if (p == -1 && PyErr_Occurred()) goto done;
        if (PyObject_GetBuffer(PyList_GetItem(bufs, i), &views[i], PyBUF_SIMPLE) < 0) goto done;
        held = i + 1;
        int m = PyObject_IsTrue(PyList_GetItem(more, i));
        if (m < 0) goto done;
        if (p < 0 || p > views[i].len) {
            PyErr_SetString(PyExc_ValueError, "a run position outside its window");
            goto done;
        }
        runs[i].buf = views[i].buf;
        runs[i].len = (size_t)views[i].len;
        runs[i].pos = (size_t)p;
        runs[i].more = m;
    }
    for (Py_ssize_t i = 0; i < k && need < 0; i++) {
        int s = head_state(&runs[i]);
        if (s == -2) {
            PyErr_SetString(PyExc_ValueError, "a run ends inside a record");
            goto done;
        }
        if (s == -1) need = (long)i;
        if (s == 1) heap[h++] = (uint32_t)i;
    }
    if (need < 0) {
        for (size_t i = h / 2; i-- > 0;) sift_down(runs, heap, h, i);
        Py_ssize_t out = 0;
        while (h > 0 && out < limit && need < 0) {
            uint32_t top = heap[0];
            const run_t *t = &runs[top];
            if (!t->dead) {
                if (!append_new(keys, t->key, t->kn) || !append_new(values, t->key + t->kn, t->vn)) goto done;
                out++;
            }
            /* advance every run whose head is this key (the winner first: it is the top); the
             * key stays readable in run top's window, which does not move */
            const char *k0 = t->key;
            size_t kn0 = t->kn;
            uint64_t pre0 = t->pre;
            int first = 1;
            while (h > 0) {
                run_t *r = &runs[heap[0]];
                if (!first && (r->pre != pre0 || key_cmp(r->key, r->kn, k0, kn0) != 0)) break;
                first = 0;
                r->pos += HEAD + r->kn + r->vn;
                int s = head_state(r);
                if (s == 1) {
                    sift_down(runs, heap, h, 0);
                } else {
                    long gone = (long)heap[0];
                    heap[0] = heap[--h];
                    if (h) sift_down(runs, heap, h, 0);
                    if (s == -1 && need < 0) need = gone;
                    if (s == -2) {
                        PyErr_SetString(PyExc_ValueError, "a run ends inside a record");
                        goto done;
                    }
                }
            }
        }
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *p = PyLong_FromSize_t(runs[i].pos);
        if (p == NULL || PyList_SetItem(pos, i, p) < 0) goto done;
    }
    res = Py_BuildValue("(OOl)", keys, values, need);
done:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    PyMem_Free(runs);
    PyMem_Free(heap);
    PyMem_Free(views);
    return res;
}
