/*
 * txstore._fastpaths column functions: a list of stored values (or window / session keys)
 * split into Arrow-layout columns in one C call that reads the list's bytes objects in place.
 *
 * The cffi forms (txc_split_columns and the key columns in txcodecs.c) need their input packed
 * into one buffer first; packing a list of bytes costs a copy of every item (a join or a
 * marshal stream) and a Python pass for the lengths, more than the split itself. These
 * builtins take the list, size the columns in a first pass over it (no copy), ask the caller's
 * `allocate` for the data buffers, and write the columns with the same per-item rules
 * (txc_value_split; the key suffix layouts of csrc/txcodecs.c).
 *
 * Errors are not decided here: any bad input (not a list or tuple, an item that is not exact
 * bytes, an item the format refuses, a buffer too small or read-only, a column past 2 GiB)
 * raises ValueError or TypeError, and the Python caller (txstore.codecs._native) then takes
 * the packed path, which raises the typed error naming the item. An exception raised by
 * `allocate` itself propagates unchanged.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "txcodecs.h"

/* Borrowed item i of a list or tuple. */
static PyObject *item_at(PyObject *seq, Py_ssize_t i) {
    return PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i);
}

/* Length of a list or tuple, or -1 with TypeError for anything else. */
static Py_ssize_t seq_len(PyObject *seq) {
    if (PyList_Check(seq)) return PyList_Size(seq);
    if (PyTuple_Check(seq)) return PyTuple_Size(seq);
    PyErr_SetString(PyExc_TypeError, "a list or tuple of bytes");
    return -1;
}

/* Total length of the items (every one exact bytes, the total below 2^31: Arrow's int32
 * offsets), or -1 with an exception set. */
static Py_ssize_t total_length(PyObject *seq, Py_ssize_t n) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = item_at(seq, i);
        if (o == NULL) return -1;
        if (!PyBytes_CheckExact(o)) {
            PyErr_SetString(PyExc_TypeError, "an item is not bytes");
            return -1;
        }
        total += PyBytes_Size(o);
        if (total > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a column holds at most 2 GiB");
            return -1;
        }
    }
    return total;
}

/* A writable buffer of at least `need` bytes exported by `obj` (released by the caller). */
static int writable(PyObject *obj, Py_ssize_t need, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) < 0) return -1;
    if (view->len < need) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "a buffer is too small");
        return -1;
    }
    return 0;
}

/* Data buffer of `size` bytes from allocate(size): a new reference stored in *out and its
 * writable view in *view. */
static int allocate_into(PyObject *allocate, Py_ssize_t size, PyObject **out, Py_buffer *view) {
    PyObject *n = PyLong_FromSsize_t(size);
    if (n == NULL) return -1;
    *out = PyObject_CallFunctionObjArgs(allocate, n, NULL);
    Py_DECREF(n);
    if (*out == NULL) return -1;
    if (writable(*out, size, view) < 0) {
        Py_CLEAR(*out);
        return -1;
    }
    return 0;
}

static int fail_item(Py_ssize_t i) {
    PyErr_Format(PyExc_ValueError, "item %zd is malformed", i);
    return -1;
}

/* split_value_columns(fmt, raws, allocate, value_offsets, timestamps, header_offsets)
 *   -> (values, headers)
 * value_offsets and header_offsets: writable int32 buffers of n + 1 items, timestamps an int64
 * buffer of n items (array("i") / array("q")); values and headers come from allocate. */
static PyObject *split_value_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "split_value_columns takes 6 arguments");
        return NULL;
    }
    int fmt = (int)PyLong_AsLong(args[0]);
    if (fmt == -1 && PyErr_Occurred()) return NULL;
    PyObject *raws = args[1], *allocate = args[2];
    Py_ssize_t n = seq_len(raws);
    if (n < 0) return NULL;
    Py_ssize_t size = total_length(raws, n);
    if (size < 0) return NULL;
    Py_buffer vo, ts, ho, vv, hv;
    PyObject *values = NULL, *headers = NULL, *result = NULL;
    if (writable(args[3], 4 * (n + 1), &vo) < 0) return NULL;
    if (writable(args[4], 8 * n, &ts) < 0) goto release_vo;
    if (writable(args[5], 4 * (n + 1), &ho) < 0) goto release_ts;
    if (allocate_into(allocate, size, &values, &vv) < 0) goto release_ho;
    if (allocate_into(allocate, size, &headers, &hv) < 0) goto release_vv;
    {
        uint8_t *vout = vv.buf, *hout = hv.buf;
        int32_t *voffs = vo.buf, *hoffs = ho.buf;
        int64_t *stamps = ts.buf, parts[6];
        Py_ssize_t vpos = 0, hpos = 0, i;
        voffs[0] = hoffs[0] = 0;
        for (i = 0; i < n; i++) {
            PyObject *o = item_at(raws, i);
            char *item;
            Py_ssize_t len;
            /* allocate may have changed the list: every item is checked again */
            if (o == NULL) PyErr_Clear(); /* shortened by allocate: fail_item says so */
            if (o == NULL || !PyBytes_CheckExact(o) || PyBytes_AsStringAndSize(o, &item, &len) < 0) break;
            if (txc_value_split(fmt, (const uint8_t *)item, (size_t)len, parts) < 0) break;
            if (parts[1] > size - hpos || parts[5] > size - vpos) break;
            memcpy(hout + hpos, item + parts[0], (size_t)parts[1]);
            hpos += (Py_ssize_t)parts[1];
            memcpy(vout + vpos, item + parts[4], (size_t)parts[5]);
            vpos += (Py_ssize_t)parts[5];
            stamps[i] = parts[3];
            voffs[i + 1] = (int32_t)vpos;
            hoffs[i + 1] = (int32_t)hpos;
        }
        if (i == n) result = PyTuple_Pack(2, values, headers);
        else if (!PyErr_Occurred()) fail_item(i);
    }
    PyBuffer_Release(&hv);
