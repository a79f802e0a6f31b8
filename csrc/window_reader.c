/*
 * txstore._checksums, the window and session readers (part of the extension csrc/checksums.c
 * builds): a short single-key window fetch or session search read, checked and decoded in one
 * call over a py-lmdb cursor (txstore/bytestores/window_fetch.py calls them).
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "checksums.h"

#define entry_crc txs_entry_crc
#define put_le32 txs_put_le32
#define fail txs_fail

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

/* ---- the row scan both readers share --------------------------------------------------
 *
 * One key's rows between lo and hi (inclusive) over a py-lmdb cursor: set_range(lo), then key,
 * value and next called as the cursor type's methods. Reading key, then value, then moving on
 * costs less than iterating the cursor (no iterator object, no (key, value) tuple, and the
 * value of the row past the range is never copied). Rows of another length between the bounds
 * (another key's) are skipped; more than `limit` of them hand over to the general path. */
struct rowscan {
    PyObject *cursor, *m_key, *m_value, *m_next;
    const char *hi;
    Py_ssize_t row_len, limit, skipped;
};

/* Position s on the first row at or after lo (stolen). 1: there may be rows; 0: none; -1:
 * error. Takes its own references to the cursor methods (py-lmdb releases the GIL in its
 * calls, and another thread may meet a cursor of another type meanwhile and replace the cached
 * ones): scan_close releases them, whatever this returned. */
static int scan_open(struct rowscan *s, PyObject *cursor, PyObject *lo) {
    s->m_key = s->m_value = s->m_next = NULL;
    if (lo == NULL) return -1;
    if (cursor_methods(cursor) < 0) {
        Py_DECREF(lo);
        return -1;
    }
    s->cursor = cursor;
    s->m_key = d_key, s->m_value = d_value, s->m_next = d_next;
    Py_INCREF(s->m_key);
    Py_INCREF(s->m_value);
    Py_INCREF(s->m_next);
    PyObject *found = PyObject_CallFunctionObjArgs(d_set_range, cursor, lo, NULL);
    Py_DECREF(lo);
    int more = found == NULL ? -1 : PyObject_IsTrue(found);
    Py_XDECREF(found);
    return more;
}

static void scan_close(struct rowscan *s) {
    Py_XDECREF(s->m_key);
    Py_XDECREF(s->m_value);
    Py_XDECREF(s->m_next);
}

/* Move to the next row. 1: there may be one; 0: the end of the database; -1: error. */
static int scan_next(struct rowscan *s) {
    PyObject *next = PyObject_CallFunctionObjArgs(s->m_next, s->cursor, NULL);
    if (next == NULL) return -1;
    int more = PyObject_IsTrue(next);
    Py_DECREF(next);
    return more;
}

/* The key of the next row of the scanned key at or after the cursor, skipping other keys'
 * rows. 1: *key (a new reference) with its bytes k[0:*kn]; 0: the range ended; 2: the general
 * path (more than `limit` rows skipped); -1: error. */
static int scan_key(struct rowscan *s, int more, PyObject **key, char **k, Py_ssize_t *kn) {
    for (; more > 0; more = scan_next(s)) {
        *key = PyObject_CallFunctionObjArgs(s->m_key, s->cursor, NULL);
        if (*key == NULL) return -1;
        if (need_bytes(*key, "key") || PyBytes_AsStringAndSize(*key, k, kn) < 0) {
            Py_DECREF(*key);
            return -1;
        }
        if (cmp_keys(*k, *kn, s->hi, s->row_len) > 0) { /* past hi: the range ends */
            Py_DECREF(*key);
            return 0;
        }
        if (*kn == s->row_len) return 1;
        Py_DECREF(*key); /* another key's row between the bounds: skipped, a few */
        if (++s->skipped > s->limit) return 2;
    }
    return more; /* 0 at the end of the database, -1 on error */
}

/* The stored value of the row at the cursor (a new reference), its bytes *v[0:*vn] checked
 * and stripped of the trailer when `sealed` (ChecksumError naming `key` on a mismatch, as
 * unseal); NULL on error. */
