/*
 * txcodecs: Kafka Streams state-store byte formats, in C.
 *
 * This header is read twice: by the C compiler (txcodecs.c includes it) and by the cffi
 * build script (csrc/build_ffi.py), which drops the preprocessor lines and feeds the rest to
 * ffi.cdef(). Keep it to plain declarations cffi understands: no macros with expressions, no
 * inline functions.
 *
 * Conventions
 *  - Every function that reads input takes (pointer, length) and never reads past it.
 *  - Functions return a count (>= 0) on success or a negative TXC_ERR_* code.
 *  - "Packed" batches: n items concatenated in one buffer plus an int64 length per item;
 *    a length of -1 means a null item (Java null), which occupies no bytes.
 *  - Output buffers are sized by the caller; a too-small buffer gives TXC_ERR_BUFFER_TOO_SMALL,
 *    never a write past `cap`. The *_bound() helpers give a safe capacity.
 *  - Value formats: TXC_FMT_PLAIN [value]; TXC_FMT_TIMESTAMPED [ts 8 BE][value];
 *    TXC_FMT_TS_HEADERS [varint hsize][headers][ts 8 BE][value];
 *    TXC_FMT_PLAIN_HEADERS [varint hsize][headers][value].
 */
#ifndef TXCODECS_H
#define TXCODECS_H

#include <stddef.h>
#include <stdint.h>

enum txc_error {
    TXC_OK = 0,
    TXC_ERR_TRUNCATED = -1,        /* input ends inside a field */
    TXC_ERR_VARINT_TOO_LONG = -2,  /* a varint runs past 5 bytes */
    TXC_ERR_NEGATIVE_LENGTH = -3,  /* a length field is negative (and not the -1 null marker) */
    TXC_ERR_LENGTH_PAST_END = -4,  /* a length field points past the end of the input */
    TXC_ERR_BUFFER_TOO_SMALL = -5, /* the caller's output buffer is too small */
    TXC_ERR_BAD_UTF8 = -6,         /* a header key is not valid UTF-8 */
    TXC_ERR_TRAILING = -7,         /* bytes left over after a complete structure */
    TXC_ERR_BAD_ARGUMENT = -8      /* an argument out of range (unknown format, size...) */
};

enum txc_format {
    TXC_FMT_PLAIN = 0,
    TXC_FMT_TIMESTAMPED = 1,
    TXC_FMT_TS_HEADERS = 2,
    TXC_FMT_PLAIN_HEADERS = 3
};

/* ---- varints (Kafka ByteUtils, 32-bit) ---- */
int txc_uvarint_encode(uint32_t value, uint8_t *out);
int txc_varint_encode(int32_t value, uint8_t *out);
int txc_uvarint_decode(const uint8_t *buf, size_t len, uint32_t *out);
int txc_varint_decode(const uint8_t *buf, size_t len, int32_t *out);
int64_t txc_varint_encode_batch(const int32_t *values, size_t n, uint8_t *out, size_t cap);
int64_t txc_varint_decode_batch(const uint8_t *buf, size_t len, int32_t *out, size_t max_n);

/* ---- record headers ---- */
/* Encode count headers. keys/klens: UTF-8 keys; vals/vlens: values, vlen -1 = null value.
 * count == 0 encodes to zero bytes. Returns bytes written. */
int64_t txc_headers_encode(size_t count, const uint8_t *keys, const int64_t *klens,
                           const uint8_t *vals, const int64_t *vlens, uint8_t *out, size_t cap);
/* Parse headersBytes. Writes 4 int64 per header into spans (key_off, key_len, val_off, val_len
 * with val_len -1 for null) for at most max_headers headers and returns the header count.
 * Accepts zero bytes and an explicit count of 0. Validates UTF-8 keys; rejects trailing bytes. */
int64_t txc_headers_decode(const uint8_t *buf, size_t len, int64_t *spans, size_t max_headers);
/* Count of headers in headersBytes without validating them (0 for empty input). */
int64_t txc_headers_count(const uint8_t *buf, size_t len);

/* ---- value formats ---- */
/* Split one stored value of format fmt into its parts: parts[0..5] =
 * (headers_off, headers_len, has_ts, ts, value_off, value_len). headers_len is 0 and
 * headers_off is 0 for formats without headers. Returns TXC_OK or an error. */
int txc_value_split(int fmt, const uint8_t *buf, size_t len, int64_t *parts);
/* Worst-case output size of converting the packed batch (total input bytes, n items) to any
 * format: input + n * (8 + 1 + 5). */
size_t txc_convert_bound(size_t total_len, size_t n);
/* Convert n values from one format to another (every direction; missing timestamps become -1,
 * missing headers become empty headers, a stripped field is dropped). Null stays null.
 * out_lens gets each output length (-1 for null). Returns total bytes written. */
