/* txcodecs: see txcodecs.h for the contract of every function. */
#include "txcodecs.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

static void put_be64(uint8_t *out, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)(u & 0xff);
        u >>= 8;
    }
}

/* Written as one expression, which compilers turn into a load and a byte swap (the loop form
 * cost ~30 instructions per call: a quarter of splitting a value with headers). */
static int64_t get_be64(const uint8_t *in) {
    return (int64_t)((uint64_t)in[0] << 56 | (uint64_t)in[1] << 48 | (uint64_t)in[2] << 40 |
                     (uint64_t)in[3] << 32 | (uint64_t)in[4] << 24 | (uint64_t)in[5] << 16 |
                     (uint64_t)in[6] << 8 | (uint64_t)in[7]);
}

static void put_be32(uint8_t *out, int32_t v) {
    uint32_t u = (uint32_t)v;
    out[0] = (uint8_t)(u >> 24);
    out[1] = (uint8_t)(u >> 16);
    out[2] = (uint8_t)(u >> 8);
    out[3] = (uint8_t)u;
}

static int32_t get_be32(const uint8_t *in) {
    return (int32_t)(((uint32_t)in[0] << 24) | ((uint32_t)in[1] << 16) | ((uint32_t)in[2] << 8) |
                     (uint32_t)in[3]);
}

static int valid_format(int fmt) { return fmt >= TXC_FMT_PLAIN && fmt <= TXC_FMT_PLAIN_HEADERS; }

static int has_headers(int fmt) { return fmt == TXC_FMT_TS_HEADERS || fmt == TXC_FMT_PLAIN_HEADERS; }

static int has_ts(int fmt) { return fmt == TXC_FMT_TIMESTAMPED || fmt == TXC_FMT_TS_HEADERS; }

/* Strict UTF-8 (the same set Python's bytes.decode("utf-8") accepts). */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp;
        uint32_t min;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1; cp = c & 0x1f; min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2; cp = c & 0x0f; min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3; cp = c & 0x07; min = 0x10000;
        } else {
            return 0;
        }
        if (n - i - 1 < need) return 0;
        for (size_t k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += need + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------ varints */

int txc_uvarint_encode(uint32_t value, uint8_t *out) {
    int n = 0;
    while ((value & 0xffffff80u) != 0) {
        out[n++] = (uint8_t)((value & 0x7f) | 0x80);
        value >>= 7;
    }
    out[n++] = (uint8_t)value;
    return n;
}

int txc_varint_encode(int32_t value, uint8_t *out) {
    uint32_t zz = ((uint32_t)value << 1) ^ (uint32_t)(value >> 31);
    return txc_uvarint_encode(zz, out);
}

/* Kafka's readUnsignedVarint: at most 5 bytes; value bits past 32 are dropped as Java's
 * int shift drops them. */
int txc_uvarint_decode(const uint8_t *buf, size_t len, uint32_t *out) {
    uint32_t value = 0;
    int shift = 0;
    for (size_t i = 0; i < 5; i++) {
        if (i >= len) return TXC_ERR_TRUNCATED;
        uint8_t b = buf[i];
        value |= (uint32_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = value;
            return (int)(i + 1);
        }
        shift += 7;
    }
    return TXC_ERR_VARINT_TOO_LONG;
}

int txc_varint_decode(const uint8_t *buf, size_t len, int32_t *out) {
    uint32_t u;
    int n = txc_uvarint_decode(buf, len, &u);
    if (n < 0) return n;
    *out = (int32_t)((u >> 1) ^ (~(u & 1) + 1));
    return n;
}

int64_t txc_varint_encode_batch(const int32_t *values, size_t n, uint8_t *out, size_t cap) {
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (cap - pos < 5) {
            uint8_t tmp[5];
            int w = txc_varint_encode(values[i], tmp);
            if (cap - pos < (size_t)w) return TXC_ERR_BUFFER_TOO_SMALL;
            memcpy(out + pos, tmp, (size_t)w);
            pos += (size_t)w;
        } else {
            pos += (size_t)txc_varint_encode(values[i], out + pos);
        }
    }
    return (int64_t)pos;
}

