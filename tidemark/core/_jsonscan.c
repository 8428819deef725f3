/* One validating pass over a Debezium JSON change event: where its parts are, what its
 * position is; over a reconciled one (the processor's output, which the Spark sink reads):
 * its op and where its after is. See tidemark/core/json_scan.py for the contract; in short:
 *
 * - The bytes scanned must be exactly one JSON value of RFC 8259, in valid UTF-8. What is
 *   not, and what this scanner does not want to judge (escaped member names, lone
 *   surrogate escapes, duplicate members it reads, nesting deeper than MAX_DEPTH, numbers
 *   it must read that do not fit 64 bits), is *declined*: the function returns None and
 *   the caller's general path (orjson) decides. The scanner never rejects a message.
 * - Nothing is allocated but the result tuple; every read is bounds-checked against the
 *   end the caller gave.
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "jsonscan_api.h"
#include "sources_digest.h"

#define MAX_DEPTH 256

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* One UTF-8 sequence of two or more bytes starting at c->p (its lead byte >= 0x80). */
static int utf8_sequence(cursor *c) {
    const unsigned char *p = c->p;
    ptrdiff_t left = c->end - p;
    unsigned char b0 = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 == 0xE0) { n = 3; lo = 0xA0; }
    else if (b0 >= 0xE1 && b0 <= 0xEC) n = 3;
    else if (b0 == 0xED) { n = 3; hi = 0x9F; }
    else if (b0 >= 0xEE && b0 <= 0xEF) n = 3;
    else if (b0 == 0xF0) { n = 4; lo = 0x90; }
    else if (b0 >= 0xF1 && b0 <= 0xF3) n = 4;
    else if (b0 == 0xF4) { n = 4; hi = 0x8F; }
    else return -1;
    if (left < n) return -1;
    if (p[1] < lo || p[1] > hi) return -1;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return -1;
    c->p += n;
    return 0;
}

/* Bytes a string may hold as they are: printable ASCII but the quote and the backslash. */
static unsigned char plain[256];

static void init_plain(void) {
    for (int b = 0x20; b < 0x80; b++) plain[b] = b != '"' && b != '\\';
}

/* A string at c->p (its opening quote). Sets *escaped when it holds an escape. */
static int scan_string(cursor *c, int *escaped) {
    c->p++; /* the opening quote */
    *escaped = 0;
    for (;;) {
        while (c->p < c->end && plain[*c->p]) c->p++;
        if (c->p >= c->end) return -1;
        unsigned char ch = *c->p;
        if (ch == '"') {
            c->p++;
            return 0;
        }
        if (ch < 0x20) return -1;
        if (ch == '\\') {
            *escaped = 1;
            if (c->end - c->p < 2) return -1;
            unsigned char e = c->p[1];
            if (e == 'u') {
                unsigned v;
                if (c->end - c->p < 6 || hex4(c->p + 2, &v)) return -1;
                c->p += 6;
                if (v >= 0xDC00 && v <= 0xDFFF) return -1; /* a lone low surrogate */
                if (v >= 0xD800 && v <= 0xDBFF) {           /* needs its low half */
                    unsigned w;
                    if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' ||
                        hex4(c->p + 2, &w) || w < 0xDC00 || w > 0xDFFF)
                        return -1;
                    c->p += 6;
                }
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                e == 'r' || e == 't') {
                c->p += 2;
                continue;
            }
            return -1;
        }
        if (ch < 0x80) {
            c->p++;
            continue;
        }
        if (utf8_sequence(c)) return -1;
    }
}

