/*
 * lmdbwalk: the B-tree page walk of an LMDB 0.9-format data file, in C.
 *
 * txstore.engine.lmdb_pages reads the two meta pages and picks the newest, then hands this walk
 * an open file descriptor, the page size, mm_last_pg and the two MDB_db records of that meta
 * page (free pages, main). The walk reads every page the snapshot reaches with pread (never
 * mmap: a short file cannot SIGBUS it), one page-sized buffer at a time, and checks it as the
 * module docstring of lmdb_pages states. It stops at the first fault and describes it in a
 * txw_result: a reason code, the database and page it concerns and the numbers the message
 * names; Python turns that into DamagedFileError's text. This file holds the walk rules; the
 * Python side holds no second copy of them.
 *
 * Like txcodecs.h, this header is read by the C compiler and by csrc/build_ffi.py (preprocessor
 * lines dropped, the rest given to ffi.cdef()): plain declarations only.
 *
 * Memory: a bitmap of mm_last_pg + 1 bits (pages seen), one page buffer, a stack of the pages
 * still to visit (each page enters it at most once, with the bounds of its keys), an arena of
 * the separator keys of the branch pages above the page being read (at most md_depth pages'
 * worth), the free list and the named databases' records: never the file. Every read goes through a buffer the walker owns and is bounded by
 * its size; every offset inside a page is checked against the page size before it is read.
 */
#ifndef LMDBWALK_H
#define LMDBWALK_H

#include <stddef.h>
#include <stdint.h>

/* What is wrong; the v[] slots each reason fills are listed (see lmdb_pages._MESSAGES). */
enum txw_reason {
    TXW_OK = 0,
    TXW_R_PAST_END = 1,      /* v0 page, v1 complete pages in the file, v2 page size */
    TXW_R_SHORT_READ = 2,    /* v0 page: the file ended inside it */
    TXW_R_OUTSIDE = 3,       /* v0 first, v1 last page reached, v2 mm_last_pg */
    TXW_R_TWICE = 4,         /* v0 page reached a second time */
    TXW_R_DB_FLAGS = 5,      /* v0 the record's flags */
    TXW_R_DUPSORT = 6,       /* (none) */
    TXW_R_EMPTY_DB = 7,      /* v0 depth, v1 branch, v2 leaf, v3 overflow pages, v4 entries */
    TXW_R_DEPTH = 8,         /* v0 root, v1 depth */
    TXW_R_PGNO = 9,          /* v0 the page number the header gives */
    TXW_R_BRANCH_DEPTH = 10, /* v0 level, v1 md_depth */
    TXW_R_LEAF_DEPTH = 11,   /* v0 level, v1 md_depth */
    TXW_R_PAGE_FLAGS = 12,   /* v0 mp_flags */
    TXW_R_BOUNDS = 13,       /* v0 mp_lower, v1 mp_upper */
    TXW_R_NO_NODES = 14,     /* (none) */
    TXW_R_NODE_OFFSET = 15,  /* v0 node offset, v1 mp_upper, v2 page size */
    TXW_R_KEY_SIZE = 16,     /* v0 node offset, v1 key size */
    TXW_R_OVERRUN = 17,      /* v0 node offset */
    TXW_R_NODE_FLAGS = 18,   /* v0 node offset, v1 node flags */
    TXW_R_COUNTS = 19,       /* v0..v3 counted branch, leaf, overflow, entries; v4..v7 recorded */
    TXW_R_OV_OUTSIDE = 20,   /* v0 overflow page named, v1 mm_last_pg */
    TXW_R_OV_HEADER = 21,    /* v0 run's first page, v1 its mp_pgno, v2 flags, v3 pages, v4 need */
    TXW_R_OV_PAST_END = 22,  /* v0 first, v1 last page of the run */
    TXW_R_FREE_SIZE = 23,    /* v0 record size */
    TXW_R_FREE_COUNT = 24,   /* v0 count, v1 record size */
    TXW_R_FREE_OUTSIDE = 25, /* v0 page listed free, v1 mm_last_pg */
    TXW_R_FREE_USED = 26,    /* v0 page listed free */
    TXW_R_LOST = 27,         /* v0 page neither used nor free */
    TXW_R_PSIZE = 28,        /* v0 page size */
    TXW_R_LAST_PG = 29,      /* v0 mm_last_pg, v1 complete pages in the file */
    TXW_R_IO = 30,           /* errno in the result's error field */
    TXW_R_NOMEM = 31,        /* an allocation failed */
    TXW_R_ARGUMENT = 32,     /* a NULL or too short argument */
    TXW_R_KEY_ORDER = 33,    /* v0 node, v1 its offset, v2 the node before it */
    TXW_R_KEY_LOW = 34,      /* v0 node, v1 its offset; v2 page, v3 node of the lower bound */
    TXW_R_KEY_HIGH = 35      /* v0 node, v1 its offset; v2 page, v3 node of the upper bound */
};

