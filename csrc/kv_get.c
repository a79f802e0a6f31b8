/*
 * txstore._checksums, the key-value get without a Python frame (part of the extension
 * csrc/checksums.c builds): txstore.stores.kv.KeyValueStore installs, per store, a builtin
 * bound to the store's state (see BytesKeyValueStore.native_get) as its `get`.
 *
 * kv_getter(state) -> a builtin get(key), state a tuple
 *     (reader_dict, overlay, mem_descr, layered_descr, partition_dict, db, fallback, max_key)
 *
 * reader_dict is the bytes store's instance dict (its `is_open`), overlay the store's DbOverlay
 * with the member descriptors of its `mem` and `layered` slots, partition_dict the LMDB
 * partition's instance dict (`writer_txn`, `writer_handles`, `checksums`), db the database's
 * name, fallback the store's Python get (bound), max_key the largest key size. Each call reads
 * the state as it is now (the dicts and slots are the live ones, which the partition and the
 * overlay replace as they go), in the order of KeyValueStore.get's fast path:
 *
 *   a bytes key of 1..max_key bytes on an open store: the overlay's memory tier; on a miss,
 *   unless the overlay is layered, the writer's read transaction with the database's handle
 *   (txn.get(key, None, h)), the checksum trailer checked and stripped on a sealed partition.
 *
 * The state is kept in a KvGetState object (the builtin's self).
 *
 * Anything else (another key type or size, a closed store, a layered overlay, no writer
 * transaction or handle, a checksum mismatch, an error raised by txn.get, a state not of the
 * expected types) calls fallback(key), which gives the same result or raises the same typed
 * error as before (an lmdb.Error wrapped by txstore.engine.lmdb_errors.lmdb_error).
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "checksums.h"


static PyObject *str_is_open, *str_writer_txn, *str_writer_handles, *str_checksums, *str_get;

/* A store's get state. The last writer transaction seen is kept with its handle dict, the
 * transaction's bound `get` and a reusable argument tuple (key, None, handle): while the
 * partition keeps the same transaction (it replaces it and its handle dict together, never
 * changes them in place), a get makes no bound method, looks up no handle and allocates no
 * tuple. Holding
 * the bound method holds the transaction object (an ended one until the next get reads the new
 * one), never an LMDB transaction: the partition still ends it as before. */
typedef struct {
    PyObject_HEAD
    PyObject *reader, *ov, *mem_descr, *layered_descr, *part, *db, *fallback;
    descrgetfunc mem_get, layered_get;
    Py_ssize_t max_key;
    PyObject *txn, *handles, *bound, *args; /* the cache: NULL until the first read */
} Getter;

static PyObject *getter_type;

static int getter_traverse(PyObject *o, visitproc visit, void *arg) {
    Getter *g = (Getter *)o;
    Py_VISIT(g->reader);
    Py_VISIT(g->ov);
    Py_VISIT(g->mem_descr);
    Py_VISIT(g->layered_descr);
    Py_VISIT(g->part);
    Py_VISIT(g->db);
    Py_VISIT(g->fallback);
    Py_VISIT(g->txn);
    Py_VISIT(g->handles);
    Py_VISIT(g->bound);
    Py_VISIT(g->args);
    Py_VISIT(Py_TYPE(o)); /* a heap type */
    return 0;
}

static void drop_cache(Getter *g) {
    Py_CLEAR(g->txn);
    Py_CLEAR(g->handles);
    Py_CLEAR(g->bound);
    Py_CLEAR(g->args);
}

static int getter_clear(PyObject *o) {
    Getter *g = (Getter *)o;
    Py_CLEAR(g->reader);
    Py_CLEAR(g->ov);
    Py_CLEAR(g->mem_descr);
    Py_CLEAR(g->layered_descr);
    Py_CLEAR(g->part);
    Py_CLEAR(g->db);
    Py_CLEAR(g->fallback);
    drop_cache(g);
    return 0;
}