/* A number at c->p. With out non-NULL: it must be an integer that fits int64. */
static int scan_number(cursor *c, int64_t *out, int *is_int) {
    const unsigned char *start = c->p;
    int negative = 0;
    uint64_t magnitude = 0;
    int overflow = 0;
    long digits = 0, exponent = 0;
    int exponent_negative = 0;
    *is_int = 1;
    if (c->p < c->end && *c->p == '-') {
        negative = 1;
        c->p++;
    }
    if (c->p >= c->end) return -1;
    if (*c->p == '0') {
        c->p++;
        digits = 1;
    } else if (*c->p >= '1' && *c->p <= '9') {
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            unsigned d = (unsigned)(*c->p - '0');
            if (magnitude > (UINT64_MAX - d) / 10) overflow = 1;
            else magnitude = magnitude * 10 + d;
            digits++;
            c->p++;
        }
    } else {
        return -1;
    }
    if (c->p < c->end && *c->p == '.') {
        *is_int = 0;
        c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        *is_int = 0;
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) exponent_negative = *c->p++ == '-';
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (exponent < 100000) exponent = exponent * 10 + (*c->p - '0');
            c->p++;
        }
    }
    (void)start;
    /* orjson reads a number that is no 64-bit integer as a double and refuses one that
     * overflows it: such numbers (and some near them) are declined. */
    if ((!*is_int || overflow) && digits - 1 + (exponent_negative ? -exponent : exponent) > 300)
        return -1;
    if (out != NULL) {
        if (!*is_int || overflow) return -1;
        if (negative) {
            if (magnitude > (uint64_t)INT64_MAX + 1) return -1;
            *out = magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude;
        } else {
            if (magnitude > (uint64_t)INT64_MAX) return -1;
            *out = (int64_t)magnitude;
        }
    }
    return 0;
}

static int literal(cursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int scan_value(cursor *c, int depth);

/* After a member or an element: past its comma (1: another follows) or past the
 * container's close (0); -1 for anything else. */
static int next_item(cursor *c, unsigned char close) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        return 1;
    }
    if (*c->p != close) return -1;
    c->p++;
    return 0;
}

static int scan_container(cursor *c, int depth, unsigned char close) {
    if (depth >= MAX_DEPTH) return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        skip_ws(c);
        if (close == '}') {
            int escaped;
            if (c->p >= c->end || *c->p != '"' || scan_string(c, &escaped)) return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return -1;
            c->p++;
            skip_ws(c);
        }
        if (scan_value(c, depth + 1)) return -1;
        int more = next_item(c, close);
        if (more <= 0) return more;
    }
}

static int scan_value(cursor *c, int depth) {
    if (c->p >= c->end) return -1;
    int escaped, is_int;
    switch (*c->p) {
    case '{': return scan_container(c, depth, '}');
    case '[': return scan_container(c, depth, ']');
    case '"': return scan_string(c, &escaped);
    case 't': return literal(c, "true", 4);
    case 'f': return literal(c, "false", 5);
    case 'n': return literal(c, "null", 4);
    default: return scan_number(c, NULL, &is_int);
    }
}

/* A member name at c->p, unescaped (escaped names are declined), then its colon. */
static int member_name(cursor *c, const unsigned char **name, Py_ssize_t *len) {
    int escaped;
    if (c->p >= c->end || *c->p != '"') return -1;
    const unsigned char *start = c->p + 1;
    if (scan_string(c, &escaped) || escaped) return -1;
    *name = start;
    *len = (c->p - 1) - start;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_ws(c);
    return 0;
}

#define IS(name, len, word) ((len) == (Py_ssize_t)(sizeof(word) - 1) && memcmp((name), (word), (len)) == 0)

/* A quote of a sequence element: \" inside a JSON string's raw bytes (escaped), else ". */
static int sequence_quote(cursor *c, int escaped) {
    if (escaped) {
        if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != '"') return -1;
        c->p += 2;
        return 0;
    }
    if (c->p >= c->end || *c->p != '"') return -1;
    c->p++;
    return 0;
}

/* Digits of one element of PostgreSQL's ``source.sequence``: null (-1) or "<digits>". */
static int sequence_element(cursor *c, int64_t *out, int escaped) {
    if (literal(c, "null", 4) == 0) {
        *out = -1;
        return 0;
    }
    if (sequence_quote(c, escaped)) return -1;
    uint64_t v = 0;
    const unsigned char *digits = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
        c->p++;
    }
    if (c->p == digits) return -1;
    if (sequence_quote(c, escaped)) return -1;
    *out = (int64_t)v;
    return 0;
}

/* ``source.sequence``'s content: [a,b], its quotes escaped (a JSON string's raw bytes) or
 * not (the string's value). A null commit part (Debezium's own snapshot rows, read at the
 * position b) is b: the rows come after every change committed before b and before every
 * change streamed after it (processor.events.change.source_version); a null b is 0. */
static int parse_sequence(const unsigned char *p, const unsigned char *end, int64_t *a, int64_t *b,
                          int escaped) {
    cursor c = {p, end};
    if (c.p >= c.end || *c.p != '[') return -1;
    c.p++;
    if (sequence_element(&c, a, escaped)) return -1;
    if (c.p >= c.end || *c.p != ',') return -1;
    c.p++;
    if (sequence_element(&c, b, escaped)) return -1;
    if (c.p >= c.end || *c.p != ']') return -1;
    c.p++;
    if (*b < 0) *b = 0;
    if (*a < 0) *a = *b;
    return c.p == c.end ? 0 : -1;
}

