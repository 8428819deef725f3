/* The common case of debezium_fast_path.decide_chunk_rows, in C: a backfill's chunk rows
 * of keys that have no state entry yet (a table's first backfill is all of them).
 *
 * Such a row is applied whatever it holds (decide_row is asked only when an entry is
 * there), so what is left is byte work: check that the row sits in its chunk's envelope
 * as the Python loop does, write its state entry (the chunk's entry head and the row),
 * and splice its output event. The loop stops, and gives the row back to the Python
 * loop, at the first row that is not such a row: another chunk tag, a row the envelope
 * does not hold, a TOAST placeholder, a key whose entry is there or was not read. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <string.h>

enum {
    ARG_RUN, ARG_KEYS, ARG_START, ARG_TAG, ARG_CACHE, ARG_UPDATES, ARG_ENTRY, ARG_PREFIX,
    ARG_HEAD, ARG_TAIL, ARG_LIMIT, ARG_PLACEHOLDERS, ARG_SCAN, ARG_OPENING, ARG_REST,
    ARG_CLOSING, ARG_OUTPUT, ARG_RECORDS, ARG_COUNT
};

static const char USAGE[] =
    "take_fresh_rows(run: list[RawMessage], keys: list[bytes], start: int, tag: object, "
    "cache: dict, updates: dict, entry: bytes, prefix: bytes, head: bytes, tail: bytes, "
    "limit: int, placeholders: tuple[bytes, ...], scan: Callable, opening: bytes, "
    "rest: bytes, closing: bytes, output: str, records: list)";

static int contains(const char *hay, Py_ssize_t hay_len, const char *needle, Py_ssize_t len) {
    if (len == 0) return 1;
    return len <= hay_len && memmem(hay, (size_t)hay_len, needle, (size_t)len) != NULL;
}

/* Whether scan(value, start, end) says the bytes between are one JSON object: 1, 0, or
 * -1 with an exception set. */
static int scanned(PyObject *scan, PyObject *value, Py_ssize_t start, Py_ssize_t end) {
    PyObject *bounds[3] = {value, PyLong_FromSsize_t(start), PyLong_FromSsize_t(end)};
    if (bounds[1] == NULL || bounds[2] == NULL) {
        Py_XDECREF(bounds[1]);
        Py_XDECREF(bounds[2]);
        return -1;
    }
    PyObject *result = PyObject_Vectorcall(scan, bounds, 3, NULL);
    Py_DECREF(bounds[1]);
    Py_DECREF(bounds[2]);
    if (result == NULL) return -1;
    int truth = PyObject_IsTrue(result);
    Py_DECREF(result);
    return truth;
}

/* prefix + middle + suffix as one bytes object. */
static PyObject *joined(const char *a, Py_ssize_t a_len, const char *b, Py_ssize_t b_len) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, a_len + b_len);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, a, (size_t)a_len);
    memcpy(p + a_len, b, (size_t)b_len);
    return out;
}

