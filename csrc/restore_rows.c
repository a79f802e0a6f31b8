/*
 * txstore._checksums.restore_rows: the rows one restore chunk of a key-value changelog writes,
 * in one C call (docs/performance.md, "Restore in one C pass").
 *
 * Input: the chunk's columns as the changelog decodes them (keys, values with None for a
 * tombstone, record timestamps, serialized record headers), the store's value format and
 * whether the partition seals its values with a CRC32C trailer. Output: (keys, stored,
 * deletes), the last record of each key only (the changelog's order decides: a later record
 * wins), sorted by key (unsigned bytewise, a shorter prefix first: LMDB's default order):
 *
 *   keys    - the keys whose last record is a value, sorted;
 *   stored  - their stored values, each converted from the record (Kafka's record
 *             converters: [ts 8 BE][value] for TIMESTAMPED, [varint hsize][headers][ts 8 BE]
 *             [value] for HEADERS, [varint hsize][headers][value] for PLAIN_HEADERS, the value
 *             for PLAIN) and, when sealing, followed by LE32(crc32c(key || converted value))
 *             (docs/formats.md, "Entry checksums");
 *   deletes - the keys whose last record is a tombstone, sorted.
 *
 * The key objects are the input's (no copy); one bytes object per live key is made, nothing
 * per overwritten record, and no tuple (LMDB's putmulti takes zip(keys, stored), which reuses
 * one): a tuple per row cost its allocation and, above all, the garbage collector's passes
 * that 100,000 container allocations per chunk set off. Sorting: an LSD radix sort of (first
 * 8 key bytes as a big-endian integer, record index), skipping the byte positions where every
 * key agrees, then each run of equal 8-byte prefixes ordered by the rest of the key and the
 * index.
 *
 * Every item of every column is checked (keys: bytes of 1 to max_key bytes; values: bytes or
 * None; timestamps: int in the signed 64-bit range, when the format has one; headers: bytes,
 * when the format has them). Anything else raises TypeError, ValueError or OverflowError and
 * nothing is returned: the Python caller then takes the checked path, which raises the typed
 * error naming the item.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checksums.h"
#include "restore_rows.h"

typedef struct {
    const char **k;
    Py_ssize_t *len;
} keys_t;

static keys_t g_keys; /* for qsort's comparator; set and used with the GIL held */

static int cmp_full(const item_t *a, const item_t *b) {
    const char *ka = g_keys.k[a->idx], *kb = g_keys.k[b->idx];
    Py_ssize_t la = g_keys.len[a->idx], lb = g_keys.len[b->idx];
    int r = memcmp(ka, kb, (size_t)(la < lb ? la : lb));
    if (r) return r;
    if (la != lb) return la < lb ? -1 : 1;
    return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

static int cmp_qsort(const void *a, const void *b) { return cmp_full((const item_t *)a, (const item_t *)b); }

/* Whether sorted items a and b hold the same key (the prefixes first: no key bytes read when
 * they differ). */
static int same_key(const item_t *a, const item_t *b) {
    uint32_t i = a->idx, j = b->idx;
    return a->pre == b->pre && g_keys.len[i] == g_keys.len[j] &&
           (g_keys.len[i] <= 8 || memcmp(g_keys.k[i] + 8, g_keys.k[j] + 8, (size_t)g_keys.len[i] - 8) == 0);
}

/* Stable LSD radix sort of a[0:n] by .pre (tmp: scratch of n items). */
static void radix_sort(item_t *a, item_t *tmp, size_t n) {
    size_t (*count)[256] = calloc(8, sizeof *count);
    if (count == NULL) { /* out of memory: the comparison sort gives the same order */
        qsort(a, n, sizeof *a, cmp_qsort);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t p = a[i].pre;
        for (int b = 0; b < 8; b++) count[b][(p >> (8 * b)) & 0xff]++;
    }
    item_t *src = a, *dst = tmp;
    for (int b = 0; b < 8; b++) {
        if (count[b][(src[0].pre >> (8 * b)) & 0xff] == n) continue; /* every key agrees here */
        size_t pos = 0;
        for (int d = 0; d < 256; d++) {
            size_t c = count[b][d];
            count[b][d] = pos;
            pos += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[b][(src[i].pre >> (8 * b)) & 0xff]++] = src[i];
        item_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, n * sizeof *a);
    free(count);
}

/* Order each run of equal prefixes by the whole key, then the index. */
static void sort_runs(item_t *a, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && a[j].pre == a[i].pre) j++;
        if (j - i > 1) {
            size_t m = i + 1;
            while (m < j && cmp_full(&a[m - 1], &a[m]) < 0) m++;
            if (m < j) qsort(a + i, j - i, sizeof *a, cmp_qsort); /* not already in order */
        }
        i = j;
    }
}

