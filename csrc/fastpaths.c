/*
 * txstore._fastpaths: single-item codec functions as C builtins (CPython's stable ABI), for the
 * calls a store makes once per value or key: the stored-value conversions that value_converter
 * hands out, the segment id function of segment_id_function, and the window and session key
 * codecs (window_key, extract_window_key, session_key, extract_session_key; txstore.codecs).
 *
 * Why not the cffi module: one cffi call costs 400-900 ns here, several times the whole Python
 * function. A METH_O builtin is called in ~15 ns, less than a Python function call, so a C
 * fast path beats the pure-Python one-liners a store would otherwise write by hand
 * (perf/bench_codecs.py, figure codec_single_slowdown_max).
 *
 * Each builtin handles well-formed input (exact bytes; a one-byte headers size; a timestamp
 * that is an int in range) and passes anything else to the Python function it stands in
 * front of, which returns the same result the slow way or raises the typed error: the C code
 * never decides an error itself.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { F_PLAIN = 0, F_TIMESTAMPED = 1, F_HEADERS = 2, F_PLAIN_HEADERS = 3 };

static const char NO_TS[8] = {'\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff'};

static PyObject *call_fallback(PyObject *fallback, PyObject *arg) {
    return PyObject_CallFunctionObjArgs(fallback, arg, NULL);
}

/* self: (src * 4 + dst, fallback). */
static PyObject *convert(PyObject *self, PyObject *raw) {
    if (raw == Py_None) Py_RETURN_NONE;
    PyObject *code_obj = PyTuple_GetItem(self, 0), *fallback = PyTuple_GetItem(self, 1);
    if (code_obj == NULL || fallback == NULL) return NULL;
    if (!PyBytes_CheckExact(raw)) return call_fallback(fallback, raw);
    long code = PyLong_AsLong(code_obj);
    if (code == -1 && PyErr_Occurred()) return NULL;
    int src = (int)(code >> 2), dst = (int)(code & 3);
    char *p;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(raw, &p, &n) < 0) return NULL;
    const char *hv = NULL, *ts = NULL, *body = p; /* hv: [varint hsize][headers] */
    Py_ssize_t hvn = 0, bn = n;
    if (src == F_TIMESTAMPED) {
        if (n < 8) return call_fallback(fallback, raw);
        ts = p;
        body = p + 8;
        bn = n - 8;
    } else if (src == F_HEADERS || src == F_PLAIN_HEADERS) {
        if (n < 1 || (p[0] & 0x81)) return call_fallback(fallback, raw); /* a longer or odd size */
        hvn = (Py_ssize_t)(((unsigned char)p[0]) >> 1) + 1;
        Py_ssize_t need = hvn + (src == F_HEADERS ? 8 : 0);
        if (n < need) return call_fallback(fallback, raw);
        hv = p;
        if (src == F_HEADERS) ts = p + hvn;
        body = p + need;
        bn = n - need;
    }
    if (src == dst) { /* checked, unchanged: the same object, as the Python paths return */
        Py_INCREF(raw);
        return raw;
    }
    int d_h = dst == F_HEADERS || dst == F_PLAIN_HEADERS, d_ts = dst == F_HEADERS || dst == F_TIMESTAMPED;
    Py_ssize_t size = (d_h ? (hv ? hvn : 1) : 0) + (d_ts ? 8 : 0) + bn;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *o = PyBytes_AsString(out);
    if (o == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    if (d_h) {
        if (hv) {
            memcpy(o, hv, (size_t)hvn);
            o += hvn;
        } else {
            *o++ = 0; /* empty headers */
        }
    }
    if (d_ts) {
        memcpy(o, ts ? ts : NO_TS, 8);
        o += 8;
    }
    memcpy(o, body, (size_t)bn);
    return out;
}

/* self: (interval, small, fallback): timestamp // interval for 0 <= it and a result below
 * small (a valid segment of a valid long); the fallback otherwise. */
static PyObject *segment_id(PyObject *self, PyObject *ts) {
    PyObject *iv = PyTuple_GetItem(self, 0), *small = PyTuple_GetItem(self, 1), *fallback = PyTuple_GetItem(self, 2);
    if (iv == NULL || small == NULL || fallback == NULL) return NULL;
    if (PyLong_CheckExact(ts)) {
        int overflow = 0;
        long long t = PyLong_AsLongLongAndOverflow(ts, &overflow);
        if (t == -1 && PyErr_Occurred()) return NULL;
        long long interval = PyLong_AsLongLong(iv), limit = PyLong_AsLongLong(small);
        if ((interval == -1 || limit == -1) && PyErr_Occurred()) return NULL;
        if (!overflow && t >= 0 && interval > 0) {
            long long sid = t / interval;
            if (sid < limit) return PyLong_FromLongLong(sid);
        }
    }
    return call_fallback(fallback, ts);
}

