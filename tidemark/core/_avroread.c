/* An Avro reader for a schema compiled once: what fastavro.schemaless_reader returns, for a
 * fraction of its cost. See tidemark/core/avro_read.py for the contract; in short:
 *
 * - A Program is an array of ops (one per schema node; named types resolved to the index of
 *   their op), built by tidemark/core/avro_read.py from fastavro's parsed schema. Every index in
 *   it is checked when it is built, so no Program can make read() look outside its arrays.
 * - read() gives fastavro's value and end offset, or raises (AvroReadError, a ValueError;
 *   UnicodeDecodeError for a string that is not UTF-8; what a logical type's converter,
 *   fastavro's own, raises) where fastavro raises. What it does not judge is *declined*:
 *   None, and fastavro reads the bytes. That is: varints longer than ten bytes (fastavro
 *   shifts them past 64 bits), a block count of -2**63, nesting deeper than MAX_DEPTH,
 *   more than ZERO_SIZE_CAP items that take no bytes (arrays of null).
 * - Every read is checked against the end the caller gave.
 * - skip() gives the end offset read() would give, making no value (strings are checked
 *   for UTF-8, logical types converted), and None where read() declines or raises.
 * - An omit op stands for a record field the program's compiler was told to leave out:
 *   read() checks it as skip() does (so it ends, declines and fails where a read of it
 *   would) and puts nothing in the record.
 * - write_long() and write_offset_position() are the writers here: Avro's encoding of a
 *   long (and of an offset and a "major,minor" position), which the codecs' hot paths
 *   frame their outputs with.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "avro_long.h"
#include "sources_digest.h"

#define MAX_DEPTH 200
#define ZERO_SIZE_CAP 4096

enum {
    OP_NULL,
    OP_BOOLEAN,
    OP_LONG, /* int and long alike: fastavro does not check an int's range */
    OP_FLOAT,
    OP_DOUBLE,
    OP_BYTES,
    OP_STRING,
    OP_FIXED,
    OP_ENUM,
    OP_ARRAY,
    OP_MAP,
    OP_UNION,
    OP_RECORD,
    OP_OMIT, /* a record field checked as skip() checks it and left out of the record */
    OP_KINDS
};

typedef struct {
    int kind;
    int zero_size;     /* its encoding can take no bytes (null, fixed(0), records of those) */
    Py_ssize_t size;   /* fixed: bytes; enum: symbols; union: branches; record: fields */
    Py_ssize_t target; /* array: items' op; map: values' op; union, record: first link;
                          omit: the omitted field's op */
    PyObject *names;   /* enum: its symbols; record: its field names (tuples; borrowed) */
    PyObject *convert; /* a logical type's converter (fastavro's), or NULL (borrowed) */
    PyObject *schema;  /* the converter's schema argument (borrowed) */
} op;

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    op *ops;
    Py_ssize_t *links; /* union branches and record fields, as op indices */
    PyObject *keep;    /* the op tuples: they own what the ops borrow */
} program;

static PyObject *AvroReadError;

typedef struct {
    const unsigned char *base, *p, *end;
    const program *prog;
    int declined;
} reader;

/* -- the program ----------------------------------------------------------------------- */