static PyObject *item_at(PyObject *seq, Py_ssize_t i) {
    return PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i); /* borrowed */
}

static int column_ok(PyObject *seq, Py_ssize_t n, const char *what) {
    if (!PyList_Check(seq) && !PyTuple_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list or a tuple", what);
        return 0;
    }
    Py_ssize_t m = PyList_Check(seq) ? PyList_Size(seq) : PyTuple_Size(seq);
    if (m != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd items, keys %zd", what, m, n);
        return 0;
    }
    return 1;
}

/* Kafka's zig-zag varint of a non-negative int32 n, into out; returns its size. */
static size_t put_varint(char *out, uint32_t n) {
    uint64_t u = (uint64_t)n << 1;
    size_t i = 0;
    while (u > 0x7f) {
        out[i++] = (char)((u & 0x7f) | 0x80);
        u >>= 7;
    }
    out[i++] = (char)u;
    return i;
}

static void put_be64(char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int b = 7; b >= 0; b--) {
        p[b] = (char)(u & 0xff);
        u >>= 8;
    }
}

Py_ssize_t txs_stored_size(int fmt, Py_ssize_t vn, Py_ssize_t hn, int seal) {
    Py_ssize_t size = vn + (seal ? 4 : 0);
    if (fmt == F_HEADERS || fmt == F_PLAIN_HEADERS) {
        if (hn > 0x7fffffff) {
            PyErr_SetString(PyExc_OverflowError, "headers longer than a varint can say");
            return -1;
        }
        char hsize[8];
        size += (Py_ssize_t)put_varint(hsize, (uint32_t)hn) + hn;
    }
    if (fmt == F_HEADERS || fmt == F_TIMESTAMPED) size += 8;
    return size;
}

void txs_write_stored(char *o, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn, int fmt, int64_t ts,
                      const char *h, Py_ssize_t hn, int seal) {
    char *p = o;
    if (fmt == F_HEADERS || fmt == F_PLAIN_HEADERS) {
        p += put_varint(p, (uint32_t)hn);
        memcpy(p, h, (size_t)hn);
        p += hn;
    }
    if (fmt == F_HEADERS || fmt == F_TIMESTAMPED) {
        put_be64(p, ts);
        p += 8;
    }
    memcpy(p, v, (size_t)vn);
    p += vn;
    if (seal) txs_put_le32(p, txs_entry_crc(k, kn, o, (Py_ssize_t)(p - o)));
}

/* The stored value of a record (a new bytes object): value v (vn bytes) converted to format fmt
 * with timestamp ts and headers h (hn bytes), then, when sealing, the trailer over key k. */