static void put_be(char *p, unsigned long long u, int n) {
    for (int b = n - 1; b >= 0; b--) {
        p[b] = (char)(u & 0xff);
        u >>= 8;
    }
}

static long long get_be64(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned long long u = 0;
    for (int b = 0; b < 8; b++) u = u << 8 | p[b];
    return (long long)u;
}

static long get_be32(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned long u = (unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 | (unsigned long)p[2] << 8 | p[3];
    return (long)(int32_t)u;
}

/* fallback(*args, **kwargs) from a vectorcall's arguments. */
static PyObject *slow_call(PyObject *fallback, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *tuple = PyTuple_New(nargs), *kw = NULL, *res = NULL;
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SetItem(tuple, i, args[i]);
    }
    if (kwnames != NULL && PyTuple_Size(kwnames) > 0) {
        kw = PyDict_New();
        if (kw == NULL) goto done;
        for (Py_ssize_t i = 0; i < PyTuple_Size(kwnames); i++) {
            if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[nargs + i]) < 0) goto done;
        }
    }
    res = PyObject_Call(fallback, tuple, kw);
done:
    Py_DECREF(tuple);
    Py_XDECREF(kw);
    return res;
}

/* An exact int in [lo, hi] into *out; 0 when it is anything else (no error set). */
static int small_int(PyObject *o, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (overflow || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* key || suffix: a new bytes object with room for `extra` bytes after the key, or NULL. */
static PyObject *key_plus(PyObject *key, Py_ssize_t extra, char **tail) {
    char *k;
    Py_ssize_t kn;
    if (PyBytes_AsStringAndSize(key, &k, &kn) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, kn + extra);
    if (out == NULL) return NULL;
    char *o = PyBytes_AsString(out);
    memcpy(o, k, (size_t)kn);
    *tail = o + kn;
    return out;
}

#define LMIN (-9223372036854775807LL - 1)
#define LMAX 9223372036854775807LL

/* self: the Python window_key. window_key(key, timestamp, seq=0) -> key || BE64 ts || BE32 seq */
static PyObject *window_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    long long ts, seq = 0;
    if ((kwnames == NULL || PyTuple_Size(kwnames) == 0) && (nargs == 2 || nargs == 3) &&
        PyBytes_CheckExact(args[0]) && small_int(args[1], LMIN, LMAX, &ts) &&
        (nargs == 2 || small_int(args[2], -2147483647LL - 1, 2147483647LL, &seq))) {
        char *t;
        PyObject *out = key_plus(args[0], 12, &t);
        if (out == NULL) return NULL;
        put_be(t, (unsigned long long)ts, 8);
        put_be(t + 8, (unsigned long long)seq, 4);
        return out;
    }
    return slow_call(self, args, nargs, kwnames);
}

/* self: the Python session_key. session_key(key, start, end) -> key || BE64 end || BE64 start */
static PyObject *session_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    long long start, end;
    if ((kwnames == NULL || PyTuple_Size(kwnames) == 0) && nargs == 3 && PyBytes_CheckExact(args[0]) &&
        small_int(args[1], LMIN, LMAX, &start) && small_int(args[2], LMIN, LMAX, &end)) {
        char *t;
        PyObject *out = key_plus(args[0], 16, &t);
        if (out == NULL) return NULL;
        put_be(t, (unsigned long long)end, 8);
        put_be(t + 8, (unsigned long long)start, 8);
        return out;
    }
    return slow_call(self, args, nargs, kwnames);
}