static void program_dealloc(program *self) {
    PyMem_Free(self->ops);
    PyMem_Free(self->links);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int bad_op(Py_ssize_t i, const char *why) {
    PyErr_Format(PyExc_ValueError, "op %zd: %s", i, why);
    return -1;
}

/* An index into the ops; -1 with an error set when it is not one. */
static Py_ssize_t op_index(PyObject *value, Py_ssize_t count, Py_ssize_t i) {
    Py_ssize_t at = PyLong_Check(value) ? PyLong_AsSsize_t(value) : -1;
    if (at == -1 && PyErr_Occurred()) PyErr_Clear();
    if (at < 0 || at >= count) {
        bad_op(i, "an op index out of range");
        return -1;
    }
    return at;
}

/* One op from its tuple (kind, size, target, links, names, convert, schema). */
static int build_op(program *self, Py_ssize_t i, PyObject *spec, Py_ssize_t *next_link) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 7)
        return bad_op(i, "not a tuple (kind, size, target, links, names, convert, schema)");
    op *o = &self->ops[i];
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (kind == -1 && PyErr_Occurred()) return -1;
    if (kind < 0 || kind >= OP_KINDS) return bad_op(i, "an unknown kind");
    o->kind = (int)kind;
    PyObject *links = PyTuple_GET_ITEM(spec, 3), *names = PyTuple_GET_ITEM(spec, 4);
    PyObject *convert = PyTuple_GET_ITEM(spec, 5);
    if (!PyTuple_Check(links)) return bad_op(i, "links must be a tuple");
    if (convert != Py_None) {
        if (!PyCallable_Check(convert)) return bad_op(i, "convert must be callable or None");
        o->convert = convert;
        o->schema = PyTuple_GET_ITEM(spec, 6);
    }
    switch (o->kind) {
    case OP_FIXED:
        o->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
        if (o->size == -1 && PyErr_Occurred()) return -1;
        if (o->size < 0) return bad_op(i, "a negative fixed size");
        break;
    case OP_OMIT:
        if (o->convert != NULL) return bad_op(i, "an omit has no logical type");
        /* fall through */
    case OP_ARRAY:
    case OP_MAP:
        o->target = op_index(PyTuple_GET_ITEM(spec, 2), self->count, i);
        if (o->target < 0) return -1;
        break;
    case OP_ENUM:
        if (!PyTuple_Check(names)) return bad_op(i, "an enum's symbols must be a tuple");
        o->names = names;
        o->size = PyTuple_GET_SIZE(names);
        break;
    case OP_RECORD:
        if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(links))
            return bad_op(i, "a record needs a tuple of names, one per field");
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); k++)
            if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, k)))
                return bad_op(i, "a field name must be a str");
        o->names = names;
        /* fall through */
    case OP_UNION:
        o->size = PyTuple_GET_SIZE(links);
        o->target = *next_link;
        for (Py_ssize_t k = 0; k < o->size; k++) {
            Py_ssize_t at = op_index(PyTuple_GET_ITEM(links, k), self->count, i);
            if (at < 0) return -1;
            self->links[(*next_link)++] = at;
        }
        break;
    default:
        break;
    }
    return 0;
}

/* Which ops can take no bytes: the least fixed point (a record that holds itself is not). */
static void find_zero_sizes(program *self) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (Py_ssize_t i = 0; i < self->count; i++) {
            op *o = &self->ops[i];
            if (o->zero_size) continue;
            int zero = o->kind == OP_NULL || (o->kind == OP_FIXED && o->size == 0) ||
                       (o->kind == OP_OMIT && self->ops[o->target].zero_size);
            if (o->kind == OP_RECORD) {
                zero = 1;
                for (Py_ssize_t k = 0; k < o->size; k++)
                    zero = zero && self->ops[self->links[o->target + k]].zero_size;
            }
            if (zero) o->zero_size = changed = 1;
        }
    }
}