typedef struct {
    int txid_seen, txid_present;
    int64_t txid;
    int lsn_seen, lsn_present;
    int64_t lsn;
    int seq_seen, seq_present;
    int64_t seq_a, seq_b;
    int snapshot_seen, snapshot;
    int connector_seen, connector;
} source_info;

/* A string value's unescaped content, or -1 (escaped strings are declined). */
static int plain_string(cursor *c, const unsigned char **s, Py_ssize_t *len) {
    int escaped;
    const unsigned char *start = c->p + 1;
    if (scan_string(c, &escaped) || escaped) return -1;
    *s = start;
    *len = (c->p - 1) - start;
    return 0;
}

static int scan_source(cursor *c, source_info *info) {
    c->p++; /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        const unsigned char *name;
        Py_ssize_t len;
        skip_ws(c);
        if (member_name(c, &name, &len)) return -1;
        if (c->p >= c->end) return -1;
        int is_int;
        if (IS(name, len, "txId")) {
            if (info->txid_seen++) return -1;
            if (*c->p == 'n') {
                if (literal(c, "null", 4)) return -1;
            } else {
                if (scan_number(c, &info->txid, &is_int)) return -1;
                info->txid_present = 1;
            }
        } else if (IS(name, len, "lsn")) {
            if (info->lsn_seen++) return -1;
            if (*c->p == 'n') {
                if (literal(c, "null", 4)) return -1;
            } else {
                if (scan_number(c, &info->lsn, &is_int)) return -1;
                info->lsn_present = 1;
            }
        } else if (IS(name, len, "sequence")) {
            if (info->seq_seen++) return -1;
            if (*c->p == 'n') {
                if (literal(c, "null", 4)) return -1;
            } else {
                /* An escaped string, read raw: its content is checked by parse_sequence. */
                int escaped;
                if (*c->p != '"') return -1;
                const unsigned char *start = c->p + 1;
                if (scan_string(c, &escaped)) return -1;
                const unsigned char *stop = c->p - 1;
                if (stop > start) {
                    if (parse_sequence(start, stop, &info->seq_a, &info->seq_b, 1)) return -1;
                    info->seq_present = 1;
                }
            }
        } else if (IS(name, len, "snapshot")) {
            if (info->snapshot_seen++) return -1;
            if (*c->p == '"') {
                const unsigned char *s;
                Py_ssize_t n;
                if (plain_string(c, &s, &n)) return -1;
                if (IS(s, n, "true") || IS(s, n, "first") || IS(s, n, "last") ||
                    IS(s, n, "first_in_data_collection") || IS(s, n, "last_in_data_collection"))
                    info->snapshot = 1;
                else if (IS(s, n, "incremental"))
                    info->snapshot = 2;
            } else if (scan_value(c, 2)) {
                return -1;
            }
        } else if (IS(name, len, "connector")) {
            if (info->connector_seen++) return -1;
            if (*c->p == 'n') {
                if (literal(c, "null", 4)) return -1;
            } else {
                const unsigned char *s;
                Py_ssize_t n;
                if (*c->p != '"' || plain_string(c, &s, &n)) return -1;
                info->connector = IS(s, n, "postgresql") ? 1 : IS(s, n, "mysql") ? 2 : 3;
            }
        } else if (scan_value(c, 2)) {
            return -1;
        }
        int more = next_item(c, '}');
        if (more <= 0) return more;
    }
}

static const char PLACEHOLDER[] = "__debezium_unavailable_value";
static const char PLACEHOLDER_BASE64[] = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==";

static int holds(const unsigned char *p, Py_ssize_t n, const char *needle, size_t k) {
    return n >= (Py_ssize_t)k && memmem(p, (size_t)n, needle, k) != NULL;
}

/* The arguments (buf: bytes, start: int, end: int) as a cursor over buf[start:end], and
 * buf's first byte; -1 with a Python error set when they are not that. */
static int arguments(PyObject *const *args, Py_ssize_t nargs, const char *usage, cursor *c,
                     const unsigned char **base) {
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || end == -1) && PyErr_Occurred()) return -1;
    if (start < 0 || end > PyBytes_GET_SIZE(args[0]) || start > end) {
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the bytes");
        return -1;
    }
    *base = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    c->p = *base + start;
    c->end = *base + end;
    return 0;
}