int64_t txc_convert_batch(int from_fmt, int to_fmt, const uint8_t *data, const int64_t *lens,
                          size_t n, uint8_t *out, size_t cap, int64_t *out_lens);
/* Split n values of format fmt: parts gets 6 int64 per item as in txc_value_split, with
 * offsets relative to the start of `data`. Null items get value_len -1.
 * Returns n or the error of the first bad item (its index in *bad_index). */
int64_t txc_split_batch(int fmt, const uint8_t *data, const int64_t *lens, size_t n,
                        int64_t *parts, int64_t *bad_index);
/* Record converter (KIP-258 / KIP-1271 restore): changelog records (plain value, record
 * timestamp, serialized record headers) to stored values of format to_fmt.
 * Null values stay null. Returns total bytes written. */
int64_t txc_records_to_format_batch(int to_fmt, const uint8_t *values, const int64_t *vlens,
                                    const int64_t *timestamps, const uint8_t *headers,
                                    const int64_t *hlens, size_t n, uint8_t *out, size_t cap,
                                    int64_t *out_lens);

/* ---- window and session key schemas ---- */
/* [key][ts 8][seq 4] for n keys (packed, no nulls). Returns total bytes written. */
int64_t txc_window_keys_encode_batch(const uint8_t *keys, const int64_t *klens,
                                     const int64_t *timestamps, const int32_t *seqs, size_t n,
                                     uint8_t *out, size_t cap);
/* Extract from n window store keys: key length, timestamp and sequence number. */
int64_t txc_window_keys_extract_batch(const uint8_t *data, const int64_t *lens, size_t n,
                                      int64_t *key_lens, int64_t *timestamps, int32_t *seqs);
/* [key][end 8][start 8] for n keys. */
int64_t txc_session_keys_encode_batch(const uint8_t *keys, const int64_t *klens,
                                      const int64_t *ends, const int64_t *starts, size_t n,
                                      uint8_t *out, size_t cap);
int64_t txc_session_keys_extract_batch(const uint8_t *data, const int64_t *lens, size_t n,
                                       int64_t *key_lens, int64_t *ends, int64_t *starts);
/* OrderedBytes.upperRange(key, maxSuffix): returns bytes written. */
int64_t txc_ordered_upper_range(const uint8_t *key, size_t klen, const uint8_t *suffix,
                                size_t slen, uint8_t *out, size_t cap);
/* segmentId = ts / interval with Java's truncating division; interval must be >= 1. */
int64_t txc_segment_ids_batch(const int64_t *timestamps, size_t n, int64_t interval,
                              int64_t *out);

/* ---- columns: Arrow's binary layout (one data buffer, n + 1 int32 offsets, offsets[0] = 0) ---- */
/* The Spark reader's hot path: many stored rows split into columns with no per-row object.
 * Inputs are packed as above but hold no nulls (a length -1 is TXC_ERR_BAD_ARGUMENT); each
 * *_out data buffer needs the total input length; the total must stay below 2^31 (Arrow's int32
 * offsets), else TXC_ERR_BAD_ARGUMENT. Each returns n, or the error of the first bad item with
 * its index in *bad_index. */
/* Stored values of format fmt -> the plain values (values_out, value_offsets), the timestamps
 * (-1 where the format has none) and the serialized headers (headers_out, header_offsets; every
 * item empty where the format has none). */
int64_t txc_split_columns(int fmt, const uint8_t *data, const int64_t *lens, size_t n,
                          uint8_t *values_out, int32_t *value_offsets, int64_t *timestamps,
                          uint8_t *headers_out, int32_t *header_offsets, int64_t *bad_index);
/* Window store keys [key][ts 8][seq 4] -> keys (keys_out, key_offsets), timestamps, seqs. */
int64_t txc_window_key_columns(const uint8_t *data, const int64_t *lens, size_t n,
                               uint8_t *keys_out, int32_t *key_offsets, int64_t *timestamps,
                               int32_t *seqs, int64_t *bad_index);
/* Session store keys [key][end 8][start 8] -> keys (keys_out, key_offsets), ends, starts. */
int64_t txc_session_key_columns(const uint8_t *data, const int64_t *lens, size_t n,
                                uint8_t *keys_out, int32_t *key_offsets, int64_t *ends,
                                int64_t *starts, int64_t *bad_index);

/* ---- partitioner ---- */
int32_t txc_murmur2(const uint8_t *data, size_t len);
/* toPositive(murmur2(key)) % num_partitions for n packed keys. */
int64_t txc_partitions_batch(const uint8_t *keys, const int64_t *klens, size_t n,
                             int32_t num_partitions, int32_t *out);

#endif