static PyObject *stored_value(const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn, int fmt, int64_t ts,
                              const char *h, Py_ssize_t hn, int seal) {
    Py_ssize_t size = txs_stored_size(fmt, vn, hn, seal);
    if (size < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    txs_write_stored(PyBytes_AsString(out), k, kn, v, vn, fmt, ts, h, hn, seal);
    return out;
}

int txs_scratch_alloc(scratch_t *s, Py_ssize_t n, int has_ts, int has_h) {
    size_t m = n > 0 ? (size_t)n : 1;
    s->items = PyMem_Malloc(m * sizeof *s->items);
    s->tmp = PyMem_Malloc(m * sizeof *s->tmp);
    s->k = PyMem_Malloc(m * sizeof *s->k);
    s->v = PyMem_Malloc(m * sizeof *s->v);
    s->len = PyMem_Malloc(m * sizeof *s->len);
    s->vlen = PyMem_Malloc(m * sizeof *s->vlen);
    if (has_ts) s->ts = PyMem_Malloc(m * sizeof *s->ts);
    if (has_h) {
        s->h = PyMem_Malloc(m * sizeof *s->h);
        s->hlen = PyMem_Malloc(m * sizeof *s->hlen);
    }
    if (s->items == NULL || s->tmp == NULL || s->k == NULL || s->v == NULL || s->len == NULL || s->vlen == NULL ||
        (has_ts && s->ts == NULL) || (has_h && (s->h == NULL || s->hlen == NULL))) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

void txs_scratch_free(scratch_t *s) {
    PyMem_Free(s->items);
    PyMem_Free(s->tmp);
    PyMem_Free(s->k);
    PyMem_Free(s->v);
    PyMem_Free(s->h);
    PyMem_Free(s->len);
    PyMem_Free(s->vlen);
    PyMem_Free(s->hlen);
    PyMem_Free(s->ts);
}

/* Check every item; fill the sort items, key pointers and timestamps. 0 on error. */
static int load(scratch_t *s, PyObject *keys, PyObject *values, PyObject *stamps, PyObject *headers, Py_ssize_t n,
                int fmt, Py_ssize_t max_key) {
    int has_ts = fmt == F_HEADERS || fmt == F_TIMESTAMPED;
    int has_h = fmt == F_HEADERS || fmt == F_PLAIN_HEADERS;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GetItem(keys, i);
        if (key == NULL) return 0;
        if (!PyBytes_CheckExact(key)) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return 0;
        }
        char *kp;
        Py_ssize_t kn;
        if (PyBytes_AsStringAndSize(key, &kp, &kn) < 0) return 0;
        if (!txs_load_key(s, i, kp, kn, max_key)) return 0;
        PyObject *v = PyList_GetItem(values, i);
        if (v == NULL) return 0;
        s->items[i].dead = v == Py_None;
        if (v != Py_None) {
            if (!PyBytes_CheckExact(v)) {
                PyErr_SetString(PyExc_TypeError, "values must be bytes or None");
                return 0;
            }
            char *vp;
            if (PyBytes_AsStringAndSize(v, &vp, &s->vlen[i]) < 0) return 0;
            s->v[i] = vp;
        }
        if (has_ts) {
            PyObject *t = item_at(stamps, i);
            if (t == NULL) return 0;
            if (!PyLong_CheckExact(t)) {
                PyErr_SetString(PyExc_TypeError, "timestamps must be int");
                return 0;
            }
            long long x = PyLong_AsLongLong(t);
            if (x == -1 && PyErr_Occurred()) return 0;
            s->ts[i] = (int64_t)x;
        }
        if (has_h) {
            PyObject *h = item_at(headers, i);
            if (h == NULL) return 0;
            if (!PyBytes_CheckExact(h)) {
                PyErr_SetString(PyExc_TypeError, "headers must be bytes");
                return 0;
            }
            char *hp;
            if (PyBytes_AsStringAndSize(h, &hp, &s->hlen[i]) < 0) return 0;
            s->h[i] = hp;
        }
    }
    return 1;
}

/* Keys are read in sorted order, so all over memory: the key and value objects a few items
 * ahead are prefetched. */