static PyObject *scan_value(struct rowscan *s, PyObject *key, const char *k, Py_ssize_t kn, int sealed,
                            char **v, Py_ssize_t *vn) {
    PyObject *stored = PyObject_CallFunctionObjArgs(s->m_value, s->cursor, NULL);
    if (stored == NULL || need_bytes(stored, "value") || PyBytes_AsStringAndSize(stored, v, vn) < 0) {
        Py_XDECREF(stored);
        return NULL;
    }
    if (sealed) {
        const char *bad = *vn < 4                                              ? "value shorter than its 4-byte checksum"
                          : get_le32(*v + *vn - 4) != entry_crc(k, kn, *v, *vn - 4) ? "checksum mismatch"
                                                                                    : NULL;
        if (bad != NULL) {
            fail(key, bad);
            Py_DECREF(stored);
            return NULL;
        }
        *vn -= 4;
    }
    return stored;
}

/* The checks both readers make of their output type; its allocator, or NULL with an error. */
static allocfunc kv_allocator(PyObject *kv_type) {
    if (!PyType_Check(kv_type) || !PyType_IsSubtype((PyTypeObject *)kv_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "kv_type must be a tuple subclass");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)kv_type, Py_tp_alloc);
    if (alloc == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "kv_type has no allocator");
    return alloc;
}

/* The list a reader returns for its last result r: the list (0), None for the general path
 * (1), or NULL on error (-1); the list is released unless returned. */
static PyObject *scan_result(PyObject *out, int r) {
    if (r == 0 || out == NULL) return out;
    Py_DECREF(out);
    if (r < 0) return NULL;
    Py_INCREF(Py_None);
    return Py_None;
}

/* The key bytes of a reader's call, at most WINDOW_KEY_MAX long; 0, or -1 with an error. */
static int row_key(PyObject *key, const char *what, char **kp, Py_ssize_t *key_len) {
    if (need_bytes(key, "key") || PyBytes_AsStringAndSize(key, kp, key_len) < 0) return -1;
    if (*key_len > WINDOW_KEY_MAX) {
        PyErr_Format(PyExc_ValueError, "key too long for a %s row", what);
        return -1;
    }
    return 0;
}

PyObject *txs_window_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 9, "window_items")) return NULL;
    PyObject *cursor = args[0], *kv_type = args[5], *decode = args[6], *staged = args[8];
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
    if (row_key(args[1], "window", &kp, &key_len) < 0) return NULL;
    allocfunc alloc = kv_allocator(kv_type);
    if (alloc == NULL) return NULL;
    if (decode != Py_None && !PyCallable_Check(decode)) {
        PyErr_SetString(PyExc_TypeError, "decode must be None or callable");
        return NULL;
    }
    if (staged != Py_None && !PyList_Check(staged)) {
        PyErr_SetString(PyExc_TypeError, "staged must be None or a list");
        return NULL;
    }
    /* the bounds: lo = key || L(from) || I(0), hi = key || L(to) || I(INT_MAX) */
    Py_ssize_t row_len = key_len + 12;
    char hp[WINDOW_KEY_MAX + 12];
    memcpy(hp, kp, (size_t)key_len);
    put_be64(hp + key_len, t_from);
    memset(hp + key_len + 8, 0, 4);
    PyObject *lo = PyBytes_FromStringAndSize(hp, row_len);
    put_be64(hp + key_len, t_to);
    hp[key_len + 8] = 0x7f;
    memset(hp + key_len + 9, 0xff, 3);

    struct rowscan s = {NULL, NULL, NULL, NULL, hp, row_len, limit, 0};
    struct wctx w = {NULL, kv_type, decode, alloc, key_len, row_len, limit};
    Py_ssize_t si = 0; /* the next staged row */
    int same = 0;
    int r = scan_open(&s, cursor, lo);
    if (r >= 0) w.out = PyList_New(0);
    if (w.out == NULL) r = -1;
    PyObject *key;
    char *k, *v;
    Py_ssize_t kn, vn;
    while (r >= 0 && (r = scan_key(&s, r, &key, &k, &kn)) == 1) {
        r = merge_staged(&w, staged, &si, k, kn, &same);
        if (r != 0 || same) { /* the general path, an error, or a staged row replaced it */
            Py_DECREF(key);
            if (r) break;
            same = 0;
        } else {
            PyObject *stored = scan_value(&s, key, k, kn, sealed, &v, &vn);
            long long start = get_be64(k + key_len);
            Py_DECREF(key);
            if (stored == NULL) {
                r = -1;
                break;
            }
            r = append_item(&w, start, v, vn, sealed ? NULL : stored);
            Py_DECREF(stored);
            if (r) break;
        }
        r = scan_next(&s);
    }
    if (r == 2) r = 1; /* skipped too many rows: the general path */
    if (r == 0) r = merge_staged(&w, staged, &si, NULL, 0, &same); /* staged rows after the last */
    scan_close(&s);
    return scan_result(w.out, r);
}