/* How the page a reason names was reached (the context its message gives). */
enum txw_via {
    TXW_VIA_PAGE = 0,     /* the branch or leaf page `where` itself */
    TXW_VIA_ROOT = 1,     /* the root of the database */
    TXW_VIA_BRANCH = 2,   /* a branch node of page `where` */
    TXW_VIA_OVERFLOW = 3  /* the overflow run at page `run` (`run_pages` long) of page `where` */
};

/* Kinds of page reported to a caller that asks (page_kinds). */
enum txw_kind {
    TXW_KIND_NONE = 0,
    TXW_KIND_ROOT = 1,
    TXW_KIND_BRANCH = 2,
    TXW_KIND_LEAF = 3,
    TXW_KIND_OVERFLOW = 4,
    TXW_KIND_OTHER = 5
};

typedef struct txw_result {
    int32_t reason;     /* TXW_OK, or a TXW_R_* code */
    int32_t db;         /* the database: 0 the free-page one, 1 the main one, 2 + i the i-th named */
    int32_t via;        /* a TXW_VIA_* code */
    int32_t error;      /* errno, for TXW_R_IO */
    uint64_t where;     /* the branch or leaf page being read when the fault was found */
    uint64_t run;       /* TXW_VIA_OVERFLOW: the first page of the run */
    uint64_t run_pages; /* TXW_VIA_OVERFLOW: its length in pages */
    uint64_t v[8];      /* the numbers of the reason (see enum txw_reason) */
    /* On TXW_OK: what was read. */
    uint64_t pages;      /* branch, leaf and overflow pages in use */
    uint64_t free_pages; /* pages listed in the free-page database */
    uint64_t databases;  /* 2 + the named databases */
    uint64_t entries;    /* leaf records of every database */
} txw_result;

typedef struct txw_walker txw_walker;

/* A walker of the file open at fd (file_size bytes at the time of the call). NULL if out of
 * memory. The walker never closes fd. */
txw_walker *txw_new(int fd, uint64_t file_size);

/* Walk the snapshot whose meta page gives page size psize, mm_last_pg last_pg and the free-page
 * and main databases' MDB_db records (dbs: 96 bytes, as in the meta page). kinds and kind_dbs
 * (n_kinds entries each, or NULL and 0) receive a TXW_KIND_* and a database number for every
 * page below n_kinds the walk visits. Fills *out; returns out->reason. Call once per walker. */
int32_t txw_walk(txw_walker *w, uint32_t psize, uint64_t last_pg, const uint8_t *dbs,
                 size_t dbs_len, uint8_t *kinds, int32_t *kind_dbs, size_t n_kinds,
                 txw_result *out);

/* The name (key in the main database) of database number db (2 + i), copied into out (at most
 * cap bytes): its length, or -1 for a number that names no named database. */
int64_t txw_db_name(const txw_walker *w, int32_t db, uint8_t *out, size_t cap);

/* Free the walker (NULL is ignored). */
void txw_free(txw_walker *w);

#endif