static void getter_dealloc(PyObject *o) {
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    getter_clear(o);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyType_Slot getter_slots[] = {
    {Py_tp_traverse, getter_traverse},
    {Py_tp_clear, getter_clear},
    {Py_tp_dealloc, getter_dealloc},
    {Py_tp_doc, "The state of one key-value store's C get (see csrc/kv_get.c)."},
    {0, NULL},
};

static PyType_Spec getter_spec = {
    "txstore._checksums.KvGetState", sizeof(Getter), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    getter_slots,
};

static PyObject *fallback(Getter *g, PyObject *key) {
    return PyObject_CallFunctionObjArgs(g->fallback, key, NULL);
}

/* Point the cache at (txn, handles): the bound txn.get and a tuple (None, None, h); 1 when
 * done, 0 when the database has no handle in handles (the general path), -1 on error. */
static int refill(Getter *g, PyObject *txn, PyObject *handles) {
    drop_cache(g);
    PyObject *h = PyDict_GetItemWithError(handles, g->db);
    if (h == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *bound = PyObject_GetAttr(txn, str_get);
    if (bound == NULL) return -1;
    PyObject *args = PyTuple_Pack(3, Py_None, Py_None, h);
    if (args == NULL) {
        Py_DECREF(bound);
        return -1;
    }
    Py_INCREF(txn);
    Py_INCREF(handles);
    g->txn = txn, g->handles = handles, g->bound = bound, g->args = args;
    return 1;
}

static PyObject *kv_get(PyObject *self, PyObject *key) {
    Getter *g = (Getter *)self;
    if (Py_TYPE(key) != &PyBytes_Type || g->reader == NULL) return fallback(g, key);
    Py_ssize_t n = PyBytes_Size(key);
    if (n <= 0 || n > g->max_key) return fallback(g, key);
    PyObject *is_open = PyDict_GetItemWithError(g->reader, str_is_open);
    if (is_open != Py_True) {
        if (PyErr_Occurred()) return NULL;
        return fallback(g, key);
    }
    PyObject *mem = g->mem_get(g->mem_descr, g->ov, NULL);
    if (mem == NULL) return NULL;
    if (Py_TYPE(mem) != &PyDict_Type) {
        Py_DECREF(mem);
        return fallback(g, key);
    }
    PyObject *v = PyDict_GetItemWithError(mem, key); /* borrowed: held by mem while it lives */
    if (v != NULL) {
        Py_INCREF(v);
        Py_DECREF(mem);
        return v; /* a staged value, or None for a staged delete */
    }
    Py_DECREF(mem);
    if (PyErr_Occurred()) return NULL;
    PyObject *layered = g->layered_get(g->layered_descr, g->ov, NULL);
    if (layered == NULL) return NULL;
    Py_DECREF(layered); /* compared by identity only */
    if (layered != Py_False) return fallback(g, key);

    PyObject *txn = PyDict_GetItemWithError(g->part, str_writer_txn);
    PyObject *sealed = txn == NULL ? NULL : PyDict_GetItemWithError(g->part, str_checksums);
    if (sealed == NULL || txn == Py_None || (sealed != Py_True && sealed != Py_False)) {
        if (PyErr_Occurred()) return NULL;
        return fallback(g, key);
    }
    if (txn != g->txn) {
        /* The partition sets writer_handles with each new writer_txn (the handles of the
         * databases as they were when it began) and never changes either in place: the same
         * transaction object (held by the cache, so never a new one at the same address)
         * means the same handle dict. */
        PyObject *handles = PyDict_GetItemWithError(g->part, str_writer_handles);
        if (handles == NULL || Py_TYPE(handles) != &PyDict_Type) {
            if (PyErr_Occurred()) return NULL;
            return fallback(g, key);
        }
        int r = refill(g, txn, handles);
        if (r <= 0) return r < 0 ? NULL : fallback(g, key);
    }
    PyObject *args = g->args, *stored;
    if (Py_REFCNT(args) == 1) { /* nobody kept it from the last call: reused */
        Py_INCREF(key);
        if (PyTuple_SetItem(args, 0, key) < 0) return NULL; /* steals key; drops the last */
        Py_INCREF(args);
    } else {
        args = PyTuple_Pack(3, key, Py_None, PyTuple_GetItem(g->args, 2));
        if (args == NULL) return NULL;
    }
    PyObject *bound = g->bound;
    Py_INCREF(bound); /* the cache may be refilled by the time the call returns */
    stored = PyObject_Call(bound, args, NULL);
    Py_DECREF(bound);
    Py_DECREF(args);
    if (stored == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear(); /* an lmdb.Error: the Python path reads again and raises the typed error */
        return fallback(g, key);
    }
    if (stored == Py_None || sealed == Py_False) return stored;
    /* the only reference to a value py-lmdb just made: stripped in place (see unseal_one) */
    PyObject *value = txs_unseal_owned(key, stored);
    Py_DECREF(stored);
    if (value == NULL && PyErr_ExceptionMatches(txs_checksum_error())) {
        PyErr_Clear(); /* the Python path reads it again, records the damage and raises */
        return fallback(g, key);
    }
    return value;
}

static PyMethodDef kv_get_def = {
    "get", kv_get, METH_O,
    "get(key) -> the value of key (uncommitted writes included), or None (see csrc/kv_get.c)"};

static descrgetfunc descr_get(PyObject *descr) {
    descrgetfunc f = (descrgetfunc)PyType_GetSlot(Py_TYPE(descr), Py_tp_descr_get);
    if (f == NULL) PyErr_SetString(PyExc_TypeError, "kv_getter(state): mem and layered must be descriptors");
    return f;
}

PyObject *txs_kv_getter(PyObject *self, PyObject *state) {
    (void)self;
    PyObject *reader, *ov, *mem_descr, *layered_descr, *part, *db, *fb;
    Py_ssize_t max_key;
    if (!PyArg_ParseTuple(state, "O!OOOO!O!On;kv_getter(state)", &PyDict_Type, &reader, &ov, &mem_descr,
                          &layered_descr, &PyDict_Type, &part, &PyBytes_Type, &db, &fb, &max_key))
        return NULL;
    descrgetfunc mem_get = descr_get(mem_descr), layered_get = descr_get(layered_descr);
    if (mem_get == NULL || layered_get == NULL) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)getter_type, Py_tp_alloc);
    Getter *g = (Getter *)alloc((PyTypeObject *)getter_type, 0);
    if (g == NULL) return NULL;
    PyObject *items[] = {reader, ov, mem_descr, layered_descr, part, db, fb};
    for (size_t i = 0; i < sizeof items / sizeof *items; i++) Py_INCREF(items[i]);
    g->reader = reader, g->ov = ov, g->mem_descr = mem_descr, g->layered_descr = layered_descr;
    g->part = part, g->db = db, g->fallback = fb, g->max_key = max_key;
    g->mem_get = mem_get, g->layered_get = layered_get;
    PyObject *f = PyCFunction_New(&kv_get_def, (PyObject *)g);
    Py_DECREF(g);
    return f;
}

int txs_kv_get_init(void) {
    str_is_open = PyUnicode_InternFromString("is_open");
    str_writer_txn = PyUnicode_InternFromString("writer_txn");
    str_writer_handles = PyUnicode_InternFromString("writer_handles");
    str_checksums = PyUnicode_InternFromString("checksums");
    str_get = PyUnicode_InternFromString("get");
    if (!str_is_open || !str_writer_txn || !str_writer_handles || !str_checksums || !str_get) return -1;
    getter_type = PyType_FromSpec(&getter_spec);
    return getter_type == NULL ? -1 : 0;
}