static PyObject *program_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *source;
    static char *keywords[] = {"ops", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Program", keywords, &source)) return NULL;
    PyObject *ops = PySequence_Tuple(source);
    if (ops == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(ops), link_count = 0;
    if (count == 0) {
        Py_DECREF(ops);
        PyErr_SetString(PyExc_ValueError, "a program needs at least one op");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *spec = PyTuple_GET_ITEM(ops, i);
        if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 7 &&
            PyTuple_Check(PyTuple_GET_ITEM(spec, 3)))
            link_count += PyTuple_GET_SIZE(PyTuple_GET_ITEM(spec, 3));
    }
    program *self = (program *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(ops);
        return NULL;
    }
    self->keep = ops;
    self->count = count;
    self->ops = PyMem_Calloc((size_t)count, sizeof(op));
    self->links = PyMem_Calloc((size_t)link_count + 1, sizeof(Py_ssize_t));
    if (self->ops == NULL || self->links == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    Py_ssize_t next_link = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (build_op(self, i, PyTuple_GET_ITEM(ops, i), &next_link)) {
            Py_DECREF(self);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (self->ops[i].kind == OP_OMIT && self->ops[self->ops[i].target].kind == OP_OMIT) {
            bad_op(i, "an omit of an omit");
            Py_DECREF(self);
            return NULL;
        }
    }
    find_zero_sizes(self);
    return (PyObject *)self;
}

static PyTypeObject program_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tidemark.core._avroread.Program",
    .tp_doc = "An Avro schema compiled for read(): Program(ops), ops as tidemark.core.avro_read builds them.",
    .tp_basicsize = sizeof(program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = program_new,
    .tp_dealloc = (destructor)program_dealloc,
};

/* -- reading --------------------------------------------------------------------------- */

static PyObject *fail(reader *r, const char *what) {
    PyErr_Format(AvroReadError, "%s at byte %zd", what, (Py_ssize_t)(r->p - r->base));
    return NULL;
}

static PyObject *decline(reader *r) {
    r->declined = 1;
    return NULL;
}

/* A zig-zag varint: 0, or -1 with an error set or r->declined. */
static int read_long(reader *r, int64_t *out) {
    if (r->p < r->end && *r->p < 0x80) { /* one byte: most of them */
        uint64_t n = *r->p++;
        *out = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
        return 0;
    }
    uint64_t n = 0;
    for (int shift = 0;; shift += 7) {
        if (r->p >= r->end) {
            fail(r, shift ? "a long is cut off" : "the body ends where a long should be");
            return -1;
        }
        uint64_t b = *r->p++;
        n |= (b & 0x7F) << shift; /* the tenth byte's shift is 63: its bit 0 only */
        if (!(b & 0x80)) break;
        if (shift == 63) { /* an eleventh byte: fastavro shifts it past 64 bits */
            decline(r);
            return -1;
        }
    }
    *out = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
    return 0;
}

/* A bytes or string length that the remaining bytes hold. */
static int read_length(reader *r, Py_ssize_t *out) {
    int64_t n;
    if (read_long(r, &n)) return -1;
    if (n < 0) {
        fail(r, "a negative length");
        return -1;
    }
    if (n > r->end - r->p) {
        fail(r, "a length past the end of the body");
        return -1;
    }
    *out = (Py_ssize_t)n;
    return 0;
}

/* An index into a union's branches or an enum's symbols; negative ones count from the end,
 * as fastavro's list indexing does. */
static int read_index(reader *r, Py_ssize_t size, Py_ssize_t *out, const char *what) {
    int64_t i;
    if (read_long(r, &i)) return -1;
    if (i < 0) i += size;
    if (i < 0 || i >= size) {
        fail(r, what);
        return -1;
    }
    *out = (Py_ssize_t)i;
    return 0;
}

/* A block count of an array or a map: the count, after the byte size a negative one has. */
static int read_block(reader *r, int64_t *count) {
    if (read_long(r, count)) return -1;
    if (*count < 0) {
        int64_t size;
        if (*count == INT64_MIN) {
            decline(r);
            return -1;
        }
        *count = -*count;
        if (read_long(r, &size)) return -1; /* fastavro does not use it */
    }
    return 0;
}

static PyObject *read_value(reader *r, Py_ssize_t at, int depth);
static int skip_value(reader *r, Py_ssize_t at, int depth);

static PyObject *read_array(reader *r, const op *o, int depth) {
    const op *item = &r->prog->ops[o->target];
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    int64_t count, zero_items = 0;
    for (;;) {
        if (read_block(r, &count)) goto error;
        if (count == 0) return list;
        if (item->zero_size) {
            if (count > ZERO_SIZE_CAP - zero_items) {
                decline(r);
                goto error;
            }
            zero_items += count;
        } else if (count > r->end - r->p) { /* each item takes a byte at least */
            fail(r, "an array block longer than the body");
            goto error;
        }
        for (int64_t k = 0; k < count; k++) {
            PyObject *v = read_value(r, o->target, depth + 1);
            if (v == NULL) goto error;
            int failed = PyList_Append(list, v);
            Py_DECREF(v);
            if (failed) goto error;
        }
    }
error:
    Py_DECREF(list);
    return NULL;
}

static PyObject *read_map(reader *r, const op *o, int depth) {
    PyObject *dict = PyDict_New();
    if (dict == NULL) return NULL;
    int64_t count;
    for (;;) {
        if (read_block(r, &count)) goto error;
        if (count == 0) return dict;
        if (count > r->end - r->p) { /* each key takes a byte at least */
            fail(r, "a map block longer than the body");
            goto error;
        }
        for (int64_t k = 0; k < count; k++) {
            Py_ssize_t n;
            if (read_length(r, &n)) goto error;
            PyObject *key = PyUnicode_DecodeUTF8((const char *)r->p, n, NULL);
            if (key == NULL) goto error;
            r->p += n;
            PyObject *v = read_value(r, o->target, depth + 1);
            if (v == NULL) {
                Py_DECREF(key);
                goto error;
            }
            int failed = PyDict_SetItem(dict, key, v);
            Py_DECREF(key);
            Py_DECREF(v);
            if (failed) goto error;
        }
    }
error:
    Py_DECREF(dict);
    return NULL;
}

static PyObject *read_record(reader *r, const op *o, int depth) {
#if PY_VERSION_HEX < 0x030D0000
    PyObject *dict = _PyDict_NewPresized(o->size); /* no resizing as the fields go in */
#else
    PyObject *dict = PyDict_New();
#endif
    if (dict == NULL) return NULL;
    const Py_ssize_t *fields = r->prog->links + o->target;
    for (Py_ssize_t k = 0; k < o->size; k++) {
        const op *f = &r->prog->ops[fields[k]];
        if (f->kind == OP_OMIT) { /* at the depth read_value would read the field at */
            if (skip_value(r, f->target, depth + 1)) {
                Py_DECREF(dict);
                return NULL;
            }
            continue;
        }
        PyObject *v = read_value(r, fields[k], depth + 1);
        if (v == NULL) {
            Py_DECREF(dict);
            return NULL;
        }
        int failed = PyDict_SetItem(dict, PyTuple_GET_ITEM(o->names, k), v);
        Py_DECREF(v);
        if (failed) {
            Py_DECREF(dict);
            return NULL;
        }
    }
    return dict;
}

static PyObject *read_value(reader *r, Py_ssize_t at, int depth) {
    const op *o = &r->prog->ops[at];
    PyObject *v;
    switch (o->kind) {
    case OP_NULL:
        v = Py_NewRef(Py_None);
        break;
    case OP_BOOLEAN:
        if (r->p >= r->end) return fail(r, "the body ends where a boolean should be");
        v = PyBool_FromLong(*r->p++ != 0); /* as fastavro: any byte but 0 is true */
        break;
    case OP_LONG: {
        int64_t n;
        if (read_long(r, &n)) return NULL;
        v = PyLong_FromLongLong(n);
        break;
    }
    case OP_FLOAT: {
        if (r->end - r->p < 4) return fail(r, "the body ends inside a float");
        uint32_t bits = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
                        (uint32_t)r->p[3] << 24;
        float f;
        memcpy(&f, &bits, sizeof f);
        r->p += 4;
        v = PyFloat_FromDouble((double)f);
        break;
    }
    case OP_DOUBLE: {
        if (r->end - r->p < 8) return fail(r, "the body ends inside a double");
        uint64_t bits = 0;
        for (int k = 7; k >= 0; k--) bits = bits << 8 | r->p[k];
        double d;
        memcpy(&d, &bits, sizeof d);
        r->p += 8;
        v = PyFloat_FromDouble(d);
        break;
    }
    case OP_BYTES:
    case OP_STRING: {
        Py_ssize_t n;
        if (read_length(r, &n)) return NULL;
        v = o->kind == OP_BYTES ? PyBytes_FromStringAndSize((const char *)r->p, n)
                                : PyUnicode_DecodeUTF8((const char *)r->p, n, NULL);
        r->p += n;
        break;
    }
    case OP_FIXED:
        if (r->end - r->p < o->size) return fail(r, "the body ends inside a fixed");
        v = PyBytes_FromStringAndSize((const char *)r->p, o->size);
        r->p += o->size;
        break;
    case OP_ENUM: {
        Py_ssize_t i;
        if (read_index(r, o->size, &i, "an enum index out of range")) return NULL;
        v = Py_NewRef(PyTuple_GET_ITEM(o->names, i));
        break;
    }
    case OP_UNION: {
        Py_ssize_t i;
        if (depth >= MAX_DEPTH) return decline(r);
        if (read_index(r, o->size, &i, "a union index out of range")) return NULL;
        return read_value(r, r->prog->links[o->target + i], depth + 1);
    }
    case OP_ARRAY:
        if (depth >= MAX_DEPTH) return decline(r);
        v = read_array(r, o, depth);
        break;
    case OP_MAP:
        if (depth >= MAX_DEPTH) return decline(r);
        v = read_map(r, o, depth);
        break;
    case OP_RECORD:
        if (depth >= MAX_DEPTH) return decline(r);
        v = read_record(r, o, depth);
        break;
    case OP_OMIT: /* outside a record (no compiled schema puts it there): None, once skipped */
        if (skip_value(r, at, depth)) return NULL;
        return Py_NewRef(Py_None);
    default:
        PyErr_SetString(PyExc_SystemError, "an op of no kind");
        return NULL;
    }
    if (v != NULL && o->convert != NULL) { /* fastavro's logical-type reader, as it calls it */
        PyObject *args[3] = {v, o->schema, Py_None};
        PyObject *converted = PyObject_Vectorcall(o->convert, args, 3, NULL);
        Py_DECREF(v);
        v = converted;
    }
    return v;
}

/* The reader of (program, buf, start[, stop]): 0, or -1 with TypeError (``usage``) or
 * ValueError set. */
static int start_reader(reader *r, PyObject *const *args, Py_ssize_t nargs, const char *usage) {
    if ((nargs != 3 && nargs != 4) || !PyObject_TypeCheck(args[0], &program_type) ||
        !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    Py_ssize_t stop = nargs == 4 ? PyLong_AsSsize_t(args[3]) : size;
    if ((start == -1 || stop == -1) && PyErr_Occurred()) return -1;
    if (start < 0 || stop > size || start > stop) {
        PyErr_SetString(PyExc_ValueError, "start and stop must lie within the bytes");
        return -1;
    }
    r->base = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    r->p = r->base + start;
    r->end = r->base + stop;
    r->prog = (const program *)args[0];
    r->declined = 0;
    return 0;
}

static PyObject *read_datum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    static const char usage[] = "read(program: Program, buf: bytes, start: int, stop: int = ...)";
    reader r;
    if (start_reader(&r, args, nargs, usage)) return NULL;
    PyObject *datum = read_value(&r, 0, 0);
    if (datum == NULL) {
        if (r.declined && !PyErr_Occurred()) Py_RETURN_NONE;
        return NULL;
    }
    PyObject *end = PyLong_FromSsize_t(r.p - r.base);
    if (end == NULL) {
        Py_DECREF(datum);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(datum);
        Py_DECREF(end);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, datum);
    PyTuple_SET_ITEM(pair, 1, end);
    return pair;
}

/* -- skipping: where read() would end, with no value made ------------------------------ */

/* Whether buf[0:n] is UTF-8 as Python's strict decoder takes it (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i <= need) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (Py_ssize_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

/* 0, or -1 with an error set (what read() raises, or a string that is not UTF-8) or
 * r->declined. An op with a logical type is read and converted, as read() does, so that a
 * value its converter refuses is refused here too. */
static int skip_value(reader *r, Py_ssize_t at, int depth) {
    const op *o = &r->prog->ops[at];
    if (o->convert != NULL) {
        PyObject *v = read_value(r, at, depth);
        if (v == NULL) return -1;
        Py_DECREF(v);
        return 0;
    }
    switch (o->kind) {
    case OP_NULL:
        return 0;
    case OP_BOOLEAN:
        if (r->p >= r->end) return fail(r, "the body ends where a boolean should be"), -1;
        r->p++;
        return 0;
    case OP_LONG: {
        int64_t n;
        return read_long(r, &n);
    }
    case OP_FLOAT:
        if (r->end - r->p < 4) return fail(r, "the body ends inside a float"), -1;
        r->p += 4;
        return 0;
    case OP_DOUBLE:
        if (r->end - r->p < 8) return fail(r, "the body ends inside a double"), -1;
        r->p += 8;
        return 0;
    case OP_BYTES:
    case OP_STRING: {
        Py_ssize_t n;
        if (read_length(r, &n)) return -1;
        if (o->kind == OP_STRING && !valid_utf8(r->p, n)) return fail(r, "a string not UTF-8"), -1;
        r->p += n;
        return 0;
    }
    case OP_FIXED:
        if (r->end - r->p < o->size) return fail(r, "the body ends inside a fixed"), -1;
        r->p += o->size;
        return 0;
    case OP_ENUM: {
        Py_ssize_t i;
        return read_index(r, o->size, &i, "an enum index out of range");
    }
    case OP_UNION: {
        Py_ssize_t i;
        if (depth >= MAX_DEPTH) return decline(r), -1;
        if (read_index(r, o->size, &i, "a union index out of range")) return -1;
        return skip_value(r, r->prog->links[o->target + i], depth + 1);
    }
    case OP_ARRAY:
    case OP_MAP: {
        if (depth >= MAX_DEPTH) return decline(r), -1;
        const op *item = &r->prog->ops[o->target];
        int64_t count, zero_items = 0;
        for (;;) {
            if (read_block(r, &count)) return -1;
            if (count == 0) return 0;
            if (o->kind == OP_ARRAY && item->zero_size) {
                if (count > ZERO_SIZE_CAP - zero_items) return decline(r), -1;
                zero_items += count;
            } else if (count > r->end - r->p) {
                fail(r, o->kind == OP_ARRAY ? "an array block longer than the body"
                                            : "a map block longer than the body");
                return -1;
            }
            for (int64_t k = 0; k < count; k++) {
                if (o->kind == OP_MAP) {
                    Py_ssize_t n;
                    if (read_length(r, &n)) return -1;
                    if (!valid_utf8(r->p, n)) return fail(r, "a map key not UTF-8"), -1;
                    r->p += n;
                }
                if (skip_value(r, o->target, depth + 1)) return -1;
            }
        }
    }
    case OP_RECORD: {
        if (depth >= MAX_DEPTH) return decline(r), -1;
        const Py_ssize_t *fields = r->prog->links + o->target;
        for (Py_ssize_t k = 0; k < o->size; k++)
            if (skip_value(r, fields[k], depth + 1)) return -1;
        return 0;
    }
    case OP_OMIT: /* the field's op, at the same depth (its target is never an omit) */
        return skip_value(r, o->target, depth);
    default:
        PyErr_SetString(PyExc_SystemError, "an op of no kind");
        return -1;
    }
}

static PyObject *skip_datum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    static const char usage[] = "skip(program: Program, buf: bytes, start: int, stop: int = ...)";
    reader r;
    if (start_reader(&r, args, nargs, usage)) return NULL;
    if (skip_value(&r, 0, 0)) {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
                return NULL;
            PyErr_Clear(); /* what read() raises: the caller reads the bytes the general way */
        }
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(r.p - r.base);
}