PyObject *txs_emit_lists(scratch_t *s, PyObject *keys, Py_ssize_t n, Py_ssize_t nput, Py_ssize_t ndel, int fmt,
                         int seal) {
    item_t *it = s->items;
    PyObject *out_keys = PyList_New(nput), *out_values = PyList_New(nput), *dels = PyList_New(ndel);
    if (out_keys == NULL || out_values == NULL || dels == NULL) goto fail;
    Py_ssize_t ip = 0, id = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        txs_prefetch_ahead(s, i, n);
        uint32_t idx = it[i].idx;
        if (idx == UINT32_MAX) continue;
        PyObject *key;
        if (keys != NULL) {
            key = PyList_GetItem(keys, idx);
            Py_INCREF(key);
        } else { /* restore_frames: the key's bytes are in the changelog's buffer */
            key = PyBytes_FromStringAndSize(s->k[idx], s->len[idx]);
            if (key == NULL) goto fail;
        }
        if (it[i].dead) {
            PyList_SetItem(dels, id++, key); /* steals */
            continue;
        }
        PyObject *sv = stored_value(s->k[idx], s->len[idx], s->v[idx], s->vlen[idx], fmt, s->ts ? s->ts[idx] : 0,
                                    s->h ? s->h[idx] : NULL, s->hlen ? s->hlen[idx] : 0, seal);
        if (sv == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyList_SetItem(out_keys, ip, key); /* steal */
        PyList_SetItem(out_values, ip++, sv);
    }
    PyObject *res = PyTuple_New(3);
    if (res == NULL) goto fail;
    PyTuple_SetItem(res, 0, out_keys);
    PyTuple_SetItem(res, 1, out_values);
    PyTuple_SetItem(res, 2, dels);
    return res;
fail:
    Py_XDECREF(out_keys);
    Py_XDECREF(out_values);
    Py_XDECREF(dels);
    return NULL;
}

void txs_sort_items(scratch_t *s, Py_ssize_t n, Py_ssize_t *nput, Py_ssize_t *ndel) {
    g_keys.k = s->k;
    g_keys.len = s->len;
    if (n > 1) {
        radix_sort(s->items, s->tmp, (size_t)n);
        sort_runs(s->items, (size_t)n);
    }
    item_t *it = s->items;
    *nput = *ndel = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* the winner of a group is its last item */
        if (i + 1 < n && same_key(&it[i], &it[i + 1])) {
            it[i].idx = UINT32_MAX; /* overwritten */
            continue;
        }
        if (it[i].dead) ++*ndel;
        else ++*nput;
    }
    g_keys.k = NULL;
    g_keys.len = NULL;
}

PyObject *txs_restore_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "restore_rows(keys, values, timestamps, headers, fmt, seal, max_key) takes 7 arguments");
        return NULL;
    }
    PyObject *keys = args[0], *values = args[1], *stamps = args[2], *headers = args[3];
    long fmt = PyLong_AsLong(args[4]);
    if (fmt == -1 && PyErr_Occurred()) return NULL;
    int seal = PyObject_IsTrue(args[5]);
    if (seal < 0) return NULL;
    Py_ssize_t max_key = PyLong_AsSsize_t(args[6]);
    if (max_key == -1 && PyErr_Occurred()) return NULL;
    if (fmt < F_PLAIN || fmt > F_PLAIN_HEADERS) {
        PyErr_SetString(PyExc_ValueError, "unknown value format");
        return NULL;
    }
    if (!PyList_Check(keys) || !PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "keys and values must be lists");
        return NULL;
    }
    Py_ssize_t n = PyList_Size(keys);
    if (!column_ok(values, n, "values")) return NULL;
    int has_ts = fmt == F_HEADERS || fmt == F_TIMESTAMPED;
    int has_h = fmt == F_HEADERS || fmt == F_PLAIN_HEADERS;
    if ((has_ts && !column_ok(stamps, n, "timestamps")) || (has_h && !column_ok(headers, n, "headers"))) return NULL;
    if (n > 0xffffffffL) {
        PyErr_SetString(PyExc_ValueError, "too many records for one chunk");
        return NULL;
    }
    scratch_t s;
    memset(&s, 0, sizeof s);
    PyObject *res = NULL;
    if (!txs_scratch_alloc(&s, n, has_ts, has_h)) {
        /* MemoryError set */
    } else if (load(&s, keys, values, stamps, headers, n, (int)fmt, max_key)) {
        Py_ssize_t nput, ndel;
        txs_sort_items(&s, n, &nput, &ndel);
        res = txs_emit_lists(&s, keys, n, nput, ndel, (int)fmt, seal);
    }
    txs_scratch_free(&s);
    return res;
}
