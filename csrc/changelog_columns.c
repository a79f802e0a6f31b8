/*
 * txstore._checksums.decode_columns: the per-record columns of one changelog batch frame, cut
 * in one C call (docs/formats.md has the batch layout; txstore/changelog/format.py,
 * decode_batch, is the caller and keeps the fixed fields and the sparse offsets).
 *
 * Input: the frame's buffer (bytes), the position of the timestamps column (just after the
 * fixed fields and the sparse offset deltas, if any), the body's end, the record count n,
 * whether the batch has a headers column, and keys_only (compaction's first pass: values and
 * headers left empty). The columns from there: n timestamps (int64 LE), n key lengths (uint32
 * LE), n value lengths (int32 LE, -1 a tombstone), n headers lengths (uint32 LE, when the
 * batch has headers), then the keys, the values and the headers, back to back.
 *
 * Output: (timestamps tuple, keys list, values list with None for a tombstone, headers list,
 * the keys', values' and headers' total bytes): what the Python decoder made with one
 * struct format per column, which it compiled per batch, and a loop over the tombstones.
 * Columns that do not add up to the body (or a value length below -1) raise ValueError,
 * which the caller reports as a corrupt changelog with the file and offset.
 *
 * txstore._checksums.column_bytes(buf, pos, end, n, has_headers, lo, hi): the same checks
 * without cutting anything; returns the keys', values' and headers' bytes of records [lo, hi)
 * (restore reads a batch's columns in place, csrc/restore_rows.c's restore_frames).
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "checksums.h"

static PyObject *not_adding_up(void) {
    PyErr_SetString(PyExc_ValueError, "batch columns do not add up to its length");
    return NULL;
}

/* A list of n bytes objects cut from data at the lengths lens (uint32 LE, stride 4); a
 * length of -1 (when tombstones) gives None. */
static PyObject *cut(const char *data, const char *lens, Py_ssize_t n, int tombstones) {
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t len = get_le32(lens + 4 * i);
        PyObject *item;
        if (tombstones && len == 0xffffffffu) {
            item = Py_NewRef(Py_None);
        } else {
            item = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
            if (item == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            data += len;
        }
        PyList_SetItem(out, i, item); /* steals item */
    }
    return out;
}

/* Check the columns of a batch of n records whose timestamps column starts at data + p (the
 * body ends at data + end, has_headers: a headers-lengths column): every length read stays in
 * the body, the value lengths are >= -1 and the lengths add up to the body exactly. Sets the
 * keys', values' and headers' total bytes (*ksum, *vsum, *hsum), whether there are tombstones,
 * and (when slice is not NULL) the bytes of records [lo, hi) into *slice. -1 with ValueError. */
int txs_column_sums(const char *data, Py_ssize_t p, Py_ssize_t end, Py_ssize_t n, int has_headers, Py_ssize_t lo,
                    Py_ssize_t hi, uint64_t *ksum, uint64_t *vsum, uint64_t *hsum, int *tombstones,
                    uint64_t *slice) {
    Py_ssize_t per = has_headers ? 20 : 16;
    if (p < 0 || n < 0 || p > end || n > (end - p) / per) {
        not_adding_up();
        return -1;
    }
    const char *ts = data + p, *klens = ts + 8 * n, *vlens = klens + 4 * n;
    const char *hlens = vlens + 4 * n, *body = hlens + (has_headers ? 4 * n : 0);
    uint64_t k = 0, v = 0, h = 0, part = 0;
    int dead = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t kl = get_le32(klens + 4 * i), hl = has_headers ? get_le32(hlens + 4 * i) : 0;
        int32_t vl = (int32_t)get_le32(vlens + 4 * i);
        if (vl < -1) {
            not_adding_up();
            return -1;
        }
        k += kl;
        h += hl;
        if (vl == -1)
            dead = 1;
        else
            v += (uint32_t)vl;
        if (i >= lo && i < hi) part += kl + hl + (vl > 0 ? (uint32_t)vl : 0);
    }
    if (k + v + h != (uint64_t)(data + end - body)) {
        not_adding_up();
        return -1;
    }
    *ksum = k;
    *vsum = v;
    *hsum = h;
    *tombstones = dead;
    if (slice != NULL) *slice = part;
    return 0;
}

