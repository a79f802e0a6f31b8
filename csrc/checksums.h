/* What csrc/checksums.c shares with the other C file of the txstore._checksums extension
 * (csrc/restore_rows.c). */
#ifndef TXSTORE_CHECKSUMS_H
#define TXSTORE_CHECKSUMS_H

#include <stdint.h>

/* crc32c(key || value): the entry checksum of docs/formats.md. */
uint32_t txs_entry_crc(const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn);
/* Write c at p, little-endian (the trailer's byte order). */
void txs_put_le32(char *p, uint32_t c);
/* restore_rows(keys, values, timestamps, headers, fmt, seal, max_key): csrc/restore_rows.c. */
PyObject *txs_restore_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