release_vv:
    PyBuffer_Release(&vv);
release_ho:
    PyBuffer_Release(&ho);
release_ts:
    PyBuffer_Release(&ts);
release_vo:
    PyBuffer_Release(&vo);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    return result;
}

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

/* key_columns(session, raws, allocate, key_offsets, first, second) -> keys
 * Window keys [key][ts 8][seq 4] (session false: first int64 timestamps, second int32
 * sequence numbers) or session keys [key][end 8][start 8] (first int64 ends, second int64
 * starts); key_offsets an int32 buffer of n + 1 items. */
static PyObject *key_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "key_columns takes 6 arguments");
        return NULL;
    }
    int session = PyObject_IsTrue(args[0]);
    if (session < 0) return NULL;
    Py_ssize_t suffix = session ? 16 : 12;
    PyObject *raws = args[1], *allocate = args[2];
    Py_ssize_t n = seq_len(raws);
    if (n < 0) return NULL;
    Py_ssize_t size = total_length(raws, n);
    if (size < 0) return NULL;
    Py_buffer ko, fv, sv, kv;
    PyObject *keys = NULL, *result = NULL;
    if (writable(args[3], 4 * (n + 1), &ko) < 0) return NULL;
    if (writable(args[4], 8 * n, &fv) < 0) goto release_ko;
    if (writable(args[5], (session ? 8 : 4) * n, &sv) < 0) goto release_fv;
    if (allocate_into(allocate, size, &keys, &kv) < 0) goto release_sv;
    {
        uint8_t *out = kv.buf;
        int32_t *offs = ko.buf, *second32 = sv.buf;
        int64_t *first = fv.buf, *second64 = sv.buf;
        Py_ssize_t pos = 0, i;
        offs[0] = 0;
        for (i = 0; i < n; i++) {
            PyObject *o = item_at(raws, i);
            char *item;
            Py_ssize_t len;
            if (o == NULL) PyErr_Clear(); /* shortened by allocate: fail_item says so */
            if (o == NULL || !PyBytes_CheckExact(o) || PyBytes_AsStringAndSize(o, &item, &len) < 0) break;
            if (len < suffix || len - suffix > size - pos) break;
            Py_ssize_t kl = len - suffix;
            const uint8_t *tail = (const uint8_t *)item + kl;
            memcpy(out + pos, item, (size_t)kl);
            pos += kl;
            offs[i + 1] = (int32_t)pos;
            first[i] = (int64_t)be64(tail);
            if (session) second64[i] = (int64_t)be64(tail + 8);
            else second32[i] = (int32_t)((uint32_t)tail[8] << 24 | (uint32_t)tail[9] << 16 | (uint32_t)tail[10] << 8 | tail[11]);
        }
        if (i == n) {
            result = keys;
            Py_INCREF(result);
        } else if (!PyErr_Occurred()) {
            fail_item(i);
        }
    }
    PyBuffer_Release(&kv);
release_sv:
    PyBuffer_Release(&sv);
release_fv:
    PyBuffer_Release(&fv);
release_ko:
    PyBuffer_Release(&ko);
    Py_XDECREF(keys);
    return result;
}

PyMethodDef txcolumns_methods[] = {
    {"split_value_columns", (PyCFunction)(void (*)(void))split_value_columns, METH_FASTCALL,
     "split_value_columns(fmt, raws, allocate, value_offsets, timestamps, header_offsets) -> (values, headers)"},
    {"key_columns", (PyCFunction)(void (*)(void))key_columns, METH_FASTCALL,
     "key_columns(session, raws, allocate, key_offsets, first, second) -> keys"},
    {NULL, NULL, 0, NULL},
};