/* -- writing a long ---------------------------------------------------------------------- */

/* A Python int within 64 bits; -1 with an error set (TypeError, OverflowError) if not. */
static int long_of(PyObject *value, long long *number) {
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "an int");
        return -1;
    }
    *number = PyLong_AsLongLong(value); /* OverflowError beyond 64 bits */
    return *number == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *write_long(PyObject *self, PyObject *value) {
    (void)self;
    long long number;
    if (long_of(value, &number)) return NULL;
    unsigned char out[10];
    return PyBytes_FromStringAndSize((const char *)out, avro_encode_long(number, out));
}

/* write_long(offset), then the Avro string "major,minor" (its length, its digits). */
static PyObject *write_offset_position(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long offset, major, minor;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "write_offset_position(offset, major, minor)");
        return NULL;
    }
    if (long_of(args[0], &offset) || long_of(args[1], &major) || long_of(args[2], &minor))
        return NULL;
    char position[48];
    int length = snprintf(position, sizeof position, "%lld,%lld", major, minor);
    unsigned char out[10 + 10 + sizeof position];
    int n = avro_encode_long(offset, out);
    n += avro_encode_long(length, out + n);
    memcpy(out + n, position, (size_t)length);
    return PyBytes_FromStringAndSize((const char *)out, n + length);
}