/* (raw[:n], a, b) with n = len(raw) - suffix; a, b read by the caller's layout. */
static PyObject *split_key(PyObject *self, PyObject *raw, int session) {
    char *p;
    Py_ssize_t n;
    Py_ssize_t suffix = session ? 16 : 12;
    if (!PyBytes_CheckExact(raw) || PyBytes_AsStringAndSize(raw, &p, &n) < 0 || n < suffix) {
        PyErr_Clear();
        return call_fallback(self, raw);
    }
    n -= suffix;
    PyObject *key = PyBytes_FromStringAndSize(p, n), *a, *b;
    if (session) { /* [key][end][start] -> (key, start, end) */
        a = PyLong_FromLongLong(get_be64(p + n + 8));
        b = PyLong_FromLongLong(get_be64(p + n));
    } else { /* [key][ts][seq] -> (key, ts, seq) */
        a = PyLong_FromLongLong(get_be64(p + n));
        b = PyLong_FromLong(get_be32(p + n + 8));
    }
    PyObject *res = (key && a && b) ? PyTuple_New(3) : NULL;
    if (res == NULL) {
        Py_XDECREF(key);
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    PyTuple_SetItem(res, 0, key);
    PyTuple_SetItem(res, 1, a);
    PyTuple_SetItem(res, 2, b);
    return res;
}

static PyObject *extract_window_key(PyObject *self, PyObject *raw) { return split_key(self, raw, 0); }

static PyObject *extract_session_key(PyObject *self, PyObject *raw) { return split_key(self, raw, 1); }

/* ---- value codecs: self is (fallback, PLAIN, TIMESTAMPED, HEADERS, PLAIN_HEADERS) ---- */

/* The format code of fmt (one of the ValueFormat members in self, by identity), else -1. */
static int fmt_code(PyObject *self, PyObject *fmt) {
    for (int i = 0; i < 4; i++) {
        if (PyTuple_GetItem(self, i + 1) == fmt) return i;
    }
    return -1;
}

static PyObject *fallback_of(PyObject *self) { return PyTuple_GetItem(self, 0); }

/* Kafka's zig-zag varint of the int32 v into out (5 bytes of room); returns its size. */
static Py_ssize_t put_zigzag(char *out, long long v) {
    unsigned long long u = (unsigned long long)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31));
    Py_ssize_t i = 0;
    while (u > 0x7f) {
        out[i++] = (char)((u & 0x7f) | 0x80);
        u >>= 7;
    }
    out[i++] = (char)u;
    return i;
}

/* encode_varint(value) */
static PyObject *encode_varint(PyObject *self, PyObject *value) {
    long long v;
    if (!small_int(value, -2147483647LL - 1, 2147483647LL, &v)) return call_fallback(fallback_of(self), value);
    char out[5];
    return PyBytes_FromStringAndSize(out, put_zigzag(out, v));
}

/* decode_varint(buf, offset=0): the one- to three-byte varints of bytes at a valid offset */
static PyObject *decode_varint(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    long long off = 0;
    char *p;
    Py_ssize_t n;
    if ((kwnames == NULL || PyTuple_Size(kwnames) == 0) && (nargs == 1 || nargs == 2) &&
        PyBytes_CheckExact(args[0]) && (nargs == 1 || small_int(args[1], 0, PY_SSIZE_T_MAX, &off)) &&
        PyBytes_AsStringAndSize(args[0], &p, &n) == 0) {
        const unsigned char *b = (const unsigned char *)p + off;
        Py_ssize_t left = n - (Py_ssize_t)off;
        unsigned long u = 0;
        int k = 0;
        if (left >= 1 && b[0] < 0x80) {
            u = b[0];
            k = 1;
        } else if (left >= 2 && b[1] < 0x80) {
            u = (b[0] & 0x7fUL) | (unsigned long)b[1] << 7;
            k = 2;
        } else if (left >= 3 && b[1] >= 0x80 && b[2] < 0x80) {
            u = (b[0] & 0x7fUL) | (b[1] & 0x7fUL) << 7 | (unsigned long)b[2] << 14;
            k = 3;
        }
        if (k) {
            long value = (long)(u >> 1) ^ -(long)(u & 1);
            return Py_BuildValue("(lL)", value, off + k);
        }
    }
    PyErr_Clear();
    return slow_call(fallback_of(self), args, nargs, kwnames);
}

