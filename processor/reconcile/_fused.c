/* The common cases of the debezium-upsert fused loops (processor/reconcile/
 * debezium_fast_path.py), in C: the per-event work that is byte work.
 *
 * take_changes: a change topic's events. A change's decision against a key whose entry
 * holds a change's row (or none) is a version compare; its state entry is its version,
 * its txId and its after; its output is its own payload with before in place of its
 * before (tidemark.core.json_scan finds the spans).
 *
 * take_avro_changes: the same for Debezium Avro events, whose scans (AvroCodec.scan) the
 * Python loop made: the entry's row is the input's own row bytes, the output the output
 * schema's header, the retraction, the input's bytes from after on and the tidemark record.
 *
 * take_fresh_rows: a backfill's chunk rows of keys that have no state entry yet (a
 * table's first backfill is all of them). Such a row is applied whatever it holds.
 *
 * Each loop does exactly what its Python loop does for those events, and stops at the
 * first event that is not one of them: either where the Python loop would stop too (it
 * then stops), or at one it decides itself (an entry of another kind, a key not read
 * yet), after which it calls the C loop again. The fused-versus-general properties
 * (tests/unit/test_debezium_fast_path.py) hold both to the general path. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "avro_long.h"
#include "jsonscan_api.h"
#include "sources_digest.h"

static const jsonscan_api *scanner;

/* Entry layout (processor/reconcile/versions.py): format, major, minor (big-endian
 * int64), flags; a transaction id (int64) follows when flags has TXID. The module exports
 * it as ENTRY_LAYOUT, which a test holds equal to versions.ENTRY_LAYOUT. */
#define ENTRY_FORMAT 2
#define MAJOR_AT 1
#define MINOR_AT 9
#define FLAGS_AT 17
#define HEAD_SIZE 18
#define TXID_SIZE 8
#define PRESENT 1
#define TXID_FLAG 2

static void put_be64(unsigned char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)u;
        u >>= 8;
    }
}

static int64_t get_be64(const unsigned char *p) {
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = (u << 8) | p[i];
    return (int64_t)u;
}

static int contains(const char *hay, Py_ssize_t hay_len, const char *needle, Py_ssize_t len) {
    if (len == 0) return 1;
    return len <= hay_len && memmem(hay, (size_t)hay_len, needle, (size_t)len) != NULL;
}

/* a + b as one bytes object. */
static PyObject *joined(const char *a, Py_ssize_t a_len, const char *b, Py_ssize_t b_len) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, a_len + b_len);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, a, (size_t)a_len);
    memcpy(p + a_len, b, (size_t)b_len);
    return out;
}

/* A growing byte buffer over a bytes object sized in advance. */
typedef struct {
    char *p;
} writer;

static void write_bytes(writer *w, const void *data, Py_ssize_t len) {
    memcpy(w->p, data, (size_t)len);
    w->p += len;
}

/* Puts key -> value in both dicts (BatchState.put); -1 with an error set. */
static int put_state(PyObject *cache, PyObject *updates, PyObject *key, PyObject *value) {
    return PyDict_SetItem(cache, key, value) < 0 || PyDict_SetItem(updates, key, value) < 0 ? -1
                                                                                             : 0;
}

static int append_record(PyObject *records, PyObject *output, PyObject *partition, PyObject *key,
                         PyObject *event) {
    PyObject *record = PyTuple_Pack(4, output, partition, key, event);
    if (record == NULL) return -1;
    int failed = PyList_Append(records, record);
    Py_DECREF(record);
    return failed;
}

/* A change's output record (``event``, whose reference this takes) and, for a delete, the
 * tombstone after it, as the Python loops append them; -1 on failure. */
static int append_change(PyObject *records, PyObject *output, PyObject *partition, PyObject *key,
                         PyObject *event, int deleted) {
    int failed = append_record(records, output, partition, key, event);
    Py_DECREF(event);
    if (failed || (deleted && append_record(records, output, partition, key, Py_None))) return -1;
    return 0;
}

/* The judgement of a change of (major, minor) against a key's entry ``stored`` (a bytes of
 * processor/reconcile/versions.py's layout, or None): 1 newer, 0 equal, -1 older, with the
 * entry's row (or NULL) at *previous; 2 when the entry is not a change's, or is of another
 * format (the Python loop decides it). */