static PyMethodDef methods[] = {
    {"read", (PyCFunction)(void (*)(void))read_datum, METH_FASTCALL,
     "(datum, end) of the Avro datum at buf[start:stop], or None (declined)."},
    {"skip", (PyCFunction)(void (*)(void))skip_datum, METH_FASTCALL,
     "The end of the Avro datum at buf[start:stop] (where read() ends), or None where read() "
     "declines or raises."},
    {"write_long", (PyCFunction)write_long, METH_O,
     "Avro's encoding of a long (zig-zag, then a varint); OverflowError beyond 64 bits."},
    {"write_offset_position", (PyCFunction)(void (*)(void))write_offset_position, METH_FASTCALL,
     "write_long(offset), then the Avro string \"major,minor\"; OverflowError beyond 64 bits."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_avroread", "An Avro reader for compiled schemas.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__avroread(void) {
    if (PyType_Ready(&program_type) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    AvroReadError = PyErr_NewExceptionWithDoc(
        "tidemark.core._avroread.AvroReadError",
        "Bytes that are not a valid Avro datum of the program's schema.", PyExc_ValueError, NULL);
    if (AvroReadError == NULL || PyModule_AddObjectRef(m, "AvroReadError", AvroReadError) < 0 ||
        PyModule_AddObjectRef(m, "Program", (PyObject *)&program_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return with_sources_digest(m);
}