/* split_value(fmt, raw) -> (value, timestamp or None, headers) */
static PyObject *split_value(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    char *p;
    Py_ssize_t n;
    int f = -1;
    if ((kwnames == NULL || PyTuple_Size(kwnames) == 0) && nargs == 2 && PyBytes_CheckExact(args[1]) &&
        (f = fmt_code(self, args[0])) >= 0 && PyBytes_AsStringAndSize(args[1], &p, &n) == 0) {
        if (f == F_PLAIN) return Py_BuildValue("(OOy#)", args[1], Py_None, "", (Py_ssize_t)0);
        if (f == F_TIMESTAMPED && n >= 8)
            return Py_BuildValue("(y#Ly#)", p + 8, n - 8, get_be64(p), "", (Py_ssize_t)0);
        if ((f == F_HEADERS || f == F_PLAIN_HEADERS) && n >= 1 && !(p[0] & 0x81)) {
            Py_ssize_t end = (((unsigned char)p[0]) >> 1) + 1;
            if (f == F_HEADERS && n >= end + 8)
                return Py_BuildValue("(y#Ly#)", p + end + 8, n - end - 8, get_be64(p + end), p + 1, end - 1);
            if (f == F_PLAIN_HEADERS && n >= end)
                return Py_BuildValue("(y#Oy#)", p + end, n - end, Py_None, p + 1, end - 1);
        }
    }
    PyErr_Clear();
    return slow_call(fallback_of(self), args, nargs, kwnames);
}

/* The stored value of format f from exact bytes value, ts and exact bytes headers. */
static PyObject *pack(int f, PyObject *value, long long ts, PyObject *headers) {
    char *v, *h = NULL;
    Py_ssize_t vn, hn = 0;
    if (PyBytes_AsStringAndSize(value, &v, &vn) < 0) return NULL;
    if (f == F_PLAIN) {
        Py_INCREF(value);
        return value;
    }
    char hs[5];
    Py_ssize_t hsn = 0;
    if (f == F_HEADERS || f == F_PLAIN_HEADERS) {
        if (headers != NULL && PyBytes_AsStringAndSize(headers, &h, &hn) < 0) return NULL;
        hsn = put_zigzag(hs, hn); /* no headers (the default): empty ones */
    }
    Py_ssize_t tn = (f == F_HEADERS || f == F_TIMESTAMPED) ? 8 : 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, hsn + hn + tn + vn);
    if (out == NULL) return NULL;
    char *o = PyBytes_AsString(out);
    memcpy(o, hs, (size_t)hsn);
    o += hsn;
    if (hn) memcpy(o, h, (size_t)hn);
    o += hn;
    if (tn) put_be(o, (unsigned long long)ts, 8);
    memcpy(o + tn, v, (size_t)vn);
    return out;
}

/* pack_value(fmt, value, timestamp=-1, headers=b"") / record_to_value(fmt, value, timestamp,
 * headers), the latter (record = 1) with None for None. */
static PyObject *pack_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int record) {
    long long ts = -1;
    int f;
    if ((kwnames == NULL || PyTuple_Size(kwnames) == 0) && (record ? nargs == 4 : (nargs >= 2 && nargs <= 4))) {
        if (record && args[1] == Py_None) Py_RETURN_NONE;
        if ((f = fmt_code(self, args[0])) >= 0 && PyBytes_CheckExact(args[1]) &&
            (nargs < 3 || small_int(args[2], -9223372036854775807LL - 1, 9223372036854775807LL, &ts)) &&
            (nargs < 4 || (PyBytes_CheckExact(args[3]) && PyBytes_Size(args[3]) <= 0x3fffffff)))
            return pack(f, args[1], ts, nargs == 4 ? args[3] : NULL);
    }
    return slow_call(fallback_of(self), args, nargs, kwnames);
}

static PyObject *pack_value(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return pack_common(self, args, nargs, kwnames, 0);
}

static PyObject *record_to_value(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return pack_common(self, args, nargs, kwnames, 1);
}

static PyMethodDef value_defs[] = {
    {"encode_varint", encode_varint, METH_O, "encode_varint(value) -> bytes (see txstore.codecs.values)"},
    {"decode_varint", (PyCFunction)(void (*)(void))decode_varint, METH_FASTCALL | METH_KEYWORDS,
     "decode_varint(buf, offset=0) -> (value, next_offset) (see txstore.codecs.values)"},
    {"split_value", (PyCFunction)(void (*)(void))split_value, METH_FASTCALL | METH_KEYWORDS,
     "split_value(fmt, raw) -> (value, timestamp or None, headers) (see txstore.codecs.values)"},
    {"pack_value", (PyCFunction)(void (*)(void))pack_value, METH_FASTCALL | METH_KEYWORDS,
     "pack_value(fmt, value, timestamp=-1, headers=b'') -> bytes (see txstore.codecs.values)"},
    {"record_to_value", (PyCFunction)(void (*)(void))record_to_value, METH_FASTCALL | METH_KEYWORDS,
     "record_to_value(fmt, value, timestamp, headers) -> bytes or None (see txstore.codecs.records)"},
};