static int judged(PyObject *stored, int64_t major, int64_t minor, const char **previous,
                  Py_ssize_t *previous_len) {
    *previous = NULL;
    *previous_len = 0;
    if (stored == Py_None) return 1;
    if (!PyBytes_Check(stored)) return 2;
    const unsigned char *entry = (const unsigned char *)PyBytes_AS_STRING(stored);
    Py_ssize_t entry_len = PyBytes_GET_SIZE(stored);
    if (entry_len < HEAD_SIZE || entry[0] != ENTRY_FORMAT) return 2;
    if (entry[FLAGS_AT] > (PRESENT | TXID_FLAG)) return 2;
    int flags = entry[FLAGS_AT];
    Py_ssize_t row_at = HEAD_SIZE + ((flags & TXID_FLAG) ? TXID_SIZE : 0);
    if (entry_len < row_at) return 2;
    int64_t stored_major = get_be64(entry + MAJOR_AT), stored_minor = get_be64(entry + MINOR_AT);
    if (flags & PRESENT) {
        *previous = (const char *)entry + row_at;
        *previous_len = entry_len - row_at;
    }
    if (major != stored_major) return major > stored_major ? 1 : -1;
    if (minor != stored_minor) return minor > stored_minor ? 1 : -1;
    return 0;
}

/* A change's entry: its version, its transaction id if any, its row (NULL: deleted). */
static PyObject *change_entry(int64_t major, int64_t minor, int txid_present, int64_t txid,
                              const char *head, Py_ssize_t head_len, const char *row,
                              Py_ssize_t row_len) {
    Py_ssize_t at = HEAD_SIZE + (txid_present ? TXID_SIZE : 0);
    int present = row != NULL;
    PyObject *entry = PyBytes_FromStringAndSize(NULL, at + (present ? head_len + row_len : 0));
    if (entry == NULL) return NULL;
    unsigned char *e = (unsigned char *)PyBytes_AS_STRING(entry);
    e[0] = ENTRY_FORMAT;
    put_be64(e + MAJOR_AT, major);
    put_be64(e + MINOR_AT, minor);
    e[FLAGS_AT] = (unsigned char)((present ? PRESENT : 0) | (txid_present ? TXID_FLAG : 0));
    if (txid_present) put_be64(e + HEAD_SIZE, txid);
    if (present) {
        memcpy(e + at, head, (size_t)head_len);
        memcpy(e + at + head_len, row, (size_t)row_len);
    }
    return entry;
}

/* ------------------------------------------------------------------------------------
 * take_changes */

enum {
    C_GROUP, C_KEYS, C_START, C_CACHE, C_UPDATES, C_PREFIX, C_HEAD, C_LIMIT, C_FLUSHED,
    C_PARTS, C_OUTPUT, C_RECORDS, C_COUNT
};

static const char CHANGES_USAGE[] =
    "take_changes(group: list[RawMessage], entry_keys: list[bytes], start: int, cache: dict, "
    "updates: dict, prefix: bytes, head: bytes, limit: int, flushed: int, "
    "parts: tuple[bytes, bytes, bytes, bytes, bytes, bytes], output: str, records: list)";

static const char APPLIED[] = "applied", REPLAYED[] = "replayed";

