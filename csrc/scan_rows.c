/*
 * txstore._checksums, one chunk of committed LMDB rows without a Python frame (part of the
 * extension csrc/checksums.c builds): txstore.engine.iterators.read_lmdb_chunk positions the
 * cursor (a few method calls a chunk) and hands its py-lmdb iterator here.
 *
 * scan_rows(it, n, bound, inclusive, reverse, sealed) -> (rows, stopped) or None
 *
 * it is a py-lmdb cursor iterator (cursor.iternext() or cursor.iterprev(): (key, value)
 * tuples), driven through its C tp_iternext (no islice, no list(), no bisect in Python).
 * At most n rows are taken from it: one more is never read. bound (bytes, or None: unbounded)
 * is the range's end in scan order: forward, a key above it (or equal, unless inclusive) stops
 * the read; reverse, a key below it (or equal, unless inclusive). rows is a new list in
 * ascending key order (a reverse read is turned round), stopped True when the bound stopped
 * the read. With sealed, each value's CRC32C trailer is checked and stripped while reading: a
 * value and its row that only this read holds (reference count 1, exact types: what py-lmdb
 * just made) are shortened and reused in place (see unseal_one in csrc/checksums.c), else new
 * objects are made.
 *
 * The in-place strip assumes what py-lmdb guarantees: a value it hands out is a new object
 * that nobody hashed (a hashed bytes object would keep its stale cached hash).
 *
 * None means "take the general path": a checksum mismatch, or a row that is not an exact
 * (bytes, bytes) 2-tuple (without a bound or trailers to check, rows are only checked to be
 * 2-tuples and taken as they come, as list(islice(...)) did). The caller then reads the chunk
 * again in Python and checks it with the partition's verify_rows, which records the damage and
 * raises the typed error exactly as before. An error of the iterator itself (an lmdb.Error)
 * propagates unchanged, as it did from list(islice(...)).
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "checksums.h"

/* memcmp order of two byte strings (LMDB's default key order). */
static inline int key_cmp(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn) {
    int c = memcmp(a, b, (size_t)(an < bn ? an : bn));
    if (c != 0) return c;
    return an < bn ? -1 : an > bn;
}

/* Check and strip the trailer of row (a fresh (key, value) tuple this read owns one reference
 * to): the row to keep (a new reference; row itself when it could be updated in place), NULL
 * with no exception set for the general path, NULL with an exception on an error. */
static PyObject *unseal_row(PyObject *row, PyObject *key, const char *k, Py_ssize_t kn, PyObject *val) {
    char *v;
    Py_ssize_t vn;
    if (PyBytes_AsStringAndSize(val, &v, &vn) < 0) return NULL;
    if (vn < 4 || get_le32(v + vn - 4) != txs_entry_crc(k, kn, v, vn - 4)) return NULL; /* Python path */
    if (Py_REFCNT(row) == 1 && Py_REFCNT(val) == 1 && vn >= 6) {
        /* Only the row holds the value and only this read holds the row: nobody can see
         * either, so the value is shortened in place (it was never hashed: py-lmdb makes a
         * new object per read). Not done below 2 bytes: CPython shares 0- and 1-byte bytes. */
        Py_SET_SIZE((PyVarObject *)val, vn - 4);
        v[vn - 4] = '\0';
        Py_INCREF(row);
        return row;
    }
    PyObject *nval = PyBytes_FromStringAndSize(v, vn - 4);
    if (nval == NULL) return NULL;
    if (Py_REFCNT(row) == 1) {
        if (PyTuple_SetItem(row, 1, nval) < 0) return NULL; /* steals nval, releases val */
        Py_INCREF(row);
        return row;
    }
    PyObject *nrow = PyTuple_New(2);
    if (nrow == NULL) {
        Py_DECREF(nval);
        return NULL;
    }
    Py_INCREF(key);
    PyTuple_SetItem(nrow, 0, key);
    PyTuple_SetItem(nrow, 1, nval);
    return nrow;
}