/* ---- decode_headers: self is (fallback, Headers, "pairs", EMPTY_HEADERS) ---- */

/* The (key, value) pairs of serialized headers whose sizes are all one-byte varints; NULL
 * without an error set when they are anything else (the Python function then decides). */
static PyObject *header_pairs(const unsigned char *p, Py_ssize_t n) {
    if (p[0] & 0x81) return NULL;
    Py_ssize_t count = p[0] >> 1, pos = 1;
    PyObject *items = PyList_New(count);
    if (items == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (pos >= n || (p[pos] & 0x81)) goto slow;
        Py_ssize_t end = pos + 1 + (p[pos] >> 1);
        if (end >= n) goto slow; /* the value's size byte must follow */
        PyObject *key = PyUnicode_DecodeUTF8((const char *)p + pos + 1, end - pos - 1, NULL), *value;
        if (key == NULL) goto slow;
        unsigned char b = p[end];
        if (b == 1) { /* varint -1: a null value */
            value = Py_None;
            Py_INCREF(value);
            pos = end + 1;
        } else if (!(b & 0x81) && end + 1 + (b >> 1) <= n) {
            value = PyBytes_FromStringAndSize((const char *)p + end + 1, b >> 1);
            pos = end + 1 + (b >> 1);
        } else {
            Py_DECREF(key);
            goto slow;
        }
        PyObject *pair = value == NULL ? NULL : PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_XDECREF(value);
            goto slow;
        }
        PyTuple_SetItem(pair, 0, key);
        PyTuple_SetItem(pair, 1, value);
        PyList_SetItem(items, i, pair);
    }
    if (pos == n) return items;
slow:
    Py_DECREF(items);
    PyErr_Clear();
    return NULL;
}

static PyObject *decode_headers(PyObject *self, PyObject *buf) {
    char *p;
    Py_ssize_t n;
    PyObject *fallback = PyTuple_GetItem(self, 0);
    if (fallback == NULL) return NULL;
    if (PyBytes_CheckExact(buf) && PyBytes_AsStringAndSize(buf, &p, &n) == 0) {
        if (n == 0) {
            PyObject *empty = PyTuple_GetItem(self, 3);
            Py_XINCREF(empty);
            return empty;
        }
        PyObject *items = header_pairs((const unsigned char *)p, n);
        if (items != NULL) {
            PyObject *type = PyTuple_GetItem(self, 1);
            PyObject *h = PyType_GenericNew((PyTypeObject *)type, NULL, NULL);
            if (h == NULL || PyObject_SetAttr(h, PyTuple_GetItem(self, 2), items) < 0) {
                Py_XDECREF(h);
                h = NULL;
            }
            Py_DECREF(items);
            return h;
        }
    }
    PyErr_Clear();
    return call_fallback(fallback, buf);
}

static PyMethodDef headers_def = {"decode_headers", decode_headers, METH_O,
                                  "decode_headers(buf) -> Headers (see txstore.codecs.values)"};

static PyMethodDef convert_def = {"value_converter", convert, METH_O,
                                  "A stored-value conversion (see txstore.codecs.value_converter)"};
static PyMethodDef segment_def = {"segment_of", segment_id, METH_O,
                                  "The segment id of a timestamp (see txstore.codecs.segment_id_function)"};

static PyMethodDef key_defs[] = {
    {"window_key", (PyCFunction)(void (*)(void))window_key, METH_FASTCALL | METH_KEYWORDS,
     "window_key(key, timestamp, seq=0) -> key || ts || seq (see txstore.codecs.keys)"},
    {"extract_window_key", extract_window_key, METH_O,
     "extract_window_key(raw) -> (key, timestamp, seq) (see txstore.codecs.keys)"},
    {"session_key", (PyCFunction)(void (*)(void))session_key, METH_FASTCALL | METH_KEYWORDS,
     "session_key(key, start, end) -> key || end || start (see txstore.codecs.keys)"},
    {"extract_session_key", extract_session_key, METH_O,
     "extract_session_key(raw) -> (key, start, end) (see txstore.codecs.keys)"},
};

static PyObject *bind(PyMethodDef *def, PyObject *state) {
    if (!PyTuple_Check(state)) {
        PyErr_SetString(PyExc_TypeError, "state must be a tuple");
        return NULL;
    }
    return PyCFunction_NewEx(def, state, NULL);
}