static PyObject *take_changes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != C_COUNT || !PyList_Check(args[C_GROUP]) || !PyList_Check(args[C_KEYS]) ||
        !PyDict_Check(args[C_CACHE]) || !PyDict_Check(args[C_UPDATES]) ||
        !PyBytes_Check(args[C_PREFIX]) || !PyBytes_Check(args[C_HEAD]) ||
        !PyTuple_Check(args[C_PARTS]) || PyTuple_GET_SIZE(args[C_PARTS]) != 6 ||
        !PyUnicode_Check(args[C_OUTPUT]) || !PyList_Check(args[C_RECORDS])) {
        PyErr_SetString(PyExc_TypeError, CHANGES_USAGE);
        return NULL;
    }
    PyObject *group = args[C_GROUP], *keys = args[C_KEYS];
    PyObject *cache = args[C_CACHE], *updates = args[C_UPDATES];
    PyObject *output = args[C_OUTPUT], *records = args[C_RECORDS];
    const char *part[6];
    Py_ssize_t part_len[6];
    for (int k = 0; k < 6; k++) {
        PyObject *item = PyTuple_GET_ITEM(args[C_PARTS], k);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, CHANGES_USAGE);
            return NULL;
        }
        part[k] = PyBytes_AS_STRING(item);
        part_len[k] = PyBytes_GET_SIZE(item);
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[C_START]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[C_LIMIT]);
    long long flushed = PyLong_AsLongLong(args[C_FLUSHED]);
    if (PyErr_Occurred()) return NULL;
    const char *prefix = PyBytes_AS_STRING(args[C_PREFIX]);
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(args[C_PREFIX]);
    const char *head = PyBytes_AS_STRING(args[C_HEAD]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[C_HEAD]);
    Py_ssize_t stop = PyList_GET_SIZE(group);
    if (PyList_GET_SIZE(keys) < stop) stop = PyList_GET_SIZE(keys);
    if (start < 0) start = 0;

    Py_ssize_t i = start, dropped = 0, last = -1;
    int halt = 0; /* 1: the Python loop stops at group[i]; 0: it decides group[i] */
    /* The entry read, held while its row is read: the loop's own write of the key's new
     * entry would otherwise free it under the pointer. */
    PyObject *held = NULL;
    for (; i < stop; i++) {
        Py_CLEAR(held);
        PyObject *msg = PyList_GET_ITEM(group, i);
        if (!PyTuple_Check(msg) || PyTuple_GET_SIZE(msg) < 5) break;
        PyObject *partition = PyTuple_GET_ITEM(msg, 1), *offset_obj = PyTuple_GET_ITEM(msg, 2);
        PyObject *key = PyTuple_GET_ITEM(msg, 3), *value = PyTuple_GET_ITEM(msg, 4);
        PyObject *entry_key = PyList_GET_ITEM(keys, i);
        if (value == Py_None) continue; /* Debezium's tombstone: its delete emitted both */
        if (!PyBytes_Check(value) || (key != Py_None && !PyBytes_Check(key)) ||
            !PyBytes_Check(entry_key) || !PyLong_Check(offset_obj) || !PyLong_Check(partition))
            break;
        long long offset = PyLong_AsLongLong(offset_obj), part_no = PyLong_AsLongLong(partition);
        if (PyErr_Occurred()) {
            PyErr_Clear(); /* beyond 64 bits: the Python loop's */
            break;
        }
        const char *raw = PyBytes_AS_STRING(value);
        Py_ssize_t size = PyBytes_GET_SIZE(value);
        Py_ssize_t key_len = key == Py_None ? 0 : PyBytes_GET_SIZE(key);
        /* what _scan takes */
        halt = 1;
        if ((size > 0 && raw[0] == 0) || size + key_len > limit) break;
        Py_ssize_t from = 0, to = size;
        if (prefix_len) {
            if (size < prefix_len || memcmp(raw, prefix, (size_t)prefix_len) != 0 || size == 0 ||
                raw[size - 1] != '}' || size - 1 < prefix_len)
                break;
            from = prefix_len;
            to = size - 1;
        }
        jsonscan_change scan;
        if (scanner->scan_change((const unsigned char *)raw, from, to, &scan) || scan.toast) break;
        /* judge: the entry, read without decoding it when it holds a change's row */
        halt = 0;
        PyObject *stored = PyDict_GetItemWithError(cache, entry_key);
        if (stored == NULL) {
            if (PyErr_Occurred()) goto fail;
            break; /* not read yet */
        }
        held = Py_NewRef(stored);
        const char *previous;
        Py_ssize_t previous_len;
        int order = judged(stored, scan.major, scan.minor, &previous, &previous_len);
        if (order == 2) break;
        halt = 1;
        if (previous != NULL && previous_len > 0 && previous[0] == 0) break; /* an Avro row */
        halt = 0;
        last = i;
        if (order < 0 || (order == 0 && offset < flushed)) {
            dropped++;
            continue;
        }
        int deleted = scan.op == 'd';
        const char *after = raw + scan.after;
        Py_ssize_t after_len = scan.after_end - scan.after;
        if (order > 0) {
            PyObject *entry = change_entry(scan.major, scan.minor, scan.txid_present, scan.txid,
                                           "", 0, deleted ? NULL : after, after_len);
            if (entry == NULL) goto fail;
            int failed = put_state(cache, updates, entry_key, entry);
            Py_DECREF(entry);
            if (failed) goto fail;
        }
        const char *reason = order > 0 ? APPLIED : REPLAYED;
        Py_ssize_t reason_len = order > 0 ? (Py_ssize_t)sizeof APPLIED - 1
                                          : (Py_ssize_t)sizeof REPLAYED - 1;
        char numbers[4][24];
        int numbers_len[4] = {
            snprintf(numbers[0], sizeof numbers[0], "%lld", part_no),
            snprintf(numbers[1], sizeof numbers[1], "%lld", offset),
            snprintf(numbers[2], sizeof numbers[2], "%lld", (long long)scan.major),
            snprintf(numbers[3], sizeof numbers[3], "%lld", (long long)scan.minor),
        };
        if (previous == NULL) {
            previous = "null";
            previous_len = 4;
        }
        /* The payload with previous in place of its before (after stays where it is). */
        Py_ssize_t size_out = head_len + (scan.before - scan.open) + previous_len +
                              (scan.close - scan.before_end) + reason_len + (head_len ? 1 : 0);
        for (int k = 0; k < 6; k++) size_out += part_len[k];
        for (int k = 0; k < 4; k++) size_out += numbers_len[k];
        PyObject *event = PyBytes_FromStringAndSize(NULL, size_out);
        if (event == NULL) goto fail;
        writer w = {PyBytes_AS_STRING(event)};
        write_bytes(&w, head, head_len);
        write_bytes(&w, raw + scan.open, scan.before - scan.open);
        write_bytes(&w, previous, previous_len);
        write_bytes(&w, raw + scan.before_end, scan.close - scan.before_end);
        for (int k = 0; k < 4; k++) {
            write_bytes(&w, part[k], part_len[k]);
            write_bytes(&w, numbers[k], numbers_len[k]);
        }
        write_bytes(&w, part[4], part_len[4]);
        write_bytes(&w, reason, reason_len);
        write_bytes(&w, part[5], part_len[5]);
        if (head_len) write_bytes(&w, "}", 1);
        if (append_change(records, output, partition, key, event, deleted)) goto fail;
    }
    Py_CLEAR(held);
    if (i >= stop) halt = 0;
    return Py_BuildValue("(nnni)", i, dropped, last, halt);
