/*
 * txstore._checksums.restore_frames and restore_frames_run: restore_rows (csrc/restore_rows.c)
 * on changelog records read where the changelog's reader left them, in its read buffers,
 * without a bytes object per record (docs/performance.md, "Restore reading the changelog in
 * place").
 *
 * frames is a list of (buf, pos, end, n, has_headers, lo, hi) tuples, each the columns of one
 * stored batch (buf bytes, its timestamps column at pos, its body ending at end, n records,
 * with or without a headers column: csrc/changelog_columns.c) of which records [lo, hi) are
 * taken, in the list's order. The columns are checked as decode_columns checks them; a key of
 * 0 or more than max_key bytes raises ValueError like restore_rows (the caller decodes the
 * records and takes the checked path).
 *
 * restore_frames(frames, fmt, seal, max_key) -> restore_rows' (keys, stored, deletes), one new
 * key object per live key.
 *
 * restore_frames_run(frames, fmt, seal, max_key) -> bytes: the same rows as one sorted run of
 * csrc/restore_runs.c (what encode_run(*restore_frames(...)) gives), with no object per row:
 * the sorted restore's phase 1 (txstore.bytestores.restore_runs).
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "checksums.h"
#include "restore_rows.h"

typedef struct {
    const char *buf;
    Py_ssize_t p, end, n, lo, hi;
    int has_h;
} frame_t;

static int frame_arg(PyObject *t, frame_t *f) {
    if (!PyTuple_Check(t) || PyTuple_Size(t) != 7) {
        PyErr_SetString(PyExc_TypeError, "a frame must be a tuple (buf, pos, end, n, has_headers, lo, hi)");
        return 0;
    }
    PyObject *buf = PyTuple_GetItem(t, 0);
    if (!PyBytes_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "a frame's buf must be bytes");
        return 0;
    }
    Py_ssize_t v[6];
    for (int i = 0; i < 6; i++) {
        PyObject *o = PyTuple_GetItem(t, i + 1);
        if (!PyLong_Check(o)) {
            PyErr_SetString(PyExc_TypeError, "a frame's positions must be int");
            return 0;
        }
        v[i] = PyLong_AsSsize_t(o);
        if (v[i] == -1 && PyErr_Occurred()) return 0;
    }
    char *data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(buf, &data, &size) < 0) return 0;
    f->buf = data;
    f->p = v[0];
    f->end = v[1];
    f->n = v[2];
    f->has_h = v[3] != 0;
    f->lo = v[4];
    f->hi = v[5];
    if (f->end > size || f->end < 0) {
        PyErr_SetString(PyExc_ValueError, "batch columns do not add up to its length");
        return 0;
    }
    if (f->lo < 0 || f->lo > f->hi || f->hi > f->n) {
        PyErr_SetString(PyExc_ValueError, "record slice out of range");
        return 0;
    }
    return 1;
}

/* Fill the scratch from records [lo, hi) of frame f, at s index *at on. 0 on error. */
static int load_frame(scratch_t *s, const frame_t *f, Py_ssize_t *at, Py_ssize_t max_key) {
    uint64_t ksum, vsum, hsum;
    int tombstones;
    if (txs_column_sums(f->buf, f->p, f->end, f->n, f->has_h, 0, 0, &ksum, &vsum, &hsum, &tombstones, NULL) < 0)
        return 0;
    Py_ssize_t n = f->n;
    const char *ts = f->buf + f->p, *klens = ts + 8 * n, *vlens = klens + 4 * n;
    const char *hlens = vlens + 4 * n, *body = hlens + (f->has_h ? 4 * n : 0);
    const char *kp = body, *vp = body + ksum, *hp = body + ksum + vsum;
    Py_ssize_t j = *at;
    for (Py_ssize_t i = 0; i < f->hi; i++) {
        uint32_t kn = get_le32(klens + 4 * i), hn = f->has_h ? get_le32(hlens + 4 * i) : 0;
        int32_t vn = (int32_t)get_le32(vlens + 4 * i);
        if (i >= f->lo) {
            if (!txs_load_key(s, j, kp, (Py_ssize_t)kn, max_key)) return 0;
            s->items[j].dead = vn == -1;
            s->v[j] = vp;
            s->vlen[j] = vn == -1 ? 0 : vn;
            if (s->ts) {
                const char *t = ts + 8 * i;
                s->ts[j] = (int64_t)((uint64_t)get_le32(t) | (uint64_t)get_le32(t + 4) << 32);
            }
            if (s->h) {
                s->h[j] = hp;
                s->hlen[j] = hn;
            }
            j++;
        }
        kp += kn;
        if (vn > 0) vp += vn;
        hp += hn;
    }
    *at = j;
    return 1;
}

/* Parse restore_frames' four arguments, load every frame's records into s and sort them
 * (txs_sort_items); 0 with an exception set. */