int64_t txc_varint_decode_batch(const uint8_t *buf, size_t len, int32_t *out, size_t max_n) {
    size_t pos = 0, count = 0;
    while (pos < len) {
        if (count >= max_n) return TXC_ERR_BUFFER_TOO_SMALL;
        int r = txc_varint_decode(buf + pos, len - pos, &out[count]);
        if (r < 0) return r;
        pos += (size_t)r;
        count++;
    }
    return (int64_t)count;
}

/* ------------------------------------------------------------------ headers */

/* Reads a signed varint length at *pos; allows -1 only when allow_null. */
static int read_len(const uint8_t *buf, size_t len, size_t *pos, int allow_null, int64_t *out) {
    int32_t v;
    int r = txc_varint_decode(buf + *pos, len - *pos, &v);
    if (r < 0) return r;
    *pos += (size_t)r;
    if (v < 0) {
        if (v == -1 && allow_null) {
            *out = -1;
            return TXC_OK;
        }
        return TXC_ERR_NEGATIVE_LENGTH;
    }
    if ((size_t)v > len - *pos) return TXC_ERR_LENGTH_PAST_END;
    *out = v;
    return TXC_OK;
}

int64_t txc_headers_encode(size_t count, const uint8_t *keys, const int64_t *klens,
                           const uint8_t *vals, const int64_t *vlens, uint8_t *out, size_t cap) {
    if (count == 0) return 0;
    if (count > INT32_MAX) return TXC_ERR_BAD_ARGUMENT;
    uint8_t tmp[5];
    size_t pos = 0;
    size_t koff = 0, voff = 0;
    int w = txc_varint_encode((int32_t)count, tmp);
    if ((size_t)w > cap) return TXC_ERR_BUFFER_TOO_SMALL;
    memcpy(out, tmp, (size_t)w);
    pos = (size_t)w;
    for (size_t i = 0; i < count; i++) {
        int64_t kl = klens[i], vl = vlens[i];
        if (kl < 0 || kl > INT32_MAX || vl < -1 || vl > INT32_MAX) return TXC_ERR_BAD_ARGUMENT;
        if (!utf8_valid(keys + koff, (size_t)kl)) return TXC_ERR_BAD_UTF8;
        w = txc_varint_encode((int32_t)kl, tmp);
        if (cap - pos < (size_t)w + (size_t)kl) return TXC_ERR_BUFFER_TOO_SMALL;
        memcpy(out + pos, tmp, (size_t)w);
        pos += (size_t)w;
        memcpy(out + pos, keys + koff, (size_t)kl);
        pos += (size_t)kl;
        koff += (size_t)kl;
        w = txc_varint_encode((int32_t)vl, tmp);
        size_t body = vl < 0 ? 0 : (size_t)vl;
        if (cap - pos < (size_t)w + body) return TXC_ERR_BUFFER_TOO_SMALL;
        memcpy(out + pos, tmp, (size_t)w);
        pos += (size_t)w;
        if (body) {
            memcpy(out + pos, vals + voff, body);
            pos += body;
            voff += body;
        }
    }
    return (int64_t)pos;
}

int64_t txc_headers_count(const uint8_t *buf, size_t len) {
    if (len == 0) return 0;
    int32_t count;
    int r = txc_varint_decode(buf, len, &count);
    if (r < 0) return r;
    if (count < 0) return TXC_ERR_NEGATIVE_LENGTH;
    return count;
}

int64_t txc_headers_decode(const uint8_t *buf, size_t len, int64_t *spans, size_t max_headers) {
    if (len == 0) return 0;
    size_t pos = 0;
    int32_t count;
    int r = txc_varint_decode(buf, len, &count);
    if (r < 0) return r;
    pos = (size_t)r;
    if (count < 0) return TXC_ERR_NEGATIVE_LENGTH;
    /* Each header needs at least 2 bytes, so a larger count cannot be genuine. */
    if ((size_t)count > (len - pos) / 2) return TXC_ERR_LENGTH_PAST_END;
    if ((size_t)count > max_headers) return TXC_ERR_BUFFER_TOO_SMALL;
    for (int32_t i = 0; i < count; i++) {
        int64_t kl, vl;
        if (pos >= len) return TXC_ERR_TRUNCATED;
        r = read_len(buf, len, &pos, 0, &kl);
        if (r < 0) return r;
        if (!utf8_valid(buf + pos, (size_t)kl)) return TXC_ERR_BAD_UTF8;
        spans[4 * i] = (int64_t)pos;
        spans[4 * i + 1] = kl;
        pos += (size_t)kl;
        if (pos >= len) return TXC_ERR_TRUNCATED;
        r = read_len(buf, len, &pos, 1, &vl);
        if (r < 0) return r;
        spans[4 * i + 2] = (int64_t)pos;
        spans[4 * i + 3] = vl;
        if (vl > 0) pos += (size_t)vl;
    }
    if (pos != len) return TXC_ERR_TRAILING;
    return count;
}