fail:
    Py_XDECREF(held);
    return NULL;
}

/* ------------------------------------------------------------------------------------
 * take_avro_changes */

enum {
    A_GROUP, A_KEYS, A_START, A_SCANS, A_BASE, A_LAYOUT, A_OUT_HEADER, A_NULL, A_ROW,
    A_CACHE, A_UPDATES, A_FLUSHED, A_BLOCK_HEAD, A_APPLIED, A_REPLAYED, A_KEY_IN, A_KEY_OUT,
    A_OUTPUT, A_RECORDS, A_COUNT
};

static const char AVRO_USAGE[] =
    "take_avro_changes(group: list[RawMessage], entry_keys: list[bytes], start: int, "
    "scans: list[AvroScan | None], base: int, layout: Layout, out_header: bytes, "
    "null_byte: bytes, row_byte: bytes, cache: dict, updates: dict, flushed: int, "
    "block_head: bytes, applied: bytes, replayed: bytes, key_in: bytes, key_out: bytes, "
    "output: str, records: list)";

static PyObject *take_avro_changes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != A_COUNT || !PyList_Check(args[A_GROUP]) || !PyList_Check(args[A_KEYS]) ||
        !PyList_Check(args[A_SCANS]) || !PyDict_Check(args[A_CACHE]) ||
        !PyDict_Check(args[A_UPDATES]) || !PyUnicode_Check(args[A_OUTPUT]) ||
        !PyList_Check(args[A_RECORDS])) {
        PyErr_SetString(PyExc_TypeError, AVRO_USAGE);
        return NULL;
    }
    const int byte_args[] = {A_OUT_HEADER, A_NULL, A_ROW, A_BLOCK_HEAD, A_APPLIED, A_REPLAYED,
                             A_KEY_IN, A_KEY_OUT};
    for (size_t k = 0; k < sizeof byte_args / sizeof byte_args[0]; k++) {
        if (!PyBytes_Check(args[byte_args[k]])) {
            PyErr_SetString(PyExc_TypeError, AVRO_USAGE);
            return NULL;
        }
    }
    PyObject *group = args[A_GROUP], *keys = args[A_KEYS], *scans = args[A_SCANS];
    PyObject *layout = args[A_LAYOUT], *cache = args[A_CACHE], *updates = args[A_UPDATES];
    PyObject *output = args[A_OUTPUT], *records = args[A_RECORDS];
    PyObject *key_in = args[A_KEY_IN], *key_out = args[A_KEY_OUT];
    Py_ssize_t start = PyLong_AsSsize_t(args[A_START]), base = PyLong_AsSsize_t(args[A_BASE]);
    long long flushed = PyLong_AsLongLong(args[A_FLUSHED]);
    if (PyErr_Occurred()) return NULL;
    if (PyBytes_GET_SIZE(key_in) != 5 || PyBytes_GET_SIZE(key_out) != 5 ||
        PyBytes_GET_SIZE(args[A_OUT_HEADER]) != 5) {
        PyErr_SetString(PyExc_ValueError, "key and output headers are 5 bytes");
        return NULL;
    }
    const char *out_header = PyBytes_AS_STRING(args[A_OUT_HEADER]);
    const char *null_byte = PyBytes_AS_STRING(args[A_NULL]);
    const char *row_byte = PyBytes_AS_STRING(args[A_ROW]);
    const char *block_head = PyBytes_AS_STRING(args[A_BLOCK_HEAD]);
    Py_ssize_t null_len = PyBytes_GET_SIZE(args[A_NULL]), row_byte_len = PyBytes_GET_SIZE(args[A_ROW]);
    Py_ssize_t block_head_len = PyBytes_GET_SIZE(args[A_BLOCK_HEAD]);
    int same_key = memcmp(PyBytes_AS_STRING(key_in), PyBytes_AS_STRING(key_out), 5) == 0;
    Py_ssize_t stop = PyList_GET_SIZE(group);
    if (PyList_GET_SIZE(keys) < stop) stop = PyList_GET_SIZE(keys);
    if (base + PyList_GET_SIZE(scans) < stop) stop = base + PyList_GET_SIZE(scans);
    if (start < base) start = base;

    Py_ssize_t i = start, dropped = 0, last = -1;
    int halt = 0; /* 1: the Python loop stops at group[i]; 0: it decides group[i] */
    /* The entry read, held while its row is read: the loop's own write of the key's new
     * entry would otherwise free it under the pointer. */
    PyObject *held = NULL;
    for (; i < stop; i++) {
        Py_CLEAR(held);
        halt = 0;
        PyObject *msg = PyList_GET_ITEM(group, i), *scan = PyList_GET_ITEM(scans, i - base);
        if (!PyTuple_Check(msg) || PyTuple_GET_SIZE(msg) < 5) break;
        PyObject *partition = PyTuple_GET_ITEM(msg, 1), *offset_obj = PyTuple_GET_ITEM(msg, 2);
        PyObject *key = PyTuple_GET_ITEM(msg, 3), *value = PyTuple_GET_ITEM(msg, 4);
        PyObject *entry_key = PyList_GET_ITEM(keys, i);
        if (value == Py_None && scan == Py_None) continue; /* a tombstone */
        if (!PyBytes_Check(value) || !PyBytes_Check(entry_key) || !PyLong_Check(offset_obj) ||
            !PyTuple_Check(scan) || PyTuple_GET_SIZE(scan) < 7 || PyTuple_GET_ITEM(scan, 0) != layout)
            break;
        PyObject *version = PyTuple_GET_ITEM(scan, 5), *txid_obj = PyTuple_GET_ITEM(scan, 6);
        PyObject *op = PyTuple_GET_ITEM(scan, 4);
        if (!PyTuple_Check(version) || PyTuple_GET_SIZE(version) != 2 || !PyUnicode_Check(op) ||
            (txid_obj != Py_None && !PyLong_Check(txid_obj)))
            break;
        Py_ssize_t after_at = PyLong_AsSsize_t(PyTuple_GET_ITEM(scan, 1));
        Py_ssize_t rest_at = PyLong_AsSsize_t(PyTuple_GET_ITEM(scan, 2));
        long long offset = PyLong_AsLongLong(offset_obj);
        long long major = PyLong_AsLongLong(PyTuple_GET_ITEM(version, 0));
        long long minor = PyLong_AsLongLong(PyTuple_GET_ITEM(version, 1));
        long long txid = txid_obj == Py_None ? 0 : PyLong_AsLongLong(txid_obj);
        if (PyErr_Occurred()) {
            PyErr_Clear(); /* the Python loop's */
            break;
        }
        const char *raw = PyBytes_AS_STRING(value);
        Py_ssize_t size = PyBytes_GET_SIZE(value);
        if (size < 5 || after_at < 5 || after_at + row_byte_len > rest_at || rest_at > size) break;
        /* the output key: the key's own header replaced by the output's */
        PyObject *out_key = key;
        int framed = PyBytes_Check(key) && PyBytes_GET_SIZE(key) >= 5 && PyBytes_AS_STRING(key)[0] == 0;
        if (framed && memcmp(PyBytes_AS_STRING(key), PyBytes_AS_STRING(key_in), 5) != 0) break;
        if (key != Py_None && !PyBytes_Check(key)) break;
        PyObject *stored = PyDict_GetItemWithError(cache, entry_key);
        if (stored == NULL) {
            if (PyErr_Occurred()) goto fail;
            break; /* not read yet */
        }
        held = Py_NewRef(stored);
        const char *previous;
        Py_ssize_t previous_len;
        int order = judged(stored, major, minor, &previous, &previous_len);
        if (order == 2) break;
        if (previous != NULL && (previous_len < 5 || memcmp(previous, raw, 5) != 0)) {
            halt = 1; /* a row of another schema or format: the general path converts it */
            break;
        }
        last = i;
        if (order < 0 || (order == 0 && offset < flushed)) {
            dropped++;
            continue;
        }
        int deleted = PyUnicode_GET_LENGTH(op) == 1 && PyUnicode_READ_CHAR(op, 0) == 'd';
        if (order > 0) {
            const char *row = deleted ? NULL : raw + after_at + row_byte_len;
            PyObject *entry = change_entry(major, minor, txid_obj != Py_None, txid, raw, 5, row,
                                           rest_at - after_at - row_byte_len);
            if (entry == NULL) goto fail;
            int failed = put_state(cache, updates, entry_key, entry);
            Py_DECREF(entry);
            if (failed) goto fail;
        }
        PyObject *tail = args[order > 0 ? A_APPLIED : A_REPLAYED];
        char position[48];
        int position_len = snprintf(position, sizeof position, "%lld,%lld", major, minor);
        unsigned char numbers[20];
        int numbers_len = avro_encode_long(offset, numbers);
        numbers_len += avro_encode_long(position_len, numbers + numbers_len);
        Py_ssize_t retraction_len = previous == NULL ? null_len : row_byte_len + previous_len - 5;
        PyObject *event = PyBytes_FromStringAndSize(
            NULL, 5 + retraction_len + (size - after_at) + block_head_len + numbers_len +
                      position_len + PyBytes_GET_SIZE(tail));
        if (event == NULL) goto fail;
        writer w = {PyBytes_AS_STRING(event)};
        write_bytes(&w, out_header, 5);
        if (previous == NULL) {
            write_bytes(&w, null_byte, null_len);
        } else {
            write_bytes(&w, row_byte, row_byte_len);
            write_bytes(&w, previous + 5, previous_len - 5);
        }
        write_bytes(&w, raw + after_at, size - after_at);
        write_bytes(&w, block_head, block_head_len);
        write_bytes(&w, numbers, numbers_len);
        write_bytes(&w, position, position_len);
        write_bytes(&w, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail));
        PyObject *new_key = NULL;
        if (framed && !same_key) {
            new_key = joined(PyBytes_AS_STRING(key_out), 5, PyBytes_AS_STRING(key) + 5,
                             PyBytes_GET_SIZE(key) - 5);
            if (new_key == NULL) {
                Py_DECREF(event);
                goto fail;
            }
            out_key = new_key;
        }
        int failed = append_change(records, output, partition, out_key, event, deleted);
        Py_XDECREF(new_key);
        if (failed) goto fail;
    }
    Py_CLEAR(held);
    if (i >= stop) halt = 0;
    return Py_BuildValue("(nnni)", i, dropped, last, halt);