/* scan_change's work on base[start:end]: 0 with *out filled, 1 declined. */
static int scan_change_at(const unsigned char *base, Py_ssize_t start, Py_ssize_t end,
                          jsonscan_change *out) {
    cursor c = {base + start, base + end};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return 1;
    const unsigned char *open = c.p;
    c.p++;
    const unsigned char *before = NULL, *before_end = NULL, *after = NULL, *after_end = NULL;
    int op = 0, op_seen = 0, ts_seen = 0, source_seen = 0;
    source_info info;
    memset(&info, 0, sizeof info);
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') return 1;
    for (;;) {
        const unsigned char *name;
        Py_ssize_t len;
        skip_ws(&c);
        if (member_name(&c, &name, &len) || c.p >= c.end) return 1;
        if (IS(name, len, "before") || IS(name, len, "after")) {
            int is_before = name[0] == 'b';
            if (is_before ? before != NULL : after != NULL) return 1;
            const unsigned char *at = c.p;
            if (*c.p == 'n') {
                if (literal(&c, "null", 4)) return 1;
            } else if (*c.p != '{' || scan_container(&c, 1, '}')) {
                return 1;
            }
            if (is_before) { before = at; before_end = c.p; }
            else { after = at; after_end = c.p; }
        } else if (IS(name, len, "op")) {
            const unsigned char *s;
            Py_ssize_t n;
            if (op_seen++ || *c.p != '"' || plain_string(&c, &s, &n) || n != 1) return 1;
            op = s[0];
            if (op != 'c' && op != 'u' && op != 'd' && op != 'r') return 1;
        } else if (IS(name, len, "source")) {
            if (source_seen++ || *c.p != '{' || scan_source(&c, &info)) return 1;
        } else if (IS(name, len, "ts_ms")) {
            if (ts_seen++ || *c.p == 'n' || scan_value(&c, 1)) return 1;
        } else if (IS(name, len, "tidemark")) {
            return 1; /* an event of ours again: the general path replaces it */
        } else if (scan_value(&c, 1)) {
            return 1;
        }
        int more = next_item(&c, '}');
        if (more < 0) return 1;
        if (!more) break;
    }
    const unsigned char *close = c.p - 1;
    skip_ws(&c);
    if (c.p != c.end || before == NULL || after == NULL || !op_seen || !source_seen || !ts_seen)
        return 1;
    int after_row = *after == '{', before_row = *before == '{';
    if ((op == 'd') == after_row) return 1; /* a delete has no after, the rest have one */
    if (info.seq_present) {
        out->major = info.seq_a;
        out->minor = info.seq_b;
    } else if (info.lsn_present) {
        out->major = out->minor = info.lsn;
    } else {
        return 1; /* MySQL's binlog position, or none: the general path */
    }
    out->toast = after_row &&
                 (holds(after, after_end - after, PLACEHOLDER, sizeof PLACEHOLDER - 1) ||
                  holds(after, after_end - after, PLACEHOLDER_BASE64, sizeof PLACEHOLDER_BASE64 - 1));
    out->before = before - base;
    out->before_end = before_end - base;
    out->after = after - base;
    out->after_end = after_end - base;
    out->before_row = before_row;
    out->op = op;
    out->txid_present = info.txid_present;
    out->txid = info.txid;
    out->snapshot = info.snapshot;
    out->connector = info.connector;
    out->open = open - base;
    out->close = close - base;
    return 0;
}

static PyObject *scan_change(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    cursor c;
    const unsigned char *base;
    if (arguments(args, nargs, "scan_change(buf: bytes, start: int, end: int)", &c, &base))
        return NULL;
    jsonscan_change found;
    if (scan_change_at(base, c.p - base, c.end - base, &found)) Py_RETURN_NONE;
    PyObject *txid = found.txid_present ? PyLong_FromLongLong(found.txid) : Py_NewRef(Py_None);
    if (txid == NULL) return NULL;
    return Py_BuildValue(
        "(nnnnOiLLNiiinn)", found.before, found.before_end, found.after, found.after_end,
        found.before_row ? Py_True : Py_False, found.op, (long long)found.major,
        (long long)found.minor, txid, found.snapshot, found.connector, found.toast, found.open,
        found.close);
}

