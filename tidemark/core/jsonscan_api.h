/* The compiled scanner's C interface (tidemark/core/_jsonscan.c), for other extensions: the
 * processor's fused loops scan without a Python call per event. A module gets it with
 * jsonscan_import() (the capsule tidemark.core._jsonscan.CAPI); the functions read
 * buf[start:end] of a buffer whose first byte is base, as their Python forms do. */
#ifndef TIDEMARK_JSONSCAN_API_H
#define TIDEMARK_JSONSCAN_API_H

#include <Python.h>
#include <stdint.h>

/* What scan_change finds (tidemark/core/json_scan.py names each): offsets from base. */
typedef struct {
    Py_ssize_t before, before_end, after, after_end;
    int before_row, op;
    int64_t major, minor;
    int txid_present;
    int64_t txid;
    int snapshot, connector, toast;
    Py_ssize_t open, close;
} jsonscan_change;

typedef struct {
    /* 0 with *out filled, 1 declined. */
    int (*scan_change)(const unsigned char *base, Py_ssize_t start, Py_ssize_t end,
                       jsonscan_change *out);
    /* 1 exactly one JSON object, 0 not (declined). */
    int (*scan_object)(const unsigned char *base, Py_ssize_t start, Py_ssize_t end);
    /* 1 an object with a member and none named schema or payload, 0 not (declined). */
    int (*scan_bare_key)(const unsigned char *base, Py_ssize_t start, Py_ssize_t end);
} jsonscan_api;

#define JSONSCAN_CAPSULE "tidemark.core._jsonscan.CAPI"

/* The interface, or NULL with an ImportError set. */
static inline const jsonscan_api *jsonscan_import(void) {
    PyObject *module = PyImport_ImportModule("tidemark.core._jsonscan"); /* the capsule's */
    if (module == NULL) return NULL;
    Py_DECREF(module);
    return (const jsonscan_api *)PyCapsule_Import(JSONSCAN_CAPSULE, 0);
}

#endif
