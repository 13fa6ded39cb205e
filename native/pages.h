/* native/pages.c: recycled pages for numpy's large arrays, used by
   tb_perfdiag/trace/pages.py */
#ifndef TB_PERFDIAG_PAGES_H
#define TB_PERFDIAG_PAGES_H
#include <Python.h>

PyObject *pages_install(PyObject *self, PyObject *args);
PyObject *pages_enter(PyObject *self, PyObject *args);
PyObject *pages_leave(PyObject *self, PyObject *args);
PyObject *pages_stats(PyObject *self, PyObject *unused);
PyObject *pages_tune(PyObject *self, PyObject *args);
PyObject *pages_let_go(PyObject *self, PyObject *unused);
PyObject *pages_lower(PyObject *self, PyObject *args);
PyObject *pages_heap_pad(PyObject *self, PyObject *args);
PyObject *pages_huge(PyObject *self, PyObject *args);

/* memory for the extension's own columns, from the same pages as numpy's arrays
   (within a scope, recycled); no GIL needed.  pages_resize keeps the first bytes
   (a large block moves by mremap, not by a copy); pages_cut gives back what lies
   past n bytes; pages_take_zeroed's block reads as zeros, its pages faulted in only as
   they are written (as calloc's).  The C passes' scratch comes from here too: a kept
   block serves it, and it counts in what the kept blocks must make room for */
void *pages_take(size_t n);
void *pages_take_zeroed(size_t n);
void *pages_resize(void *p, size_t n);
void pages_give(void *p);
void pages_cut(void *p, size_t n);

#endif