/* The op and the after of a reconciled event's payload buf[start:end] (the processor's
 * output: any members, a ``tidemark`` one among them), or None (declined): (op, row, after,
 * after_end). op is the op's character when it is a one-byte string, else 0 (none, another
 * string, another value); an escaped op is declined. The span is after's value, a row
 * object (row true) or null; both -1 when there is no after member. An after that is
 * neither, a duplicate op or after, and what the other scanners decline are declined. */
static PyObject *scan_envelope(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    cursor c;
    const unsigned char *base;
    if (arguments(args, nargs, "scan_envelope(buf: bytes, start: int, end: int)", &c, &base))
        return NULL;
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') Py_RETURN_NONE;
    c.p++;
    const unsigned char *after = NULL, *after_end = NULL;
    int op = 0, op_seen = 0;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            const unsigned char *name;
            Py_ssize_t len;
            skip_ws(&c);
            if (member_name(&c, &name, &len) || c.p >= c.end) Py_RETURN_NONE;
            if (IS(name, len, "after")) {
                if (after != NULL) Py_RETURN_NONE;
                after = c.p;
                if (*c.p == 'n') {
                    if (literal(&c, "null", 4)) Py_RETURN_NONE;
                } else if (*c.p != '{' || scan_container(&c, 1, '}')) {
                    Py_RETURN_NONE;
                }
                after_end = c.p;
            } else if (IS(name, len, "op")) {
                if (op_seen++) Py_RETURN_NONE;
                if (*c.p == '"') {
                    const unsigned char *s;
                    Py_ssize_t n;
                    if (plain_string(&c, &s, &n)) Py_RETURN_NONE;
                    op = n == 1 ? s[0] : 0;
                } else if (scan_value(&c, 1)) {
                    Py_RETURN_NONE;
                }
            } else if (scan_value(&c, 1)) {
                Py_RETURN_NONE;
            }
            int more = next_item(&c, '}');
            if (more < 0) Py_RETURN_NONE;
            if (!more) break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) Py_RETURN_NONE;
    if (after == NULL)
        return Py_BuildValue("(iOnn)", op, Py_False, (Py_ssize_t)-1, (Py_ssize_t)-1);
    return Py_BuildValue("(iOnn)", op, *after == '{' ? Py_True : Py_False,
                         (Py_ssize_t)(after - base), (Py_ssize_t)(after_end - base));
}

static int scan_object_at(const unsigned char *base, Py_ssize_t start, Py_ssize_t end) {
    cursor c = {base + start, base + end};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{' || scan_container(&c, 0, '}')) return 0;
    skip_ws(&c);
    return c.p == c.end;
}

static PyObject *scan_object(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    cursor c;
    const unsigned char *base;
    if (arguments(args, nargs, "scan_object(buf: bytes, start: int, end: int)", &c, &base))
        return NULL;
    return PyBool_FromLong(scan_object_at(base, c.p - base, c.end - base));
}

/* Whether buf[start:end] is exactly one JSON object with a member, none of its member
 * names escaped or named "schema" or "payload": a key without a JsonConverter envelope,
 * whatever orjson makes of its members. False declines. */
static int scan_bare_key_at(const unsigned char *base, Py_ssize_t start, Py_ssize_t end) {
    cursor c = {base + start, base + end};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return 0;
    c.p++;
    for (;;) {
        const unsigned char *name;
        Py_ssize_t len;
        skip_ws(&c);
        if (member_name(&c, &name, &len) || IS(name, len, "schema") || IS(name, len, "payload") ||
            scan_value(&c, 1))
            return 0;
        int more = next_item(&c, '}');
        if (more < 0) return 0;
        if (!more) break;
    }
    skip_ws(&c);
    return c.p == c.end;
}

static PyObject *scan_bare_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    cursor c;
    const unsigned char *base;
    if (arguments(args, nargs, "scan_bare_key(buf: bytes, start: int, end: int)", &c, &base))
        return NULL;
    return PyBool_FromLong(scan_bare_key_at(base, c.p - base, c.end - base));
}

/* Whether buf[start:end] is exactly one JSON object whose members are names[i], in that
 * order, each holding a value of kinds[i]: 'i' an integer within 64 bits (no boolean), 'n'
 * a number, 'b' a boolean, 's' a string, 'a' any value; an upper-case kind also takes
 * null. False declines: the general path decides the key. */
