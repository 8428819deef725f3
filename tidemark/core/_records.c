/* Frames of key-value pairs in one record (tidemark/core/frames.py), and the partitions that
 * producers' partitioners give keys (tidemark/core/partitioners.py), in C: one call per chunk
 * of rows instead of Python work per row. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "sources_digest.h"

static uint32_t murmur2(const unsigned char *data, size_t length) {
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    uint32_t h = 0x9747b28c ^ (uint32_t)length;
    size_t i = 0;
    for (; i + 4 <= length; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3: h ^= (uint32_t)data[i + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[i + 1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)data[i]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* CRC-32 (IEEE 802.3, reflected; zlib's crc32), librdkafka's consistent partitioner. */
static uint32_t crc_table[256];

static void init_crc_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(const unsigned char *data, size_t length) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < length; i++) c = crc_table[(c ^ data[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t fnv1a(const unsigned char *data, size_t length) {
    uint32_t h = 0x811c9dc5;
    for (size_t i = 0; i < length; i++) {
        h ^= data[i];
        h *= 0x01000193;
    }
    return h;
}

static PyObject *partitions(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "partitions(keys: list[bytes], count: int, kind: int)");
        return NULL;
    }
    long count = PyLong_AsLong(args[1]);
    long kind = PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (count <= 0 || kind < 0 || kind > 2) {
        PyErr_SetString(PyExc_ValueError, "a positive count and a kind of 0, 1 or 2");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(args[0]);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(args[0], i);
        if (!PyBytes_Check(key)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "keys are bytes");
            return NULL;
        }
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(key);
        size_t length = (size_t)PyBytes_GET_SIZE(key);
        long partition;
        if (kind == 0) {
            partition = (long)((murmur2(data, length) & 0x7fffffff) % (uint32_t)count);
        } else if (kind == 1) {
            partition = (long)(crc32_of(data, length) % (uint32_t)count);
        } else {
            int32_t h = (int32_t)fnv1a(data, length);
            int64_t wide = h < 0 ? -(int64_t)h : (int64_t)h;
            partition = (long)(wide % count);
        }
        PyObject *number = PyLong_FromLong(partition);
        if (number == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, number);
    }
    return out;
}

/* A frame's length: 4 bytes, big-endian. */
static uint32_t read_length(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void write_length(unsigned char *p, uint32_t length) {
    p[0] = (unsigned char)(length >> 24);
    p[1] = (unsigned char)(length >> 16);
    p[2] = (unsigned char)(length >> 8);
    p[3] = (unsigned char)length;
}

/* [u32 key length][key][u32 value length][value] per pair, big-endian lengths. */
static PyObject *frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "frame(pairs: list[tuple[bytes, bytes]], start, stop)");
        return NULL;
    }
    PyObject *pairs = args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), stop = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(pairs);
    if (start < 0 || stop > n || start > stop) {
        PyErr_SetString(PyExc_IndexError, "start and stop inside the list");
        return NULL;
    }
    Py_ssize_t size = 0;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) || !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "pairs of bytes");
            return NULL;
        }
        for (int j = 0; j < 2; j++) {
            Py_ssize_t length = PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, j));
            if (length > 0xffffffffLL || size > PY_SSIZE_T_MAX - 4 - length) {
                PyErr_SetString(PyExc_OverflowError, "a frame of more than 4 GiB");
                return NULL;
            }
            size += 4 + length;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        for (int j = 0; j < 2; j++) {
            PyObject *part = PyTuple_GET_ITEM(pair, j);
            uint32_t length = (uint32_t)PyBytes_GET_SIZE(part);
            write_length(p, length);
            memcpy(p + 4, PyBytes_AS_STRING(part), length);
            p += 4 + length;
        }
    }
    return out;
}

/* How many frames (keys and values) p[0:end - p] holds; -1 if it is not whole frames. */
static Py_ssize_t count_frames(const unsigned char *p, const unsigned char *end) {
    Py_ssize_t count = 0;
    for (; p < end; count++) {
        if (end - p < 4) return -1;
        uint32_t length = read_length(p);
        if ((size_t)(end - p - 4) < length) return -1;
        p += 4 + length;
    }
    return count;
}

/* frame's pairs, flat: [key, value, key, value, ...]; None if buf is not whole frames. */
static PyObject *unframe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 1 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "unframe(buf: bytes)");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t count = count_frames(p, p + PyBytes_GET_SIZE(args[0]));
    if (count < 0 || count % 2) Py_RETURN_NONE;
    PyObject *out = PyList_New(count);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t length = read_length(p);
        PyObject *part = PyBytes_FromStringAndSize((const char *)p + 4, length);
        if (part == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, part);
        p += 4 + length;
    }
    return out;
}

/* unframe's pairs as messages: cls (a tuple type of six items, tidemark.core.messages.RawMessage)
 * of (topic, partition, offset, key, value, chunk) per pair; None if buf is not whole
 * frames or not count pairs. */
static PyObject *unframe_messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7 || !PyType_Check(args[0]) || !PyBytes_Check(args[5]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) ||
        ((PyTypeObject *)args[0])->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError,
                        "unframe_messages(cls, topic, partition, offset, chunk, buf: bytes, "
                        "count: int)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    Py_ssize_t expected = PyLong_AsSsize_t(args[6]);
    if (expected == -1 && PyErr_Occurred()) return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    Py_ssize_t count = count_frames(p, p + PyBytes_GET_SIZE(args[5]));
    if (count <= 0 || count % 2 || count / 2 != expected) Py_RETURN_NONE;
    PyObject *out = PyList_New(count / 2);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count / 2; i++) {
        PyObject *parts[2];
        for (int j = 0; j < 2; j++) {
            uint32_t length = read_length(p);
            parts[j] = PyBytes_FromStringAndSize((const char *)p + 4, length);
            p += 4 + length;
        }
        PyObject *msg = parts[0] && parts[1] ? cls->tp_alloc(cls, 6) : NULL;
        if (msg == NULL) {
            Py_XDECREF(parts[0]);
            Py_XDECREF(parts[1]);
            Py_DECREF(out);
            return NULL;
        }
        PyObject *fixed[4] = {args[1], args[2], args[3], args[4]};
        for (int j = 0; j < 3; j++) PyTuple_SET_ITEM(msg, j, Py_NewRef(fixed[j]));
        PyTuple_SET_ITEM(msg, 3, parts[0]);
        PyTuple_SET_ITEM(msg, 4, parts[1]);
        PyTuple_SET_ITEM(msg, 5, Py_NewRef(fixed[3]));
        PyList_SET_ITEM(out, i, msg);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "pairs[start:stop] as one buffer of length-prefixed keys and values."},
    {"unframe_messages", (PyCFunction)(void (*)(void))unframe_messages, METH_FASTCALL,
     "unframe's pairs as messages of a tuple type, or None."},
    {"unframe", (PyCFunction)(void (*)(void))unframe, METH_FASTCALL,
     "A framed buffer's keys and values, flat, or None if it is not whole frames."},
    {"partitions", (PyCFunction)(void (*)(void))partitions, METH_FASTCALL,
     "The partition of each key in a topic of count partitions (0 murmur2, 1 crc32, 2 fnv1a)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "Frames of records and partitions of keys.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__records(void) {
    init_crc_table();
    return with_sources_digest(PyModule_Create(&module));
}