static PyObject *take_fresh_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != ARG_COUNT || !PyList_Check(args[ARG_RUN]) || !PyList_Check(args[ARG_KEYS]) ||
        !PyDict_Check(args[ARG_CACHE]) || !PyDict_Check(args[ARG_UPDATES]) ||
        !PyBytes_Check(args[ARG_ENTRY]) || !PyBytes_Check(args[ARG_PREFIX]) ||
        !PyBytes_Check(args[ARG_HEAD]) || !PyBytes_Check(args[ARG_TAIL]) ||
        !PyTuple_Check(args[ARG_PLACEHOLDERS]) || !PyCallable_Check(args[ARG_SCAN]) ||
        !PyBytes_Check(args[ARG_OPENING]) || !PyBytes_Check(args[ARG_REST]) ||
        !PyBytes_Check(args[ARG_CLOSING]) || !PyUnicode_Check(args[ARG_OUTPUT]) ||
        !PyList_Check(args[ARG_RECORDS])) {
        PyErr_SetString(PyExc_TypeError, USAGE);
        return NULL;
    }
    PyObject *run = args[ARG_RUN], *keys = args[ARG_KEYS], *tag = args[ARG_TAG];
    PyObject *cache = args[ARG_CACHE], *updates = args[ARG_UPDATES];
    PyObject *placeholders = args[ARG_PLACEHOLDERS], *scan = args[ARG_SCAN];
    PyObject *output = args[ARG_OUTPUT], *records = args[ARG_RECORDS];
    Py_ssize_t start = PyLong_AsSsize_t(args[ARG_START]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[ARG_LIMIT]);
    if (PyErr_Occurred()) return NULL;
    for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(placeholders); p++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(placeholders, p))) {
            PyErr_SetString(PyExc_TypeError, USAGE);
            return NULL;
        }
    }
    const char *entry = PyBytes_AS_STRING(args[ARG_ENTRY]);
    const char *prefix = PyBytes_AS_STRING(args[ARG_PREFIX]);
    const char *head = PyBytes_AS_STRING(args[ARG_HEAD]), *tail = PyBytes_AS_STRING(args[ARG_TAIL]);
    const char *opening = PyBytes_AS_STRING(args[ARG_OPENING]);
    const char *rest = PyBytes_AS_STRING(args[ARG_REST]);
    const char *closing = PyBytes_AS_STRING(args[ARG_CLOSING]);
    Py_ssize_t entry_len = PyBytes_GET_SIZE(args[ARG_ENTRY]);
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(args[ARG_PREFIX]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[ARG_HEAD]);
    Py_ssize_t tail_len = PyBytes_GET_SIZE(args[ARG_TAIL]);
    Py_ssize_t opening_len = PyBytes_GET_SIZE(args[ARG_OPENING]);
    Py_ssize_t rest_len = PyBytes_GET_SIZE(args[ARG_REST]);
    Py_ssize_t closing_len = PyBytes_GET_SIZE(args[ARG_CLOSING]);
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
            memcmp(data + value_len - tail_len, tail, (size_t)tail_len) != 0)
            break;
        int object = scanned(scan, value, head_len, value_len - tail_len);
        if (object < 0) return NULL;
        if (!object) break;
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
            PyErr_Clear();  /* an offset beyond 64 bits: the Python loop's */
            break;
        }
        PyObject *entry_key = joined(entry, entry_len, PyBytes_AS_STRING(state_key),
                                     PyBytes_GET_SIZE(state_key));
        if (entry_key == NULL) return NULL;
        PyObject *stored = PyDict_GetItemWithError(cache, entry_key);
        if (stored != Py_None) {  /* an entry, or one not read yet (or an error) */
            Py_DECREF(entry_key);
            if (stored == NULL && PyErr_Occurred()) return NULL;
            break;
        }
        PyObject *entry_value = joined(prefix, prefix_len, row, row_len);
        if (entry_value == NULL || PyDict_SetItem(cache, entry_key, entry_value) < 0 ||
            PyDict_SetItem(updates, entry_key, entry_value) < 0) {
            Py_DECREF(entry_key);
            Py_XDECREF(entry_value);
            return NULL;
        }
        Py_DECREF(entry_key);
        Py_DECREF(entry_value);
        char digits[24];
        int digits_len = snprintf(digits, sizeof digits, "%lld", at);
        PyObject *event =
            PyBytes_FromStringAndSize(NULL, opening_len + row_len + rest_len + digits_len + closing_len);
        if (event == NULL) return NULL;
        char *out = PyBytes_AS_STRING(event);
        memcpy(out, opening, (size_t)opening_len);
        out += opening_len;
        memcpy(out, row, (size_t)row_len);
        out += row_len;
        memcpy(out, rest, (size_t)rest_len);
        out += rest_len;
        memcpy(out, digits, (size_t)digits_len);
        out += digits_len;
        memcpy(out, closing, (size_t)closing_len);
        PyObject *record = PyTuple_Pack(4, output, partition, key, event);
        Py_DECREF(event);
        if (record == NULL) return NULL;
        int failed = PyList_Append(records, record);
        Py_DECREF(record);
        if (failed) return NULL;
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"take_fresh_rows", (PyCFunction)(void (*)(void))take_fresh_rows, METH_FASTCALL,
     "Decide the chunk rows from run[start] on whose keys have no state entry; the index of "
     "the first row not taken."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chunk_rows", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__chunk_rows(void) { return PyModule_Create(&module); }