static PyObject *scan_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    cursor c;
    const unsigned char *base;
    const char *usage = "scan_key(buf: bytes, start: int, end: int, names: tuple[bytes, ...], "
                        "kinds: bytes)";
    if (nargs != 5 || !PyTuple_Check(args[3]) || !PyBytes_Check(args[4]) ||
        PyTuple_GET_SIZE(args[3]) != PyBytes_GET_SIZE(args[4])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    if (arguments(args, 3, usage, &c, &base)) return NULL;
    PyObject *names = args[3];
    const char *kinds = PyBytes_AS_STRING(args[4]);
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    skip_ws(&c);
    if (count == 0 || c.p >= c.end || *c.p != '{') Py_RETURN_FALSE;
    c.p++;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *expected = PyTuple_GET_ITEM(names, i);
        const unsigned char *name;
        Py_ssize_t len;
        if (!PyBytes_Check(expected)) {
            PyErr_SetString(PyExc_TypeError, usage);
            return NULL;
        }
        skip_ws(&c);
        if (i > 0) {
            if (c.p >= c.end || *c.p != ',') Py_RETURN_FALSE;
            c.p++;
            skip_ws(&c);
        }
        if (member_name(&c, &name, &len) || c.p >= c.end) Py_RETURN_FALSE;
        if (len != PyBytes_GET_SIZE(expected) ||
            memcmp(name, PyBytes_AS_STRING(expected), (size_t)len) != 0)
            Py_RETURN_FALSE;
        char kind = kinds[i];
        if (*c.p == 'n') {
            if (kind < 'A' || kind > 'Z' || literal(&c, "null", 4)) Py_RETURN_FALSE;
            continue;
        }
        int escaped, is_int;
        int64_t number;
        switch (kind | 0x20) { /* the kind in lower case */
        case 'i':
            if (scan_number(&c, &number, &is_int)) Py_RETURN_FALSE;
            break;
        case 'n':
            if (scan_number(&c, NULL, &is_int)) Py_RETURN_FALSE;
            break;
        case 'b':
            if (literal(&c, "true", 4) && literal(&c, "false", 5)) Py_RETURN_FALSE;
            break;
        case 's':
            if (*c.p != '"' || scan_string(&c, &escaped)) Py_RETURN_FALSE;
            break;
        case 'a':
            if (scan_value(&c, 1)) Py_RETURN_FALSE;
            break;
        default:
            Py_RETURN_FALSE;
        }
    }
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '}') Py_RETURN_FALSE;
    c.p++;
    skip_ws(&c);
    if (c.p != c.end) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyObject *sequence_version(PyObject *self, PyObject *value) {
    (void)self;
    if (!PyUnicode_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "sequence_version(sequence: str)");
        return NULL;
    }
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(value, &n);
    if (text == NULL) {
        PyErr_Clear(); /* lone surrogates: not the form this reads */
        Py_RETURN_NONE;
    }
    int64_t a, b;
    const unsigned char *p = (const unsigned char *)text;
    if (parse_sequence(p, p + n, &a, &b, 0)) Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)a, (long long)b);
}

static PyMethodDef methods[] = {
    {"scan_change", (PyCFunction)(void (*)(void))scan_change, METH_FASTCALL,
     "The parts of a Debezium change event's payload, or None (declined)."},
    {"scan_envelope", (PyCFunction)(void (*)(void))scan_envelope, METH_FASTCALL,
     "The op and the span of after of a reconciled event's payload, or None (declined)."},
    {"scan_object", (PyCFunction)(void (*)(void))scan_object, METH_FASTCALL,
     "Whether the bytes are exactly one valid JSON object."},
    {"scan_bare_key", (PyCFunction)(void (*)(void))scan_bare_key, METH_FASTCALL,
     "Whether the bytes are one JSON object with a member, none named schema or payload."},
    {"scan_key", (PyCFunction)(void (*)(void))scan_key, METH_FASTCALL,
     "Whether the bytes are one JSON object of the given members and kinds, in order."},
    {"sequence_version", (PyCFunction)sequence_version, METH_O,
     "The version of a source.sequence of the form [\"<digits>\"|null,\"<digits>\"|null] "
     "within 64 bits, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonscan", "A validating scanner of Debezium JSON events.", -1,
    methods, NULL, NULL, NULL, NULL,
};

static const jsonscan_api api = {scan_change_at, scan_object_at, scan_bare_key_at};

PyMODINIT_FUNC PyInit__jsonscan(void) {
    init_plain();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *capsule = PyCapsule_New((void *)&api, JSONSCAN_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "CAPI", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return with_sources_digest(m);
}