fail:
    Py_XDECREF(held);
    return NULL;
}

/* ------------------------------------------------------------------------------------
 * take_fresh_rows */

enum {
    R_RUN, R_KEYS, R_START, R_TAG, R_CACHE, R_UPDATES, R_ENTRY, R_PREFIX, R_HEAD, R_TAIL,
    R_LIMIT, R_PLACEHOLDERS, R_OPENING, R_REST, R_CLOSING, R_OUTPUT, R_RECORDS, R_COUNT
};

static const char ROWS_USAGE[] =
    "take_fresh_rows(run: list[RawMessage], keys: list[bytes], start: int, tag: object, "
    "cache: dict, updates: dict, entry: bytes, prefix: bytes, head: bytes, tail: bytes, "
    "limit: int, placeholders: tuple[bytes, ...], opening: bytes, rest: bytes, "
    "closing: bytes, output: str, records: list)";

static PyObject *take_fresh_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != R_COUNT || !PyList_Check(args[R_RUN]) || !PyList_Check(args[R_KEYS]) ||
        !PyDict_Check(args[R_CACHE]) || !PyDict_Check(args[R_UPDATES]) ||
        !PyBytes_Check(args[R_ENTRY]) || !PyBytes_Check(args[R_PREFIX]) ||
        !PyBytes_Check(args[R_HEAD]) || !PyBytes_Check(args[R_TAIL]) ||
        !PyTuple_Check(args[R_PLACEHOLDERS]) || !PyBytes_Check(args[R_OPENING]) ||
        !PyBytes_Check(args[R_REST]) || !PyBytes_Check(args[R_CLOSING]) ||
        !PyUnicode_Check(args[R_OUTPUT]) || !PyList_Check(args[R_RECORDS])) {
        PyErr_SetString(PyExc_TypeError, ROWS_USAGE);
        return NULL;
    }
    PyObject *run = args[R_RUN], *keys = args[R_KEYS], *tag = args[R_TAG];
    PyObject *cache = args[R_CACHE], *updates = args[R_UPDATES];
    PyObject *placeholders = args[R_PLACEHOLDERS];
    PyObject *output = args[R_OUTPUT], *records = args[R_RECORDS];
    Py_ssize_t start = PyLong_AsSsize_t(args[R_START]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[R_LIMIT]);
    if (PyErr_Occurred()) return NULL;
    for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(placeholders); p++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(placeholders, p))) {
            PyErr_SetString(PyExc_TypeError, ROWS_USAGE);
            return NULL;
        }
    }
    const char *entry = PyBytes_AS_STRING(args[R_ENTRY]);
    const char *prefix = PyBytes_AS_STRING(args[R_PREFIX]);
    const char *head = PyBytes_AS_STRING(args[R_HEAD]), *tail = PyBytes_AS_STRING(args[R_TAIL]);
    const char *opening = PyBytes_AS_STRING(args[R_OPENING]);
    const char *rest = PyBytes_AS_STRING(args[R_REST]);
    const char *closing = PyBytes_AS_STRING(args[R_CLOSING]);
    Py_ssize_t entry_len = PyBytes_GET_SIZE(args[R_ENTRY]);
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(args[R_PREFIX]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[R_HEAD]);
    Py_ssize_t tail_len = PyBytes_GET_SIZE(args[R_TAIL]);
    Py_ssize_t opening_len = PyBytes_GET_SIZE(args[R_OPENING]);
    Py_ssize_t rest_len = PyBytes_GET_SIZE(args[R_REST]);
    Py_ssize_t closing_len = PyBytes_GET_SIZE(args[R_CLOSING]);
    Py_ssize_t stop = PyList_GET_SIZE(run);
    if (PyList_GET_SIZE(keys) < stop) stop = PyList_GET_SIZE(keys);
    if (start < 0) start = 0;

    Py_ssize_t i = start;
    for (; i < stop; i++) {
        PyObject *msg = PyList_GET_ITEM(run, i);
        if (!PyTuple_Check(msg) || PyTuple_GET_SIZE(msg) < 6 || PyTuple_GET_ITEM(msg, 5) != tag)
            break;
        PyObject *partition = PyTuple_GET_ITEM(msg, 1), *offset = PyTuple_GET_ITEM(msg, 2);
        PyObject *key = PyTuple_GET_ITEM(msg, 3), *value = PyTuple_GET_ITEM(msg, 4);
        PyObject *state_key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_Check(value) || !PyBytes_Check(state_key) || !PyLong_Check(offset) ||
            (key != Py_None && !PyBytes_Check(key)))
            break;
        Py_ssize_t value_len = PyBytes_GET_SIZE(value);
        Py_ssize_t key_len = key == Py_None ? 0 : PyBytes_GET_SIZE(key);
        const char *data = PyBytes_AS_STRING(value);
        if (value_len + key_len > limit || value_len <= head_len + tail_len ||
            memcmp(data, head, (size_t)head_len) != 0 ||
            memcmp(data + value_len - tail_len, tail, (size_t)tail_len) != 0 ||
            !scanner->scan_object((const unsigned char *)data, head_len, value_len - tail_len))
            break;
        const char *row = data + head_len;
        Py_ssize_t row_len = value_len - head_len - tail_len;
        int placeheld = 0;
        for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(placeholders) && !placeheld; p++) {
            PyObject *needle = PyTuple_GET_ITEM(placeholders, p);
            placeheld = contains(row, row_len, PyBytes_AS_STRING(needle), PyBytes_GET_SIZE(needle));
        }
        if (placeheld) break;
        long long at = PyLong_AsLongLong(offset);
        if (at == -1 && PyErr_Occurred()) {
            PyErr_Clear(); /* an offset beyond 64 bits: the Python loop's */
            break;
        }
        PyObject *entry_key = joined(entry, entry_len, PyBytes_AS_STRING(state_key),
                                     PyBytes_GET_SIZE(state_key));
        if (entry_key == NULL) return NULL;
        PyObject *stored = PyDict_GetItemWithError(cache, entry_key);
        if (stored != Py_None) { /* an entry, or one not read yet (or an error) */
            Py_DECREF(entry_key);
            if (stored == NULL && PyErr_Occurred()) return NULL;
            break;
        }
        PyObject *entry_value = joined(prefix, prefix_len, row, row_len);
        if (entry_value == NULL) {
            Py_DECREF(entry_key);
            return NULL;
        }
        int failed = put_state(cache, updates, entry_key, entry_value);
        Py_DECREF(entry_key);
        Py_DECREF(entry_value);
        if (failed) return NULL;
        char digits[24];
        int digits_len = snprintf(digits, sizeof digits, "%lld", at);
        PyObject *event = PyBytes_FromStringAndSize(
            NULL, opening_len + row_len + rest_len + digits_len + closing_len);
        if (event == NULL) return NULL;
        writer w = {PyBytes_AS_STRING(event)};
        write_bytes(&w, opening, opening_len);
        write_bytes(&w, row, row_len);
        write_bytes(&w, rest, rest_len);
        write_bytes(&w, digits, digits_len);
        write_bytes(&w, closing, closing_len);
        failed = append_record(records, output, partition, key, event);
        Py_DECREF(event);
        if (failed) return NULL;
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"take_changes", (PyCFunction)(void (*)(void))take_changes, METH_FASTCALL,
     "Decide a change topic's events from group[start] on under debezium-upsert: (the index "
     "of the first not decided, how many were dropped, the index of the last change taken "
     "or -1, whether the Python loop stops there)."},
    {"take_avro_changes", (PyCFunction)(void (*)(void))take_avro_changes, METH_FASTCALL,
     "As take_changes, for Debezium Avro events and their scans from group[base] on."},
    {"take_fresh_rows", (PyCFunction)(void (*)(void))take_fresh_rows, METH_FASTCALL,
     "Decide the chunk rows from run[start] on whose keys have no state entry; the index of "
     "the first row not taken."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fused(void) {
    scanner = jsonscan_import();
    if (scanner == NULL) return NULL;
    PyObject *m = with_sources_digest(PyModule_Create(&module));
    if (m == NULL) return NULL;
    PyObject *layout = Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "format", ENTRY_FORMAT, "major_at", MAJOR_AT,
        "minor_at", MINOR_AT, "flags_at", FLAGS_AT, "head_size", HEAD_SIZE, "txid_size",
        TXID_SIZE, "present", PRESENT, "txid_flag", TXID_FLAG);
    if (layout == NULL || PyModule_AddObjectRef(m, "ENTRY_LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(layout);
    return m;
}