PyObject *txs_scan_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 6, "scan_rows")) return NULL;
    PyObject *it = args[0], *bound = args[2];
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    int inclusive = PyObject_IsTrue(args[3]), reverse = PyObject_IsTrue(args[4]);
    int sealed = PyObject_IsTrue(args[5]);
    if (inclusive < 0 || reverse < 0 || sealed < 0) return NULL;
    iternextfunc next = (iternextfunc)PyType_GetSlot(Py_TYPE(it), Py_tp_iternext);
    if (next == NULL) {
        PyErr_SetString(PyExc_TypeError, "scan_rows: it must be an iterator");
        return NULL;
    }
    char *b = NULL;
    Py_ssize_t bn = 0;
    if (bound != Py_None) {
        if (need_bytes(bound, "bound") || PyBytes_AsStringAndSize(bound, &b, &bn) < 0) return NULL;
    }
    /* the row beyond the bound: forward, key > bound (or >=); reverse, key < bound (or <=) */
    int sign = reverse ? -1 : 1;
    /* The rows read, in a C array (a stack one for a chunk of up to 1,024 rows), then one
     * list of exactly their number. */
    PyObject *stack[1024], **buf = stack;
    Py_ssize_t cap = 1024, count = 0;
    int stopped = 0;
    PyObject *row, *out = NULL;
    while (count < n) {
        row = next(it);
        if (row == NULL) {
            if (PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_StopIteration)) goto done;
                PyErr_Clear();
            }
            break;
        }
        if (Py_TYPE(row) != &PyTuple_Type || PyTuple_Size(row) != 2) goto general;
        if (b != NULL || sealed) { /* else taken as it comes, as list(islice(...)) did */
            PyObject *key = PyTuple_GetItem(row, 0);
            if (Py_TYPE(key) != &PyBytes_Type) goto general;
            char *k;
            Py_ssize_t kn;
            if (PyBytes_AsStringAndSize(key, &k, &kn) < 0) {
                Py_DECREF(row);
                goto done;
            }
            if (b != NULL) {
                int c = key_cmp(k, kn, b, bn) * sign;
                if (c > 0 || (c == 0 && !inclusive)) {
                    Py_DECREF(row);
                    stopped = 1;
                    break;
                }
            }
            if (sealed) {
                PyObject *val = PyTuple_GetItem(row, 1);
                if (Py_TYPE(val) != &PyBytes_Type) goto general;
                PyObject *kept = unseal_row(row, key, k, kn, val);
                Py_DECREF(row);
                if (kept == NULL) {
                    if (PyErr_Occurred()) goto done;
                    out = Py_None; /* a mismatch: the Python path raises the typed error */
                    Py_INCREF(out);
                    goto done;
                }
                row = kept;
            }
        }
        if (count == cap) {
            PyObject **more = PyMem_Malloc((size_t)(cap * 2) * sizeof *buf);
            if (more == NULL) {
                Py_DECREF(row);
                PyErr_NoMemory();
                goto done;
            }
            memcpy(more, buf, (size_t)count * sizeof *buf);
            if (buf != stack) PyMem_Free(buf);
            buf = more, cap *= 2;
        }
        buf[count++] = row;
    }
    {
        PyObject *rows = PyList_New(count);
        if (rows == NULL) goto done;
        for (Py_ssize_t i = 0; i < count; i++) { /* each stolen: the array lets them go */
            PyList_SetItem(rows, i, buf[reverse ? count - 1 - i : i]);
        }
        count = 0;
        out = Py_BuildValue("(NO)", rows, stopped ? Py_True : Py_False);
    }
    goto done;

general:
    Py_DECREF(row);
    out = Py_None; /* a row of another shape: the Python path */
    Py_INCREF(out);
done:
    for (Py_ssize_t i = 0; i < count; i++) Py_DECREF(buf[i]);
    if (buf != stack) PyMem_Free(buf);
    return out;
}
