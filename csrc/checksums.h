/* What the C files of the txstore._checksums extension share: csrc/checksums.c (the CRC32C
 * trailer, the module), csrc/rows.c (sort_rows, sort_columns, merge_rows), csrc/window_reader.c
 * (window_items, session_items), csrc/restore_rows.c (restore_rows),
 * csrc/restore_frames.c (restore_frames, restore_frames_run), csrc/restore_runs.c (encode_run, merge_runs), csrc/kv_get.c (kv_getter),
 * csrc/scan_rows.c (scan_rows). */
#ifndef TXSTORE_CHECKSUMS_H
#define TXSTORE_CHECKSUMS_H

#include <stdint.h>

/* crc32c(key || value): the entry checksum of docs/formats.md. */
uint32_t txs_entry_crc(const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn);
/* Write c at p, little-endian (the trailer's byte order). */
void txs_put_le32(char *p, uint32_t c);
/* restore_rows(keys, values, timestamps, headers, fmt, seal, max_key): csrc/restore_rows.c. */
PyObject *txs_restore_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* encode_run(keys, stored, deletes), merge_runs(bufs, pos, more, limit): csrc/restore_runs.c. */
PyObject *txs_encode_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_merge_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* restore_frames(frames, fmt, seal, max_key): restore_rows on changelog columns read in place;
 * restore_frames_run: the same as one sorted run (csrc/restore_frames.c). */
PyObject *txs_restore_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_restore_frames_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* column_bytes(buf, pos, end, n, has_headers, lo, hi): csrc/changelog_columns.c. */
PyObject *txs_column_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* The checks of a changelog batch's columns (csrc/changelog_columns.c); -1 with ValueError. */
int txs_column_sums(const char *data, Py_ssize_t p, Py_ssize_t end, Py_ssize_t n, int has_headers, Py_ssize_t lo,
                    Py_ssize_t hi, uint64_t *ksum, uint64_t *vsum, uint64_t *hsum, int *tombstones,
                    uint64_t *slice);

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

static inline int want_args(Py_ssize_t nargs, Py_ssize_t n, const char *name) {
    if (nargs != n) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, n, nargs);
        return -1;
    }
    return 0;
}

/* The little-endian 32-bit value at s (the trailer's byte order). */
static inline uint32_t get_le32(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Raise txstore._checksums.ChecksumError(key, reason); returns NULL. */
PyObject *txs_fail(PyObject *key, const char *reason);
/* The functions of csrc/rows.c and csrc/window_reader.c, in the module's method table. */
PyObject *txs_sort_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_sort_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_merge_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_window_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *txs_session_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* The names csrc/window_reader.c looks up on a cursor, interned at import: 0, or -1 with an
 * exception. */
int txs_window_reader_init(void);
/* csrc/kv_get.c: kv_getter(state) and its interned names (0, or -1 with an exception). */
PyObject *txs_kv_getter(PyObject *self, PyObject *state);
int txs_kv_get_init(void);
/* csrc/scan_rows.c: scan_rows(it, n, bound, inclusive, reverse, sealed). */
PyObject *txs_scan_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* unseal(key, stored) for a value only the caller holds (stripped in place when it can be;
 * see unseal_one in csrc/checksums.c); NULL with ChecksumError on a mismatch. */
PyObject *txs_unseal_owned(PyObject *key, PyObject *stored);
/* The ChecksumError class (borrowed). */
PyObject *txs_checksum_error(void);

#endif
