/* lmdbwalk: see lmdbwalk.h for the contract, txstore/engine/lmdb_pages.py for the rules. */
#define _XOPEN_SOURCE 700
#define _FILE_OFFSET_BITS 64
#include "lmdbwalk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* LMDB 0.9's on-disk layout (mdb.c). */
#define PAGEHDRSZ 16u    /* mp_pgno u64, mp_pad u16, mp_flags u16, mp_lower u16, mp_upper u16 */
#define NODESZ 8u        /* mn_lo u16, mn_hi u16, mn_flags u16, mn_ksize u16 */
#define DBSZ 48u         /* md_pad u32, md_flags u16, md_depth u16, then five u64 */
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define MDB_DUPSORT 0x04u
#define DB_FLAGS 0x7eu   /* MDB_REVERSEKEY .. MDB_REVERSEDUP */
#define MDB_REVERSEKEY 0x02u
#define MDB_INTEGERKEY 0x08u
#define MAX_KEY 511u     /* MDB_MAXKEYSIZE */
#define MAX_DEPTH 64u
#define P_INVALID UINT64_MAX
#define MIN_PSIZE 512u
#define MAX_PSIZE 65536u
#define SLACK_PAGES (1ull << 20) /* mm_last_pg may lie this far past a short file's end */

typedef struct {
    uint16_t flags, depth;
    uint64_t branch, leaf, overflow, entries, root;
} db_rec;

/* A bound a parent gives a page's keys: the key of node idx of page pg, copied into the key
 * arena at off (len bytes); pg 0 (a meta page, never a parent) is no bound. */
typedef struct {
    uint64_t pg;
    size_t off;
    uint32_t len, idx;
} key_bound;

/* A page still to visit: its level, its keys' bounds (low <= every key < high) and the length
 * of the key arena when it was pushed (what its ancestors' separators occupy). */
typedef struct {
    uint64_t pgno;
    uint32_t level;
    size_t mark;
    key_bound low, high;
} todo_item;

/* How a database orders its keys (mdb.c's comparators that txstore's files use). */
enum key_order {
    ORDER_NONE = 0, /* flags this walk has no comparator for: keys not compared */
    ORDER_MEMN = 1, /* mdb_cmp_memn: bytes as unsigned, a prefix first (the default) */
    ORDER_LONG = 2  /* mdb_cmp_long: a native size_t (the free-page database's txnids) */
};

typedef struct {
    uint8_t rec[DBSZ];
    size_t name_off;
    uint16_t name_len;
} named_db;

struct txw_walker {
    int fd;
    uint64_t file_size, file_pages, last_pg;
    uint32_t psize;
    uint8_t *page;      /* psize bytes: the branch or leaf page being checked */
    uint8_t *aux;       /* psize bytes: an overflow run's header, a free-page record's part */
    uint8_t *seen;      /* last_pg + 1 bits: used by a database or listed free */
    todo_item *todo;
    size_t todo_n, todo_cap;
    uint8_t *keys;      /* the key arena: the separators of the branch pages above the page */
    size_t keys_n, keys_cap;
    uint64_t *free;     /* the free list, in record order (see keep_free) */
    size_t free_n, free_cap;
    uint64_t free_total;
    named_db *named;
    size_t named_n, named_cap;
    uint8_t *names;
    size_t names_n, names_cap;
    uint64_t pages, entries;
    uint8_t *kinds;
    int32_t *kind_dbs;
    size_t n_kinds;
    int used;
};

/* ------------------------------------------------------------------ helpers */

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (uint16_t)p[1] << 8); }

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static db_rec parse_db(const uint8_t *p) {
    db_rec d;
    d.flags = get16(p + 4);
    d.depth = get16(p + 6);
    d.branch = get64(p + 8);
    d.leaf = get64(p + 16);
    d.overflow = get64(p + 24);
    d.entries = get64(p + 32);
    d.root = get64(p + 40);
    return d;
}

static int32_t fail(txw_result *out, int32_t reason) {
    out->reason = reason;
    return reason;
}

static int32_t fail1(txw_result *out, int32_t reason, uint64_t v0) {
    out->v[0] = v0;
    return fail(out, reason);
}

static int32_t fail2(txw_result *out, int32_t reason, uint64_t v0, uint64_t v1) {
    out->v[1] = v1;
    return fail1(out, reason, v0);
}

