/*
 * native/common.h — what every file of tb_perfdiag._native shares: the error context a
 * scan unwinds to, the columns handed to Python (Column) and grown in C (Vec), and the
 * small helpers of the module's argument handling.
 *
 * The files: common.c (this header's functions), xspace.c (the XSpace wire-format
 * scanner), kineto.c (the Kineto JSON scanner, its stream and its walk-ahead parts),
 * strings.h (interned strings and UTF-8, for both scanners), passes.c (nesting and the
 * analysis passes), search.h and search.c (the sorted-times searches), pages.c (recycled
 * pages), hlo.c (an HloProto's instructions as columns), module.c (the method table).
 */
#ifndef TB_PERFDIAG_COMMON_H
#define TB_PERFDIAG_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include "pages.h"

#if !defined(_WIN32)
#include <sys/mman.h>
#define HAVE_BUS_GUARD 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define NORETURN __attribute__((noreturn))
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#define NORETURN
#endif

#if defined(__SIZEOF_INT128__)
__extension__ typedef __int128 i128;
#else
#error "a compiler with __int128 is required"
#endif

/* ======================================================================
 * Error handling: every scanner keeps its state in a heap context with a
 * jmp_buf; failures longjmp back to the entry point, which frees the context.
 * ====================================================================== */

typedef struct {
    jmp_buf jb;
    const char *err;     /* message for ValueError; NULL when a Python error is set */
    Py_ssize_t err_pos;
    PyThreadState *released; /* non-NULL while the scan runs without the GIL */
} Fail;

/* The byte loops run without the GIL, so that the server's other threads (progress
 * polls, other requests, other hosts of a pod) go on while a large file is decoded.
 * Every Python call inside a scan sits between gil_hold and gil_restore. */
static inline void gil_release(Fail *f) {
    if (!f->released) f->released = PyEval_SaveThread();
}

static inline PyThreadState *gil_hold(Fail *f) {
    PyThreadState *s = f->released;
    if (s) {
        f->released = NULL;
        PyEval_RestoreThread(s);
    }
    return s;
}

static inline void gil_restore(Fail *f, PyThreadState *held_from) {
    if (held_from) gil_release(f);
}

NORETURN void fail_at(Fail *f, Py_ssize_t pos, const char *msg);
NORETURN void fail_py(Fail *f); /* a Python exception is set (so the GIL is held) */
NORETURN void fail_oom(Fail *f);
/* the ValueError (or the Python error already set) for a failed scan */
void raise_fail(Fail *f, const char *what);

/* ---------------- columns ----------------
 * Their memory comes from native/pages.c: a large block is a private anonymous mapping
 * that grows with mremap (no copy) over transparent huge pages, as numpy asks for its
 * own arrays.  (A bytearray grown by realloc faulted its pages in 4 KiB at a time:
 * 2.3 M page faults and 14 s of system time for a 40 M-event XSpace on 2 cores.)
 * Within a read's recycled_pages scope, the blocks of columns dropped later by the
 * build are handed on to its numpy arrays.  A finished column is handed to Python as
 * a Column, a buffer that owns the memory. */

typedef struct {
    PyObject_HEAD
    char *data;         /* from pages_take or pages_resize */
    size_t len;
} Column;

extern PyTypeObject ColumnType;

/* A Column of n bytes, not yet written, for outputs made at their final size (or cut
 * by column_cut).  Inside a recycled_pages scope it reuses the pages of freed arrays,
 * and counts toward that scope's peak. */
PyObject *new_column(Py_ssize_t n);
/* a new_column shortened to n bytes (the pages past them go back) */
void column_cut(PyObject *o, size_t n);

#define COL_DATA(o) (((Column *)(o))->data)

/* a signed integer column of 1, 2, 4 or 8 bytes a value, read or written as int64: the
   analysis holds step columns as narrow as their values allow (a step per event: int8
   where the steps are few, 114 MB fewer than int32 at 40 M events) */
static inline int64_t int_at(const void *p, int width, Py_ssize_t i) {
    switch (width) {
    case 1: return ((const int8_t *)p)[i];
    case 2: return ((const int16_t *)p)[i];
    case 4: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static inline void int_put(void *p, int width, Py_ssize_t i, int64_t v) {
    switch (width) {
    case 1: ((int8_t *)p)[i] = (int8_t)v; break;
    case 2: ((int16_t *)p)[i] = (int16_t)v; break;
    case 4: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((int64_t *)p)[i] = v;
    }
}

static inline int int_width_ok(int width) {
    return width == 1 || width == 2 || width == 4 || width == 8;
}

/* ---------------- growable byte vector ---------------- */

typedef struct {
    PyObject *col;      /* the Column it was handed over as, which owns data; or NULL */
    char *data;
    size_t len, cap;
} Vec;

void vec_grow(Fail *f, Vec *v, size_t extra);

static inline void vec_put(Fail *f, Vec *v, const void *src, size_t n) {
    if (UNLIKELY(v->len + n > v->cap)) vec_grow(f, v, n);
    if (n) memcpy(v->data + v->len, src, n);
    v->len += n;
}

#define VEC_PUSH(f, v, T, x) do { T tmp_ = (x); vec_put((f), (v), &tmp_, sizeof(T)); } while (0)

void vec_free(Vec *v);
/* The column as a Column of exactly len bytes (a new reference; v keeps one too and its
 * data stays readable).  The doubling's slack goes back (up to half a column: 0.5 GB
 * on a 40 M-event XSpace).  The GIL is held. */
PyObject *vec_to_column(Vec *v);

/* ---------------- a scanner's arguments and results ---------------- */

/* Publishes how far the scan is for a progress bar read by another thread (an aligned
 * 8-byte store: a reader sees the old or the new value, never a mix). */
static inline void publish(int64_t *done, int64_t pos) {
    if (done) __atomic_store_n(done, pos, __ATOMIC_RELAXED);
}

/* dict[key] = value, stealing value */
int dict_put(PyObject *d, const char *key, PyObject *value);
/* A scanner's arguments: the bytes, and optionally a writable, aligned buffer of at least
 * 8 bytes (a one-element int64 array) where the bytes scanned so far are published. */
int scan_args(PyObject *args, const char *fn, Py_buffer *view, Py_buffer *done,
              int64_t **done_at);
void scan_args_release(Py_buffer *view, Py_buffer *done);

/* PyBuffer_Release of each buffer a method's arguments were parsed into: the methods
   of passes.c and search.c take four or five buffers each */
void buffers_release(Py_buffer **bufs);
#define RELEASE_BUFFERS(...) buffers_release((Py_buffer *[]){__VA_ARGS__, NULL})

#endif
