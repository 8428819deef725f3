/* Every compiled module keeps the digest of the C sources it was built from
 * (tidemark/core/compiled.py): setup.py defines TIDEMARK_SOURCES_DIGEST. */
#ifndef TIDEMARK_SOURCES_DIGEST_H
#define TIDEMARK_SOURCES_DIGEST_H

#include <Python.h>

#ifndef TIDEMARK_SOURCES_DIGEST
#error "TIDEMARK_SOURCES_DIGEST is not defined: build the extensions through setup.py"
#endif

/* m with its SOURCES_DIGEST; NULL (m released) on failure, or when m is NULL. */
static inline PyObject *with_sources_digest(PyObject *m) {
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCES_DIGEST", TIDEMARK_SOURCES_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

#endif