/* ------------------------------------------------------------------ value formats */

int txc_value_split(int fmt, const uint8_t *buf, size_t len, int64_t *parts) {
    if (!valid_format(fmt)) return TXC_ERR_BAD_ARGUMENT;
    size_t pos = 0;
    int64_t hoff = 0, hlen = 0;
    if (has_headers(fmt)) {
        if (len == 0) return TXC_ERR_TRUNCATED;
        int r = read_len(buf, len, &pos, 0, &hlen);
        if (r < 0) return r;
        hoff = (int64_t)pos;
        pos += (size_t)hlen;
    }
    parts[0] = hoff;
    parts[1] = hlen;
    if (has_ts(fmt)) {
        if (len - pos < 8) return TXC_ERR_TRUNCATED;
        parts[2] = 1;
        parts[3] = get_be64(buf + pos);
        pos += 8;
    } else {
        parts[2] = 0;
        parts[3] = -1;
    }
    parts[4] = (int64_t)pos;
    parts[5] = (int64_t)(len - pos);
    return TXC_OK;
}

size_t txc_convert_bound(size_t total_len, size_t n) { return total_len + n * (8 + 1 + 5); }

/* Writes [varint hlen][headers] (if to has headers), [ts] (if to has ts), [value]. */
static int64_t emit_value(int to_fmt, const uint8_t *h, size_t hlen, int64_t ts, const uint8_t *v,
                          size_t vlen, uint8_t *out, size_t cap) {
    size_t pos = 0;
    if (has_headers(to_fmt)) {
        uint8_t tmp[5];
        if (hlen > INT32_MAX) return TXC_ERR_BAD_ARGUMENT;
        int w = txc_varint_encode((int32_t)hlen, tmp);
        if (cap < (size_t)w + hlen) return TXC_ERR_BUFFER_TOO_SMALL;
        memcpy(out, tmp, (size_t)w);
        pos = (size_t)w;
        if (hlen) memcpy(out + pos, h, hlen);
        pos += hlen;
    }
    if (has_ts(to_fmt)) {
        if (cap - pos < 8) return TXC_ERR_BUFFER_TOO_SMALL;
        put_be64(out + pos, ts);
        pos += 8;
    }
    if (cap - pos < vlen) return TXC_ERR_BUFFER_TOO_SMALL;
    if (vlen) memcpy(out + pos, v, vlen);
    pos += vlen;
    return (int64_t)pos;
}

int64_t txc_convert_batch(int from_fmt, int to_fmt, const uint8_t *data, const int64_t *lens,
                          size_t n, uint8_t *out, size_t cap, int64_t *out_lens) {
    if (!valid_format(from_fmt) || !valid_format(to_fmt)) return TXC_ERR_BAD_ARGUMENT;
    size_t in = 0, pos = 0;
    int64_t parts[6];
    for (size_t i = 0; i < n; i++) {
        int64_t l = lens[i];
        if (l < 0) {
            if (l != -1) return TXC_ERR_BAD_ARGUMENT;
            out_lens[i] = -1;
            continue;
        }
        const uint8_t *item = data + in;
        int r = txc_value_split(from_fmt, item, (size_t)l, parts);
        if (r < 0) return r;
        int64_t w = emit_value(to_fmt, item + parts[0], (size_t)parts[1], parts[3],
                               item + parts[4], (size_t)parts[5], out + pos, cap - pos);
        if (w < 0) return w;
        out_lens[i] = w;
        pos += (size_t)w;
        in += (size_t)l;
    }
    return (int64_t)pos;
}