/* session_items(cursor, key, end_from, start_to, limit, kv_type, make, key_obj, decode, sealed)
 *     -> list | None
 *
 * window_items for a session store's single-key search: the rows between
 * key || L(end_from) || L(0) and key || L(MAX) || L(start_to), each key || L(end) || L(start),
 * whose start is at most start_to (a row past it is skipped unread; more than `limit` skipped
 * rows, of this key or others, hand over to the general path as window_items does); each becomes
 * kv_type(make(key_obj, start, end), value). No staged rows: the caller merges those. */
PyObject *txs_session_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (want_args(nargs, 10, "session_items")) return NULL;
    PyObject *cursor = args[0], *kv_type = args[5], *make = args[6], *key_obj = args[7];
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
    if (row_key(args[1], "session", &kp, &key_len) < 0) return NULL;
    allocfunc alloc = kv_allocator(kv_type);
    if (alloc == NULL) return NULL;
    if (!PyCallable_Check(make) || (decode != Py_None && !PyCallable_Check(decode))) {
        PyErr_SetString(PyExc_TypeError, "make must be callable, decode None or callable");
        return NULL;
    }
    Py_ssize_t row_len = key_len + 16;
    char hp[WINDOW_KEY_MAX + 16];
    memcpy(hp, kp, (size_t)key_len);
    put_be64(hp + key_len, end_from);
    memset(hp + key_len + 8, 0, 8);
    PyObject *lo = PyBytes_FromStringAndSize(hp, row_len);
    put_be64(hp + key_len, 0x7fffffffffffffffLL);
    put_be64(hp + key_len + 8, start_to);

    struct rowscan s = {NULL, NULL, NULL, NULL, hp, row_len, limit, 0};
    struct wctx w = {NULL, kv_type, decode, alloc, key_len, row_len, limit};
    int r = scan_open(&s, cursor, lo);
    if (r >= 0) w.out = PyList_New(0);
    if (w.out == NULL) r = -1;
    PyObject *key;
    char *k, *v;
    Py_ssize_t kn, vn;
    while (r >= 0 && (r = scan_key(&s, r, &key, &k, &kn)) == 1) {
        long long end = get_be64(k + key_len), start = get_be64(k + key_len + 8);
        r = 0;
        if (start <= start_to) {
            PyObject *stored = scan_value(&s, key, k, kn, sealed, &v, &vn);
            if (stored == NULL) {
                Py_DECREF(key);
                r = -1;
                break;
            }
            PyObject *ps = PyLong_FromLongLong(start), *pe = PyLong_FromLongLong(end);
            PyObject *kobj = ps == NULL || pe == NULL ? NULL : PyObject_CallFunctionObjArgs(make, key_obj, ps, pe, NULL);
            Py_XDECREF(ps);
            Py_XDECREF(pe);
            r = append_pair(&w, kobj, v, vn, sealed ? NULL : stored);
            Py_DECREF(stored);
        } else if (++s.skipped > limit) { /* a session starting too late: skipped, a few */
            r = 1;
        }
        Py_DECREF(key);
        if (r) break;
        r = scan_next(&s);
    }
    if (r == 2) r = 1;
    scan_close(&s);
    return scan_result(w.out, r);
}


int txs_window_reader_init(void) {
    str_set_range = PyUnicode_InternFromString("set_range");
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    str_next = PyUnicode_InternFromString("next");
    return str_set_range == NULL || str_key == NULL || str_value == NULL || str_next == NULL ? -1 : 0;
}