static int frames_sorted(PyObject *const *args, Py_ssize_t nargs, const char *name, scratch_t *s, Py_ssize_t *n,
                         Py_ssize_t *nput, Py_ssize_t *ndel, int *fmt_out, int *seal_out) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "%s(frames, fmt, seal, max_key) takes 4 arguments", name);
        return 0;
    }
    PyObject *frames = args[0];
    long fmt = PyLong_AsLong(args[1]);
    if (fmt == -1 && PyErr_Occurred()) return 0;
    int seal = PyObject_IsTrue(args[2]);
    if (seal < 0) return 0;
    Py_ssize_t max_key = PyLong_AsSsize_t(args[3]);
    if (max_key == -1 && PyErr_Occurred()) return 0;
    if (fmt < F_PLAIN || fmt > F_PLAIN_HEADERS) {
        PyErr_SetString(PyExc_ValueError, "unknown value format");
        return 0;
    }
    if (!PyList_Check(frames)) {
        PyErr_SetString(PyExc_TypeError, "frames must be a list");
        return 0;
    }
    Py_ssize_t nf = PyList_Size(frames), total = 0;
    frame_t *fs = PyMem_Malloc((size_t)(nf > 0 ? nf : 1) * sizeof *fs);
    if (fs == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < nf; i++) {
        ok = frame_arg(PyList_GetItem(frames, i), &fs[i]);
        if (ok) total += fs[i].hi - fs[i].lo;
    }
    if (ok && total > 0xffffffffL) {
        PyErr_SetString(PyExc_ValueError, "too many records for one chunk");
        ok = 0;
    }
    int has_ts = fmt == F_HEADERS || fmt == F_TIMESTAMPED;
    int has_h = fmt == F_HEADERS || fmt == F_PLAIN_HEADERS;
    if (ok) ok = txs_scratch_alloc(s, total, has_ts, has_h);
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; ok && i < nf; i++) ok = load_frame(s, &fs[i], &at, max_key);
    PyMem_Free(fs);
    if (!ok) return 0;
    txs_sort_items(s, total, nput, ndel);
    *n = total;
    *fmt_out = (int)fmt;
    *seal_out = seal;
    return 1;
}

/* The sorted run of the sorted, marked items: a first pass sizes it, a second writes it. */
static PyObject *emit_run(const scratch_t *s, Py_ssize_t n, int fmt, int seal) {
    const item_t *it = s->items;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t idx = it[i].idx;
        if (idx == UINT32_MAX) continue;
        total += TXS_RUN_HEAD + (size_t)s->len[idx];
        if (it[i].dead) continue;
        Py_ssize_t size = txs_stored_size(fmt, s->vlen[idx], s->hlen ? s->hlen[idx] : 0, seal);
        if (size < 0) return NULL;
        if ((size_t)size >= TXS_RUN_TOMBSTONE) {
            PyErr_SetString(PyExc_ValueError, "a value of 2 GiB or more");
            return NULL;
        }
        total += (size_t)size;
    }
    if (total > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL) return NULL;
    char *w = PyBytes_AsString(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        txs_prefetch_ahead(s, i, n);
        uint32_t idx = it[i].idx;
        if (idx == UINT32_MAX) continue;
        Py_ssize_t kn = s->len[idx], hn = s->hlen ? s->hlen[idx] : 0;
        uint32_t head[2] = {(uint32_t)kn, 0};
        if (it[i].dead) {
            head[0] |= TXS_RUN_TOMBSTONE;
        } else {
            head[1] = (uint32_t)txs_stored_size(fmt, s->vlen[idx], hn, seal); /* checked above */
        }
        memcpy(w, head, TXS_RUN_HEAD);
        memcpy(w + TXS_RUN_HEAD, s->k[idx], (size_t)kn);
        w += TXS_RUN_HEAD + kn;
        if (!it[i].dead)
            txs_write_stored(w, s->k[idx], kn, s->v[idx], s->vlen[idx], fmt, s->ts ? s->ts[idx] : 0,
                             s->h ? s->h[idx] : NULL, hn, seal);
        w += head[1];
    }
    return out;
}

/* restore_frames (as_run 0: lists) and restore_frames_run (as_run 1: one run). */
static PyObject *restore_frames_as(PyObject *const *args, Py_ssize_t nargs, const char *name, int as_run) {
    scratch_t s;
    memset(&s, 0, sizeof s);
    Py_ssize_t n, nput, ndel;
    int fmt, seal;
    PyObject *res = NULL;
    if (frames_sorted(args, nargs, name, &s, &n, &nput, &ndel, &fmt, &seal))
        res = as_run ? emit_run(&s, n, fmt, seal) : txs_emit_lists(&s, NULL, n, nput, ndel, fmt, seal);
    txs_scratch_free(&s);
    return res;
}

PyObject *txs_restore_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return restore_frames_as(args, nargs, "restore_frames", 0);
}

PyObject *txs_restore_frames_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return restore_frames_as(args, nargs, "restore_frames_run", 1);
}