int64_t txc_split_batch(int fmt, const uint8_t *data, const int64_t *lens, size_t n,
                        int64_t *parts, int64_t *bad_index) {
    if (!valid_format(fmt)) return TXC_ERR_BAD_ARGUMENT;
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t *p = parts + 6 * i;
        int64_t l = lens[i];
        if (l < 0) {
            if (l != -1) {
                *bad_index = (int64_t)i;
                return TXC_ERR_BAD_ARGUMENT;
            }
            p[0] = p[1] = p[2] = 0;
            p[3] = -1;
            p[4] = (int64_t)in;
            p[5] = -1;
            continue;
        }
        int r = txc_value_split(fmt, data + in, (size_t)l, p);
        if (r < 0) {
            *bad_index = (int64_t)i;
            return r;
        }
        p[0] += (int64_t)in;
        p[4] += (int64_t)in;
        in += (size_t)l;
    }
    return (int64_t)n;
}

int64_t txc_records_to_format_batch(int to_fmt, const uint8_t *values, const int64_t *vlens,
                                    const int64_t *timestamps, const uint8_t *headers,
                                    const int64_t *hlens, size_t n, uint8_t *out, size_t cap,
                                    int64_t *out_lens) {
    if (!valid_format(to_fmt)) return TXC_ERR_BAD_ARGUMENT;
    size_t vin = 0, hin = 0, pos = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t vl = vlens[i], hl = hlens[i];
        if (vl < -1 || hl < 0) return TXC_ERR_BAD_ARGUMENT;
        const uint8_t *h = headers + hin;
        hin += (size_t)hl;
        if (vl == -1) {
            out_lens[i] = -1;
            continue;
        }
        int64_t w = emit_value(to_fmt, h, (size_t)hl, timestamps[i], values + vin, (size_t)vl,
                               out + pos, cap - pos);
        if (w < 0) return w;
        out_lens[i] = w;
        pos += (size_t)w;
        vin += (size_t)vl;
    }
    return (int64_t)pos;
}

/* ------------------------------------------------------------------ key schemas */

int64_t txc_window_keys_encode_batch(const uint8_t *keys, const int64_t *klens,
                                     const int64_t *timestamps, const int32_t *seqs, size_t n,
                                     uint8_t *out, size_t cap) {
    size_t in = 0, pos = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t kl = klens[i];
        if (kl < 0) return TXC_ERR_BAD_ARGUMENT;
        if (cap - pos < (size_t)kl + 12) return TXC_ERR_BUFFER_TOO_SMALL;
        memcpy(out + pos, keys + in, (size_t)kl);
        pos += (size_t)kl;
        in += (size_t)kl;
        put_be64(out + pos, timestamps[i]);
        put_be32(out + pos + 8, seqs[i]);
        pos += 12;
    }
    return (int64_t)pos;
}

int64_t txc_window_keys_extract_batch(const uint8_t *data, const int64_t *lens, size_t n,
                                      int64_t *key_lens, int64_t *timestamps, int32_t *seqs) {
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t l = lens[i];
        if (l < 12) return l < 0 ? TXC_ERR_BAD_ARGUMENT : TXC_ERR_TRUNCATED;
        const uint8_t *k = data + in;
        key_lens[i] = l - 12;
        timestamps[i] = get_be64(k + l - 12);
        seqs[i] = get_be32(k + l - 4);
        in += (size_t)l;
    }
    return (int64_t)n;
}

int64_t txc_session_keys_encode_batch(const uint8_t *keys, const int64_t *klens,
                                      const int64_t *ends, const int64_t *starts, size_t n,
                                      uint8_t *out, size_t cap) {
    size_t in = 0, pos = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t kl = klens[i];
        if (kl < 0) return TXC_ERR_BAD_ARGUMENT;
        if (cap - pos < (size_t)kl + 16) return TXC_ERR_BUFFER_TOO_SMALL;
        memcpy(out + pos, keys + in, (size_t)kl);
        pos += (size_t)kl;
        in += (size_t)kl;
        put_be64(out + pos, ends[i]);
        put_be64(out + pos + 8, starts[i]);
        pos += 16;
    }
    return (int64_t)pos;
}

int64_t txc_session_keys_extract_batch(const uint8_t *data, const int64_t *lens, size_t n,
                                       int64_t *key_lens, int64_t *ends, int64_t *starts) {
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t l = lens[i];
        if (l < 16) return l < 0 ? TXC_ERR_BAD_ARGUMENT : TXC_ERR_TRUNCATED;
        const uint8_t *k = data + in;
        key_lens[i] = l - 16;
        ends[i] = get_be64(k + l - 16);
        starts[i] = get_be64(k + l - 8);
        in += (size_t)l;
    }
    return (int64_t)n;
}