static PyObject *py_converter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "converter(code, fallback) takes 2 arguments");
        return NULL;
    }
    long code = PyLong_AsLong(args[0]);
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (code < 0 || code > 15 || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_ValueError, "converter(code in 0..15, callable fallback)");
        return NULL;
    }
    PyObject *state = Py_BuildValue("(lO)", code, args[1]);
    if (state == NULL) return NULL;
    PyObject *fn = bind(&convert_def, state);
    Py_DECREF(state);
    return fn;
}

static PyObject *py_segment_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "segment_function(interval, small, fallback) takes 3 arguments");
        return NULL;
    }
    long long iv = PyLong_AsLongLong(args[0]), small = PyLong_AsLongLong(args[1]);
    if ((iv == -1 || small == -1) && PyErr_Occurred()) return NULL;
    if (iv <= 0 || small < 0 || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_ValueError, "segment_function(interval > 0, small >= 0, callable fallback)");
        return NULL;
    }
    PyObject *state = PyTuple_Pack(3, args[0], args[1], args[2]);
    if (state == NULL) return NULL;
    PyObject *fn = bind(&segment_def, state);
    Py_DECREF(state);
    return fn;
}

static PyObject *py_key_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "key_function(name, fallback)");
        return NULL;
    }
    for (size_t i = 0; i < sizeof key_defs / sizeof key_defs[0]; i++) {
        if (PyUnicode_CompareWithASCIIString(args[0], key_defs[i].ml_name) == 0)
            return PyCFunction_NewEx(&key_defs[i], args[1], NULL);
    }
    PyErr_SetString(PyExc_ValueError, "no such key function");
    return NULL;
}

static PyObject *py_value_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1]) || !PyTuple_Check(args[2]) ||
        PyTuple_Size(args[2]) != 4) {
        PyErr_SetString(PyExc_TypeError, "value_function(name, fallback, (PLAIN, TIMESTAMPED, HEADERS, PLAIN_HEADERS))");
        return NULL;
    }
    for (size_t i = 0; i < sizeof value_defs / sizeof value_defs[0]; i++) {
        if (PyUnicode_CompareWithASCIIString(args[0], value_defs[i].ml_name) == 0) {
            PyObject *f = args[2];
            PyObject *state = PyTuple_Pack(5, args[1], PyTuple_GetItem(f, 0), PyTuple_GetItem(f, 1),
                                           PyTuple_GetItem(f, 2), PyTuple_GetItem(f, 3));
            if (state == NULL) return NULL;
            PyObject *fn = PyCFunction_NewEx(&value_defs[i], state, NULL);
            Py_DECREF(state);
            return fn;
        }
    }
    PyErr_SetString(PyExc_ValueError, "no such value function");
    return NULL;
}

static PyObject *py_headers_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "headers_function(fallback, Headers, EMPTY_HEADERS)");
        return NULL;
    }
    PyObject *state = Py_BuildValue("(OOsO)", args[0], args[1], "pairs", args[2]);
    if (state == NULL) return NULL;
    PyObject *fn = PyCFunction_NewEx(&headers_def, state, NULL);
    Py_DECREF(state);
    return fn;
}

static PyMethodDef methods[] = {
    {"headers_function", (PyCFunction)(void (*)(void))py_headers_function, METH_FASTCALL,
     "headers_function(fallback, Headers, EMPTY_HEADERS) -> the C decode_headers"},
    {"value_function", (PyCFunction)(void (*)(void))py_value_function, METH_FASTCALL,
     "value_function(name, fallback, formats) -> the C value codec of that name"},
    {"key_function", (PyCFunction)(void (*)(void))py_key_function, METH_FASTCALL,
     "key_function(name, fallback) -> the C window or session key function of that name"},
    {"converter", (PyCFunction)(void (*)(void))py_converter, METH_FASTCALL,
     "converter(src * 4 + dst, fallback) -> the C conversion of stored values from format src to dst"},
    {"segment_function", (PyCFunction)(void (*)(void))py_segment_function, METH_FASTCALL,
     "segment_function(interval, small, fallback) -> the C segment id function"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "txstore._fastpaths", "Single-item codec fast paths (see csrc/fastpaths.c)", -1, methods,
    NULL, NULL, NULL, NULL,
};

extern PyMethodDef txcolumns_methods[]; /* csrc/columns.c */

PyMODINIT_FUNC PyInit__fastpaths(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddFunctions(m, txcolumns_methods) < 0) Py_CLEAR(m);
    return m;
}
