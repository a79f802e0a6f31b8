/* What csrc/restore_rows.c (restore_rows: the last record of each key of a restore chunk,
 * sorted, converted and sealed) shares with csrc/restore_frames.c (the same on changelog
 * columns read in place, emitted as lists or as one sorted run of csrc/restore_runs.c). */
#ifndef TXSTORE_RESTORE_ROWS_H
#define TXSTORE_RESTORE_ROWS_H

#include <stdint.h>

#define PREFETCH 8 /* items ahead */

enum { F_PLAIN = 0, F_TIMESTAMPED = 1, F_HEADERS = 2, F_PLAIN_HEADERS = 3 };

/* A sorted run's record (csrc/restore_runs.c): [u32 native: key size | TXS_RUN_TOMBSTONE]
 * [u32 native: value size][key][value]. */
#define TXS_RUN_TOMBSTONE 0x80000000u
#define TXS_RUN_HEAD 8

typedef struct {
    uint64_t pre; /* the key's first 8 bytes, big-endian, zero-padded */
    uint32_t idx; /* the record's position in the chunk; UINT32_MAX once a later one overwrote it */
    uint32_t dead; /* 1: the record is a tombstone */
} item_t;

typedef struct {
    item_t *items, *tmp;
    const char **k, **v, **h; /* each record's key, value and headers bytes */
    Py_ssize_t *len, *vlen, *hlen;
    int64_t *ts;
} scratch_t;

/* Prefetch the key and value of the sorted item PREFETCH places after i (the emit loops read
 * records in key order, so all over memory). */
static inline void txs_prefetch_ahead(const scratch_t *s, Py_ssize_t i, Py_ssize_t n) {
    const item_t *it = s->items;
    if (i + PREFETCH < n && it[i + PREFETCH].idx != UINT32_MAX) {
        uint32_t a = it[i + PREFETCH].idx;
        __builtin_prefetch(s->k[a]);
        if (!it[i + PREFETCH].dead) {
            __builtin_prefetch(s->v[a]);
            __builtin_prefetch(s->v[a] + 64);
        }
    }
}

/* Record j's key (kn bytes at kp) into the scratch: its pointer, length, sort prefix and
 * index; 0 with ValueError for a key of 0 or more than max_key bytes. */
static inline int txs_load_key(scratch_t *s, Py_ssize_t j, const char *kp, Py_ssize_t kn, Py_ssize_t max_key) {
    if (kn < 1 || kn > max_key) {
        PyErr_SetString(PyExc_ValueError, "key length out of range");
        return 0;
    }
    s->k[j] = kp;
    s->len[j] = kn;
    uint64_t pre = 0;
    for (Py_ssize_t b = 0; b < 8; b++) pre = (pre << 8) | (b < kn ? (unsigned char)kp[b] : 0u);
    s->items[j].pre = pre;
    s->items[j].idx = (uint32_t)j;
    return 1;
}

/* Allocate the scratch of n records (timestamps and headers when the format has them); 0 with
 * MemoryError. txs_scratch_free frees what was allocated (the scratch starts zeroed). */
int txs_scratch_alloc(scratch_t *s, Py_ssize_t n, int has_ts, int has_h);
void txs_scratch_free(scratch_t *s);
/* Sort the n loaded records by key, then record index, and mark each record a later one of
 * the same key overwrites (idx UINT32_MAX); *nput and *ndel: the winners that are values and
 * tombstones. */
void txs_sort_items(scratch_t *s, Py_ssize_t n, Py_ssize_t *nput, Py_ssize_t *ndel);
/* Bytes of a record's stored value in format fmt (value vn bytes, headers hn bytes), with the
 * 4-byte trailer when sealing; -1 with OverflowError for headers a varint cannot say. */
Py_ssize_t txs_stored_size(int fmt, Py_ssize_t vn, Py_ssize_t hn, int seal);
/* Write that stored value (txs_stored_size bytes) at o; the trailer is over key k. */
void txs_write_stored(char *o, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn, int fmt, int64_t ts,
                      const char *h, Py_ssize_t hn, int seal);
/* (keys, stored values, deletes) of the sorted, marked items (keys: the input's key objects,
 * or NULL to make them from the key bytes). */
PyObject *txs_emit_lists(scratch_t *s, PyObject *keys, Py_ssize_t n, Py_ssize_t nput, Py_ssize_t ndel, int fmt,
                         int seal);

#endif