/* Grow *buf (of *cap items of size item) to hold at least need items. 0, or -1 out of memory. */
static int grow(void **buf, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2 / item) return -1;
        cap2 *= 2;
    }
    void *p = realloc(*buf, cap2 * item);
    if (p == NULL) return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

/* Read n bytes at off into buf, retrying on EINTR and on short counts: the bytes read (n, or
 * fewer where the file ends), or -1 with errno set. */
static int64_t read_at(int fd, uint8_t *buf, size_t n, uint64_t off) {
    size_t done = 0;
    if (off > (uint64_t)INT64_MAX - n) {
        errno = EOVERFLOW;
        return -1;
    }
    while (done < n) {
        ssize_t r = pread(fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (int64_t)done;
}

static int32_t io_error(txw_result *out) {
    out->error = errno;
    return fail(out, TXW_R_IO);
}

/* Read page pgno (its first n bytes, n <= psize) into buf. */
static int32_t read_page(txw_walker *w, uint8_t *buf, uint64_t pgno, size_t n, txw_result *out) {
    if (pgno >= w->file_pages) {
        out->v[1] = w->file_pages;
        out->v[2] = w->psize;
        return fail1(out, TXW_R_PAST_END, pgno);
    }
    int64_t got = read_at(w->fd, buf, n, pgno * w->psize);
    if (got < 0) return io_error(out);
    if ((size_t)got != n) return fail1(out, TXW_R_SHORT_READ, pgno);
    return TXW_OK;
}

static int test_and_set(uint8_t *bits, uint64_t pg) {
    uint8_t mask = (uint8_t)(1u << (pg & 7));
    int was = (bits[pg >> 3] & mask) != 0;
    bits[pg >> 3] |= mask;
    return was;
}

/* Mark pages first .. first+count-1 (count >= 1) as used; out->via says by what. */
static int32_t claim(txw_walker *w, uint64_t first, uint64_t count, txw_result *out) {
    if (first < 2 || first > w->last_pg || count - 1 > w->last_pg - first) {
        out->v[2] = w->last_pg;
        return fail2(out, TXW_R_OUTSIDE, first, first + (count - 1));
    }
    for (uint64_t pg = first; pg < first + count; pg++)
        if (test_and_set(w->seen, pg)) return fail1(out, TXW_R_TWICE, pg);
    w->pages += count;
    return TXW_OK;
}

static void set_kind(txw_walker *w, uint64_t pgno, int kind, int32_t db) {
    if (w->kinds != NULL && pgno < w->n_kinds) {
        w->kinds[pgno] = (uint8_t)kind;
        w->kind_dbs[pgno] = db;
    }
}

/* Keep one page number of the free list. Only the first last_pg + 1 are kept: there are
 * last_pg - 1 valid free pages (2..last_pg), so among that many a page outside them or one
 * listed twice occurs, and the check after the walk names the same first offender as it would
 * with the whole list. */
static int32_t keep_free(txw_walker *w, uint64_t pg, txw_result *out) {
    w->free_total++;
    if (w->free_n > w->last_pg) return TXW_OK;
    if (grow((void **)&w->free, &w->free_cap, w->free_n + 1, sizeof *w->free) < 0)
        return fail(out, TXW_R_NOMEM);
    w->free[w->free_n++] = pg;
    return TXW_OK;
}

/* A free-page record held inline in the page buffer at offset at, dsize bytes: a u64 count,
 * then that many page numbers. */
static int32_t free_inline(txw_walker *w, size_t at, uint64_t dsize, txw_result *out) {
    if (dsize < 8) return fail1(out, TXW_R_FREE_SIZE, dsize);
    uint64_t count = get64(w->page + at);
    if (count > dsize / 8 - 1) return fail2(out, TXW_R_FREE_COUNT, count, dsize);
    for (uint64_t i = 0; i < count; i++) {
        int32_t rc = keep_free(w, get64(w->page + at + 8 + 8 * i), out);
        if (rc) return rc;
    }
    return TXW_OK;
}

/* A free-page record of dsize bytes held in the overflow run at page ov (n pages), read through
 * the page buffer psize bytes at a time. */
static int32_t free_overflow(txw_walker *w, uint64_t ov, uint64_t n, uint64_t dsize,
                             txw_result *out) {
    uint64_t start = ov * w->psize + PAGEHDRSZ;
    if (start + dsize > w->file_size) return fail2(out, TXW_R_OV_PAST_END, ov, ov + n - 1);
    if (dsize < 8) return fail1(out, TXW_R_FREE_SIZE, dsize);
    int64_t got = read_at(w->fd, w->aux, 8, start);
    if (got < 0) return io_error(out);
    if (got != 8) return fail2(out, TXW_R_OV_PAST_END, ov, ov + n - 1);
    uint64_t count = get64(w->aux);
    if (count > dsize / 8 - 1) return fail2(out, TXW_R_FREE_COUNT, count, dsize);
    uint64_t off = start + 8, left = count;
    while (left > 0) {
        size_t k = left < w->psize / 8 ? (size_t)left : w->psize / 8;
        got = read_at(w->fd, w->aux, 8 * k, off);
        if (got < 0) return io_error(out);
        if ((size_t)got != 8 * k) return fail2(out, TXW_R_OV_PAST_END, ov, ov + n - 1);
        for (size_t i = 0; i < k; i++) {
            int32_t rc = keep_free(w, get64(w->aux + 8 * i), out);
            if (rc) return rc;
        }
        off += 8 * k;
        left -= k;
    }
    return TXW_OK;
}

/* The overflow run at page ov holding dsize bytes, named by a leaf node of page `where`; adds
 * its length to *overflow. It holds at least OVPAGES(dsize) pages: LMDB overwrites a dirty run
 * in place with a smaller value and keeps its length. */
static int32_t overflow(txw_walker *w, uint64_t ov, uint64_t dsize, int32_t db, int free_db,
                        uint64_t *overflow_pages, txw_result *out) {
    uint64_t need = (PAGEHDRSZ - 1 + dsize) / w->psize + 1; /* OVPAGES */
    if (ov < 2 || ov > w->last_pg) return fail2(out, TXW_R_OV_OUTSIDE, ov, w->last_pg);
    out->via = TXW_VIA_OVERFLOW;
    out->run = ov;
    int32_t rc = read_page(w, w->aux, ov, PAGEHDRSZ, out);
    if (rc) return rc;
    uint64_t mp_pgno = get64(w->aux);
    uint16_t flags = get16(w->aux + 10);
    uint32_t pages = get32(w->aux + 12);
    if (mp_pgno != ov || flags != P_OVERFLOW || pages < need) {
        out->v[1] = mp_pgno;
        out->v[2] = flags;
        out->v[3] = pages;
        out->v[4] = need;
        return fail1(out, TXW_R_OV_HEADER, ov);
    }
    out->run_pages = pages;
    rc = claim(w, ov, pages, out);
    if (rc) return rc;
    set_kind(w, ov, TXW_KIND_OVERFLOW, db);
    if (ov + need > w->file_pages) return fail2(out, TXW_R_OV_PAST_END, ov, ov + need - 1);
    if (free_db) {
        rc = free_overflow(w, ov, pages, dsize, out);
        if (rc) return rc;
    }
    out->via = TXW_VIA_PAGE;
    *overflow_pages += pages;
    return TXW_OK;
}

/* Push page pgno (at level) with the bounds low and high of its keys. */
static int32_t push(txw_walker *w, uint64_t pgno, uint32_t level, const key_bound *low,
                    const key_bound *high, txw_result *out) {
    if (grow((void **)&w->todo, &w->todo_cap, w->todo_n + 1, sizeof *w->todo) < 0)
        return fail(out, TXW_R_NOMEM);
    todo_item *t = &w->todo[w->todo_n++];
    t->pgno = pgno;
    t->level = level;
    t->mark = 0;
    t->low = *low;
    t->high = *high;
    return TXW_OK;
}

/* Compare keys a (an bytes) and b (bn bytes) in the order `order` (not ORDER_NONE): below,
 * at or above zero as a sorts before, with or after b. ORDER_LONG keys are sizeof(size_t)
 * bytes (the caller checks). */
static inline int cmp_keys(int order, const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
    if (order == ORDER_LONG) {
        size_t x, y;
        memcpy(&x, a, sizeof x);
        memcpy(&y, b, sizeof y);
        return (x > y) - (x < y);
    }
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/* Add a named database found in a leaf of the main database: its record at rec, its name (the
 * node's key) at key. */
static int32_t add_named(txw_walker *w, const uint8_t *rec, const uint8_t *key, uint16_t ksize,
                         txw_result *out) {
    if (grow((void **)&w->named, &w->named_cap, w->named_n + 1, sizeof *w->named) < 0 ||
        grow((void **)&w->names, &w->names_cap, w->names_n + ksize + 1, 1) < 0)
        return fail(out, TXW_R_NOMEM);
    named_db *d = &w->named[w->named_n++];
    memcpy(d->rec, rec, DBSZ);
    d->name_off = w->names_n;
    d->name_len = ksize;
    memcpy(w->names + w->names_n, key, ksize);
    w->names_n += ksize;
    return TXW_OK;
}

/* The nodes of the branch (flags P_BRANCH) or leaf page in the page buffer, reached as item,
 * of database db, checked: children claimed and pushed with their key bounds, leaf records
 * counted in counted[3], overflow runs in counted[2]. Keys (all of a leaf's; a branch page's
 * from node 1 on: mdb_node_search skips node 0 of a branch page, whose key LMDB leaves empty
 * or stale) strictly increase in `order` and lie within the item's bounds. */
static int32_t nodes(txw_walker *w, const todo_item *item, uint16_t flags, int32_t db,
                     int order, int main_db, int free_db, uint64_t *counted, txw_result *out) {
    const uint8_t *page = w->page;
    uint32_t psize = w->psize;
    uint32_t lower = get16(page + 12), upper = get16(page + 14);
    if (!(PAGEHDRSZ <= lower && lower <= upper && upper <= psize) || ((lower - PAGEHDRSZ) & 1))
        return fail2(out, TXW_R_BOUNDS, lower, upper);
    uint32_t n = (lower - PAGEHDRSZ) >> 1;
    if (n < 1) return fail(out, TXW_R_NO_NODES);
    size_t first_child = w->todo_n;
    const uint8_t *prev = NULL; /* the last key checked, its size, node and offset */
    uint32_t prev_len = 0, prev_i = 0, prev_at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t at = get16(page + PAGEHDRSZ + 2 * i);
        if (at < upper || at + NODESZ > psize) {
            out->v[2] = psize;
            return fail2(out, TXW_R_NODE_OFFSET, at, upper);
        }
        uint16_t lo = get16(page + at), hi = get16(page + at + 2);
        uint16_t nflags = get16(page + at + 4), ksize = get16(page + at + 6);
        uint32_t end = at + NODESZ + ksize;
        if (ksize > MAX_KEY || end > psize) return fail2(out, TXW_R_KEY_SIZE, at, ksize);
        const uint8_t *key = page + at + NODESZ;
        if (order != ORDER_NONE && (flags != P_BRANCH || i > 0)) {
            if (order == ORDER_LONG && ksize != sizeof(size_t))
                return fail2(out, TXW_R_KEY_SIZE, at, ksize);
            if (prev != NULL) {
                if (cmp_keys(order, prev, prev_len, key, ksize) >= 0) {
                    out->v[2] = prev_i;
                    return fail2(out, TXW_R_KEY_ORDER, i, at);
                }
            } else if (item->low.pg != 0 &&
                       cmp_keys(order, key, ksize, w->keys + item->low.off, item->low.len) < 0) {
                out->v[2] = item->low.pg;
                out->v[3] = item->low.idx;
                return fail2(out, TXW_R_KEY_LOW, i, at);
            }
            prev = key;
            prev_len = ksize;
            prev_i = i;
            prev_at = at;
        }
        if (flags == P_BRANCH) {
            uint64_t child = (uint64_t)lo | (uint64_t)hi << 16 | (uint64_t)nflags << 32;
            key_bound low = item->low;
            if (i > 0 && order != ORDER_NONE) { /* separator i: child i-1's high, child i's low */
                if (grow((void **)&w->keys, &w->keys_cap, w->keys_n + ksize, 1) < 0)
                    return fail(out, TXW_R_NOMEM);
                low.pg = item->pgno;
                low.off = w->keys_n;
                low.len = ksize;
                low.idx = i;
                memcpy(w->keys + w->keys_n, key, ksize);
                w->keys_n += ksize;
                w->todo[w->todo_n - 1].high = low;
            }
            out->via = TXW_VIA_BRANCH;
            int32_t rc = claim(w, child, 1, out);
            if (rc) return rc;
            out->via = TXW_VIA_PAGE;
            rc = push(w, child, item->level + 1, &low, &item->high, out);
            if (rc) return rc;
            continue;
        }
        uint64_t dsize = (uint64_t)lo | (uint64_t)hi << 16;
        counted[3]++;
        if (nflags == 0) {
            if (end + dsize > psize) return fail1(out, TXW_R_OVERRUN, at);
            if (free_db) {
                int32_t rc = free_inline(w, end, dsize, out);
                if (rc) return rc;
            }
        } else if (nflags == F_BIGDATA) {
            if (end + 8 > psize) return fail1(out, TXW_R_OVERRUN, at);
            uint64_t ov = get64(page + end);
            int32_t rc = overflow(w, ov, dsize, db, free_db, &counted[2], out);
            if (rc) return rc;
        } else if (nflags == F_SUBDATA && main_db && dsize == DBSZ) {
            if (end + dsize > psize) return fail1(out, TXW_R_OVERRUN, at);
            int32_t rc = add_named(w, page + end, key, ksize, out);
            if (rc) return rc;
        } else {
            return fail2(out, TXW_R_NODE_FLAGS, at, nflags);
        }
    }
    if (prev != NULL && item->high.pg != 0 &&
        cmp_keys(order, prev, prev_len, w->keys + item->high.off, item->high.len) >= 0) {
        out->v[2] = item->high.pg;
        out->v[3] = item->high.idx;
        return fail2(out, TXW_R_KEY_HIGH, prev_i, prev_at);
    }
    for (size_t c = first_child; c < w->todo_n; c++) w->todo[c].mark = w->keys_n;
    return TXW_OK;
}

/* How database db (record flags `flags`) orders its keys: the free-page database by txnid
 * (LMDB sets mdb_cmp_long for it whatever its flags say), any other by its flags: none, the
 * default order; MDB_REVERSEKEY or MDB_INTEGERKEY (txstore opens no database so), not
 * compared. */
static int key_order(int32_t db, uint16_t flags) {
    if (db == 0) return ORDER_LONG;
    return flags & (MDB_REVERSEKEY | MDB_INTEGERKEY) ? ORDER_NONE : ORDER_MEMN;
}

/* Walk one database (number db; its record rec). */
static int32_t walk_db(txw_walker *w, const db_rec *rec, int32_t db, txw_result *out) {
    int main_db = db == 1, free_db = db == 0;
    uint64_t counted[4] = {0, 0, 0, 0}; /* branch, leaf, overflow, entries */
    out->db = db;
    out->via = TXW_VIA_PAGE;
    if (rec->flags & ~DB_FLAGS) return fail1(out, TXW_R_DB_FLAGS, rec->flags);
    if (rec->flags & MDB_DUPSORT) return fail(out, TXW_R_DUPSORT);
    if (rec->root == P_INVALID) {
        if (rec->depth || rec->branch || rec->leaf || rec->overflow || rec->entries) {
            out->v[2] = rec->leaf;
            out->v[3] = rec->overflow;
            out->v[4] = rec->entries;
            return fail2(out, TXW_R_EMPTY_DB, rec->depth, rec->branch);
        }
        return TXW_OK;
    }
    if (rec->depth < 1 || rec->depth > MAX_DEPTH) return fail2(out, TXW_R_DEPTH, rec->root, rec->depth);
    out->via = TXW_VIA_ROOT;
    int32_t rc = claim(w, rec->root, 1, out);
    if (rc) return rc;
    out->via = TXW_VIA_PAGE;
    w->todo_n = 0;
    key_bound none = {0, 0, 0, 0};
    rc = push(w, rec->root, 1, &none, &none, out);
    if (rc) return rc;
    int order = key_order(db, rec->flags);
    while (w->todo_n > 0) {
        todo_item item = w->todo[--w->todo_n];
        uint64_t pgno = item.pgno;
        uint32_t level = item.level;
        w->keys_n = item.mark; /* what lies above belongs to subtrees walked already */
        out->where = pgno;
        rc = read_page(w, w->page, pgno, w->psize, out);
        if (rc) return rc;
        uint64_t mp_pgno = get64(w->page);
        uint16_t flags = get16(w->page + 10);
        if (mp_pgno != pgno) return fail1(out, TXW_R_PGNO, mp_pgno);
        set_kind(w, pgno,
                 pgno == rec->root      ? TXW_KIND_ROOT
                 : flags == P_BRANCH ? TXW_KIND_BRANCH
                 : flags == P_LEAF   ? TXW_KIND_LEAF
                                     : TXW_KIND_OTHER,
                 db);
        if (flags == P_BRANCH) {
            if (level >= rec->depth) return fail2(out, TXW_R_BRANCH_DEPTH, level, rec->depth);
            counted[0]++;
        } else if (flags == P_LEAF) {
            if (level != rec->depth) return fail2(out, TXW_R_LEAF_DEPTH, level, rec->depth);
            counted[1]++;
        } else {
            return fail1(out, TXW_R_PAGE_FLAGS, flags);
        }
        rc = nodes(w, &item, flags, db, order, main_db, free_db, counted, out);
        if (rc) return rc;
    }
    w->entries += counted[3];
    if (counted[0] != rec->branch || counted[1] != rec->leaf || counted[2] != rec->overflow ||
        counted[3] != rec->entries) {
        out->v[0] = counted[0];
        out->v[1] = counted[1];
        out->v[2] = counted[2];
        out->v[3] = counted[3];
        out->v[4] = rec->branch;
        out->v[5] = rec->leaf;
        out->v[6] = rec->overflow;
        out->v[7] = rec->entries;
        return fail(out, TXW_R_COUNTS);
    }
    return TXW_OK;
}

/* ------------------------------------------------------------------ API */

txw_walker *txw_new(int fd, uint64_t file_size) {
    txw_walker *w = calloc(1, sizeof *w);
    if (w == NULL) return NULL;
    w->fd = fd;
    w->file_size = file_size;
    return w;
}

int32_t txw_walk(txw_walker *w, uint32_t psize, uint64_t last_pg, const uint8_t *dbs,
                 size_t dbs_len, uint8_t *kinds, int32_t *kind_dbs, size_t n_kinds,
                 txw_result *out) {
    if (out == NULL) return TXW_R_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (w == NULL || w->used || dbs == NULL || dbs_len < 2 * DBSZ ||
        (n_kinds > 0 && (kinds == NULL || kind_dbs == NULL)))
        return fail(out, TXW_R_ARGUMENT);
    w->used = 1;
    if (psize < MIN_PSIZE || psize > MAX_PSIZE || (psize & (psize - 1)))
        return fail1(out, TXW_R_PSIZE, psize);
    w->psize = psize;
    w->file_pages = w->file_size / psize;
    if (last_pg > w->file_pages + SLACK_PAGES) return fail2(out, TXW_R_LAST_PG, last_pg, w->file_pages);
    w->last_pg = last_pg;
    w->kinds = kinds;
    w->kind_dbs = kind_dbs;
    w->n_kinds = n_kinds;
    w->page = malloc(psize);
    w->aux = malloc(psize);
    w->seen = calloc((size_t)(last_pg / 8 + 1), 1);
    if (w->page == NULL || w->aux == NULL || w->seen == NULL) return fail(out, TXW_R_NOMEM);
    db_rec free_rec = parse_db(dbs), main_rec = parse_db(dbs + DBSZ);
    int32_t rc = walk_db(w, &free_rec, 0, out);
    if (!rc) rc = walk_db(w, &main_rec, 1, out);
    for (size_t i = 0; !rc && i < w->named_n; i++) {
        db_rec rec = parse_db(w->named[i].rec);
        rc = walk_db(w, &rec, (int32_t)(2 + i), out);
    }
    if (rc) return rc;
    out->db = 0;
    out->via = TXW_VIA_PAGE;
    for (size_t i = 0; i < w->free_n; i++) {
        uint64_t pg = w->free[i];
        if (pg < 2 || pg > last_pg) return fail2(out, TXW_R_FREE_OUTSIDE, pg, last_pg);
        if (test_and_set(w->seen, pg)) return fail1(out, TXW_R_FREE_USED, pg);
    }
    for (uint64_t pg = 2; pg <= last_pg; pg++) {
        if ((pg & 7) == 0 && w->seen[pg >> 3] == 0xff && pg + 7 <= last_pg) {
            pg += 7; /* a whole byte of pages seen */
            continue;
        }
        if (!(w->seen[pg >> 3] & (1u << (pg & 7)))) return fail1(out, TXW_R_LOST, pg);
    }
    out->pages = w->pages;
    out->free_pages = w->free_total;
    out->databases = 2 + w->named_n;
    out->entries = w->entries;
    return TXW_OK;
}

int64_t txw_db_name(const txw_walker *w, int32_t db, uint8_t *out, size_t cap) {
    if (w == NULL || db < 2 || (size_t)(db - 2) >= w->named_n) return -1;
    const named_db *d = &w->named[db - 2];
    size_t n = d->name_len < cap ? d->name_len : cap;
    if (n > 0) memcpy(out, w->names + d->name_off, n);
    return (int64_t)d->name_len;
}

void txw_free(txw_walker *w) {
    if (w == NULL) return;
    free(w->page);
    free(w->aux);
    free(w->seen);
    free(w->todo);
    free(w->keys);
    free(w->free);
    free(w->named);
    free(w->names);
    free(w);
}