int64_t txc_ordered_upper_range(const uint8_t *key, size_t klen, const uint8_t *suffix,
                                size_t slen, uint8_t *out, size_t cap) {
    if (slen == 0) return TXC_ERR_BAD_ARGUMENT;
    size_t keep = klen;
    uint8_t first = suffix[0];
    if (first != 0 && klen > 0) {
        keep = 1; /* always keep at least one byte of the key */
        while (keep < klen && key[keep] >= first) keep++;
    }
    if (cap < keep + slen) return TXC_ERR_BUFFER_TOO_SMALL;
    memcpy(out, key, keep);
    memcpy(out + keep, suffix, slen);
    return (int64_t)(keep + slen);
}

int64_t txc_segment_ids_batch(const int64_t *timestamps, size_t n, int64_t interval,
                              int64_t *out) {
    if (interval < 1) return TXC_ERR_BAD_ARGUMENT;
    for (size_t i = 0; i < n; i++) out[i] = timestamps[i] / interval; /* C truncates like Java */
    return (int64_t)n;
}

/* ------------------------------------------------------------------ murmur2 */

int32_t txc_murmur2(const uint8_t *data, size_t len) {
    const uint32_t seed = 0x9747b28cu, m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = seed ^ (uint32_t)len;
    size_t blocks = len / 4;
    for (size_t i = 0; i < blocks; i++) {
        const uint8_t *d = data + 4 * i;
        uint32_t k = (uint32_t)d[0] | ((uint32_t)d[1] << 8) | ((uint32_t)d[2] << 16) |
                     ((uint32_t)d[3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + (len & ~(size_t)3);
    switch (len % 4) {
        case 3:
            h ^= (uint32_t)tail[2] << 16;
            /* fall through */
        case 2:
            h ^= (uint32_t)tail[1] << 8;
            /* fall through */
        case 1:
            h ^= (uint32_t)tail[0];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

int64_t txc_partitions_batch(const uint8_t *keys, const int64_t *klens, size_t n,
                             int32_t num_partitions, int32_t *out) {
    if (num_partitions < 1) return TXC_ERR_BAD_ARGUMENT;
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t kl = klens[i];
        if (kl < 0) return TXC_ERR_BAD_ARGUMENT;
        int32_t h = txc_murmur2(keys + in, (size_t)kl);
        out[i] = (int32_t)(((uint32_t)h & 0x7fffffffu) % (uint32_t)num_partitions);
        in += (size_t)kl;
    }
    return (int64_t)n;
}

/* ------------------------------------------------------------------ columns */

/* A column item: its length must be >= 0 (columns hold no nulls) and the column's data must
 * stay below 2^31 bytes (Arrow's int32 offsets). */
static int column_item_ok(int64_t len, size_t total) {
    return len >= 0 && (uint64_t)len <= (uint64_t)INT32_MAX - total;
}

/* The input of a column function: packed items (data + lens, as the batch functions take).
 * (A list of bytes is read in place by the builtins of csrc/columns.c instead.) */
typedef struct {
    const uint8_t *data;
    const int64_t *lens;
    size_t pos; /* where the next item starts in data */
} column_input;

/* The next item of `in` (the i-th): its bytes and length, or TXC_ERR_BAD_ARGUMENT for a null
 * (length -1). `total` is the column's length so far (for the 2 GiB limit). */
static int next_item(column_input *in, size_t i, size_t total, const uint8_t **item,
                     size_t *len) {
    int64_t l = in->lens[i];
    if (!column_item_ok(l, total)) return TXC_ERR_BAD_ARGUMENT;
    *item = in->data + in->pos;
    in->pos += (size_t)l;
    *len = (size_t)l;
    return 0;
}

static void packed_start(column_input *in, const uint8_t *data, const int64_t *lens) {
    memset(in, 0, sizeof *in);
    in->data = data;
    in->lens = lens;
}

/* The columns continue from value_offsets[0] and header_offsets[0]. */
static int64_t split_columns(int fmt, column_input *in, size_t n, size_t cap,
                             uint8_t *values_out, int32_t *value_offsets, int64_t *timestamps,
                             uint8_t *headers_out, int32_t *header_offsets, int64_t *bad_index) {
    if (!valid_format(fmt)) return TXC_ERR_BAD_ARGUMENT;
    size_t vpos = (size_t)value_offsets[0], hpos = (size_t)header_offsets[0];
    int64_t parts[6];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *item;
        size_t l;
        int r = next_item(in, i, vpos > hpos ? vpos : hpos, &item, &l);
        if (r == 0) r = txc_value_split(fmt, item, l, parts);
        if (r == 0 && ((size_t)parts[1] > cap - hpos || (size_t)parts[5] > cap - vpos))
            r = TXC_ERR_BUFFER_TOO_SMALL;
        if (r < 0) {
            *bad_index = (int64_t)i;
            return r;
        }
        memcpy(headers_out + hpos, item + parts[0], (size_t)parts[1]);
        hpos += (size_t)parts[1];
        memcpy(values_out + vpos, item + parts[4], (size_t)parts[5]);
        vpos += (size_t)parts[5];
        timestamps[i] = parts[3];
        value_offsets[i + 1] = (int32_t)vpos;
        header_offsets[i + 1] = (int32_t)hpos;
    }
    return (int64_t)n;
}

int64_t txc_split_columns(int fmt, const uint8_t *data, const int64_t *lens, size_t n,
                          uint8_t *values_out, int32_t *value_offsets, int64_t *timestamps,
                          uint8_t *headers_out, int32_t *header_offsets, int64_t *bad_index) {
    column_input in;
    packed_start(&in, data, lens);
    *bad_index = 0;
    value_offsets[0] = 0;
    header_offsets[0] = 0;
    return split_columns(fmt, &in, n, SIZE_MAX, values_out, value_offsets, timestamps,
                         headers_out, header_offsets, bad_index);
}

/* Shared by the window and session key columns: the key of each item is all but its last
 * `suffix` bytes, copied to keys_out from key_offsets[0] on; the suffix holds two big-endian
 * fields, an int64 (to `first`) and an int64 (to `second64`) or, when second64 is NULL, an
 * int32 (to `second32`). */
static int64_t key_columns(column_input *in, size_t n, size_t suffix, size_t cap,
                           uint8_t *keys_out, int32_t *key_offsets, int64_t *first,
                           int64_t *second64, int32_t *second32, int64_t *bad_index) {
    size_t pos = (size_t)key_offsets[0];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *item;
        size_t l;
        int r = next_item(in, i, pos, &item, &l);
        if (r == 0 && l < suffix) r = TXC_ERR_TRUNCATED;
        if (r == 0 && l - suffix > cap - pos) r = TXC_ERR_BUFFER_TOO_SMALL;
        if (r < 0) {
            *bad_index = (int64_t)i;
            return r;
        }
        size_t kl = l - suffix;
        memcpy(keys_out + pos, item, kl);
        pos += kl;
        key_offsets[i + 1] = (int32_t)pos;
        first[i] = get_be64(item + kl);
        if (second64 != NULL) second64[i] = get_be64(item + kl + 8);
        else second32[i] = get_be32(item + kl + 8);
    }
    return (int64_t)n;
}

int64_t txc_window_key_columns(const uint8_t *data, const int64_t *lens, size_t n,
                               uint8_t *keys_out, int32_t *key_offsets, int64_t *timestamps,
                               int32_t *seqs, int64_t *bad_index) {
    column_input in;
    packed_start(&in, data, lens);
    *bad_index = 0;
    key_offsets[0] = 0;
    return key_columns(&in, n, 12, SIZE_MAX, keys_out, key_offsets, timestamps, NULL, seqs,
                       bad_index);
}

int64_t txc_session_key_columns(const uint8_t *data, const int64_t *lens, size_t n,
                                uint8_t *keys_out, int32_t *key_offsets, int64_t *ends,
                                int64_t *starts, int64_t *bad_index) {
    column_input in;
    packed_start(&in, data, lens);
    *bad_index = 0;
    key_offsets[0] = 0;
    return key_columns(&in, n, 16, SIZE_MAX, keys_out, key_offsets, ends, starts, NULL,
                       bad_index);
}