PyObject *txs_decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 6, "decode_columns") < 0) return NULL;
    if (need_bytes(args[0], "buf") < 0) return NULL;
    Py_ssize_t p = PyLong_AsSsize_t(args[1]);
    if (p == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[3]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    int has_headers = PyObject_IsTrue(args[4]);
    if (has_headers < 0) return NULL;
    int keys_only = PyObject_IsTrue(args[5]);
    if (keys_only < 0) return NULL;
    char *data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(args[0], &data, &size) < 0) return NULL;
    Py_ssize_t per = has_headers ? 20 : 16;
    if (p < 0 || n < 0 || end > size || p > end || n > (end - p) / per) return not_adding_up();
    const char *ts = data + p, *klens = ts + 8 * n, *vlens = klens + 4 * n;
    const char *hlens = vlens + 4 * n, *body = hlens + (has_headers ? 4 * n : 0);
    uint64_t ksum = 0, vsum = 0, hsum = 0;
    int tombstones = 0;
    if (txs_column_sums(data, p, end, n, has_headers, 0, 0, &ksum, &vsum, &hsum, &tombstones, NULL) < 0) return NULL;

    PyObject *stamps = PyTuple_New(n), *keys = NULL, *values = NULL, *headers = NULL;
    if (stamps == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *t = ts + 8 * i;
        uint64_t u = (uint64_t)get_le32(t) | (uint64_t)get_le32(t + 4) << 32;
        PyObject *item = PyLong_FromLongLong((long long)(int64_t)u);
        if (item == NULL) goto fail;
        PyTuple_SetItem(stamps, i, item); /* steals item */
    }
    keys = cut(body, klens, n, 0);
    if (keys == NULL) goto fail;
    if (keys_only) {
        values = PyList_New(0);
        headers = PyTuple_New(0);
    } else {
        values = cut(body + ksum, vlens, n, tombstones);
        if (values == NULL) goto fail;
        if (has_headers) {
            headers = cut(body + ksum + vsum, hlens, n, 0);
        } else {
            headers = PyList_New(n);
            if (headers != NULL) {
                PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
                if (empty == NULL) goto fail;
                for (Py_ssize_t i = 0; i < n; i++) PyList_SetItem(headers, i, Py_NewRef(empty));
                Py_DECREF(empty);
            }
        }
    }
    if (values == NULL || headers == NULL) goto fail;
    PyObject *nbytes = PyLong_FromUnsignedLongLong(keys_only ? 0 : ksum + vsum + hsum);
    if (nbytes == NULL) goto fail;
    PyObject *res = PyTuple_New(5);
    if (res == NULL) {
        Py_DECREF(nbytes);
        goto fail;
    }
    PyTuple_SetItem(res, 0, stamps);
    PyTuple_SetItem(res, 1, keys);
    PyTuple_SetItem(res, 2, values);
    PyTuple_SetItem(res, 3, headers);
    PyTuple_SetItem(res, 4, nbytes);
    return res;
fail:
    Py_DECREF(stamps);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    return NULL;
}

PyObject *txs_column_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 7, "column_bytes") < 0) return NULL;
    if (need_bytes(args[0], "buf") < 0) return NULL;
    Py_ssize_t v[6];
    for (int i = 0; i < 6; i++) {
        v[i] = PyLong_AsSsize_t(args[i + 1]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    char *data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(args[0], &data, &size) < 0) return NULL;
    Py_ssize_t p = v[0], end = v[1], n = v[2], lo = v[4], hi = v[5];
    if (end > size) return not_adding_up();
    if (lo < 0 || lo > hi || hi > n) {
        PyErr_SetString(PyExc_ValueError, "record slice out of range");
        return NULL;
    }
    uint64_t ksum, vsum, hsum, slice;
    int tombstones;
    if (txs_column_sums(data, p, end, n, v[3] != 0, lo, hi, &ksum, &vsum, &hsum, &tombstones, &slice) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(slice);
}
