/*
 * tb_perfdiag._native — C versions of the two reference scanners.
 *
 *   scan_xspace(buf, done, wanted) -> dict   mirrors tb_perfdiag.trace.xspace.scan_python
 *   scan_kineto(buf) -> dict   mirrors tb_perfdiag.trace.kineto.scan_python
 *
 * Both return flat columns as buffers (Column; the Python wrapper
 * tb_perfdiag/trace/native_scan.py wraps them with np.frombuffer) and raise
 * ValueError for any input they do not accept; the caller then runs the
 * reference scanner, which names the problem precisely.  Validation is at least
 * as strict as the reference parsers (upb for XSpace, orjson for JSON): when a
 * scanner here returns a result, the reference would have accepted the input.
 *
 * No Python objects are created per event: columns grow as plain C arrays, handed
 * to Python at the end without a copy.  Every read is bounds-checked; nesting
 * is walked iteratively (JSON) or bounded by the schema (protobuf).
 */
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

static NORETURN void fail_at(Fail *f, Py_ssize_t pos, const char *msg) {
    f->err = msg;
    f->err_pos = pos;
    longjmp(f->jb, 1);
}

static NORETURN void fail_py(Fail *f) { /* a Python exception is set (so the GIL is held) */
    f->err = NULL;
    longjmp(f->jb, 1);
}

static NORETURN void fail_oom(Fail *f) {
    gil_hold(f);
    PyErr_NoMemory();
    fail_py(f);
}

static void raise_fail(Fail *f, const char *what) {
    if (f->err == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s: %s (at byte %zd)", what, f->err, f->err_pos);
}

/* ---------------- growable byte vector ----------------
 * Its memory comes from native/pages.c: a large block is a private anonymous mapping
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

static int column_getbuffer(PyObject *o, Py_buffer *view, int flags) {
    Column *c = (Column *)o;   /* data is never NULL: new_column and vec_to_column see to it */
    return PyBuffer_FillInfo(view, o, c->data, (Py_ssize_t)c->len, 0, flags);
}

static void column_dealloc(PyObject *o) {
    pages_give(((Column *)o)->data);
    Py_TYPE(o)->tp_free(o);
}

static Py_ssize_t column_length(PyObject *o) { return (Py_ssize_t)((Column *)o)->len; }

static PyBufferProcs column_buffer = {column_getbuffer, NULL};
static PySequenceMethods column_sequence = {.sq_length = column_length};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tb_perfdiag._native.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_sequence = &column_sequence,
    .tp_as_buffer = &column_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of a scan: a writable buffer (np.frombuffer) that owns its memory.",
};

/* A Column of n bytes, not yet written, for outputs made at their final size (or cut
 * by column_cut).  Its memory comes from native/pages.c: inside a recycled_pages
 * scope it reuses the pages of freed arrays, and counts toward that scope's peak. */
static PyObject *new_column(Py_ssize_t n) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) return NULL;
    c->data = pages_take((size_t)n);
    c->len = (size_t)n;
    if (!c->data) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    return (PyObject *)c;
}

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

/* a new_column shortened to n bytes (the pages past them go back) */
static void column_cut(PyObject *o, size_t n) {
    Column *c = (Column *)o;
    if (n < c->len) {
        c->len = n;
        pages_cut(c->data, n);
    }
}

typedef struct {
    PyObject *col;      /* the Column it was handed over as, which owns data; or NULL */
    char *data;
    size_t len, cap;
} Vec;

static void vec_grow(Fail *f, Vec *v, size_t extra) {
    size_t need = v->len + extra;
    if (v->col || need < v->len || need > (size_t)PY_SSIZE_T_MAX / 2) fail_oom(f);
    size_t nc = v->cap ? v->cap : 256;
    /* large columns grow by an eighth (mremap moves no bytes): the slack is counted as
       in use by the pages' peak, though never written */
    if (nc >= ((size_t)32 << 20)) nc += nc / 8;
    while (nc < need) nc *= 2;
    char *q = pages_resize(v->data, nc);
    if (!q) fail_oom(f);
    v->data = q;
    v->cap = nc;
}

static inline void vec_put(Fail *f, Vec *v, const void *src, size_t n) {
    if (UNLIKELY(v->len + n > v->cap)) vec_grow(f, v, n);
    if (n) memcpy(v->data + v->len, src, n);
    v->len += n;
}

#define VEC_PUSH(f, v, T, x) do { T tmp_ = (x); vec_put((f), (v), &tmp_, sizeof(T)); } while (0)

static void vec_free(Vec *v) {
    if (v->col) Py_CLEAR(v->col);
    else if (v->data) pages_give(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

/* The column as a Column of exactly len bytes (a new reference; v keeps one too and its
 * data stays readable).  The doubling's slack goes back (up to half a column: 0.5 GB
 * on a 40 M-event XSpace).  The GIL is held. */
static PyObject *vec_to_column(Vec *v) {
    if (!v->col) {
        Column *c = PyObject_New(Column, &ColumnType);
        if (!c) return NULL;
        if (!v->data) v->data = pages_take(0);
        if (!v->data) {
            Py_DECREF(c);
            return PyErr_NoMemory();
        }
        pages_cut(v->data, v->len);
        c->data = v->data;
        c->len = v->len;
        v->col = (PyObject *)c;
    }
    Py_INCREF(v->col);
    return v->col;
}

/* ---------------- arena: stable storage for copied strings ---------------- */

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;
    unsigned char data[];
} Chunk;

typedef struct {
    Chunk *head;
} Arena;

static unsigned char *arena_alloc(Fail *f, Arena *a, size_t n) {
    Chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = (Chunk *)malloc(sizeof(Chunk) + cap);
        if (!c) fail_oom(f);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    unsigned char *r = c->data + c->used;
    c->used += n;
    return r;
}

static void arena_free(Arena *a) {
    Chunk *c = a->head;
    while (c) {
        Chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

/* ---------------- string interning (first-seen order) ---------------- */

typedef struct {
    const unsigned char *p;
    size_t n;
    uint64_t h;
} Ent;

typedef struct {
    Ent *ents;
    size_t nents, cap;
    int32_t *slots;    /* -1 = empty */
    size_t mask;
} Table;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Two lanes of 8 bytes, each one multiply and a rotation per word (the rotation brings
 * the product's mixed high bits down), folded by mix64: kernel names run to hundreds of
 * bytes and are hashed once per event. */
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t a = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)n * 0x87c37b91114253d5ULL);
    uint64_t b = 0xC2B2AE3D27D4EB4FULL;
    size_t left = n;
    while (left >= 16) {
        uint64_t w0, w1;
        memcpy(&w0, p, 8);
        memcpy(&w1, p + 8, 8);
        a = (a ^ w0) * 0xff51afd7ed558ccdULL;
        b = (b ^ w1) * 0xc4ceb9fe1a85ec53ULL;
        a = (a << 31) | (a >> 33);
        b = (b << 27) | (b >> 37);
        p += 16;
        left -= 16;
    }
    if (left >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        a = (a ^ w) * 0xff51afd7ed558ccdULL;
        a = (a << 31) | (a >> 33);
        p += 8;
        left -= 8;
    }
    /* the last bytes by overlapping loads, not a byte loop */
    uint64_t w = 0;
    if (left && n >= 8) {
        memcpy(&w, p + left - 8, 8);
    } else if (left >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + left - 4, 4);
        w = lo | (uint64_t)hi << 32;
    } else if (left) {
        w = p[0] | (uint64_t)p[left / 2] << 8 | (uint64_t)p[left - 1] << 16;
    }
    b = (b ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return mix64(a ^ ((b << 32) | (b >> 32)) ^ ((uint64_t)left << 59));
}

static void table_rehash(Fail *f, Table *t) {
    size_t ns = t->mask ? (t->mask + 1) * 2 : 64;
    int32_t *slots = (int32_t *)malloc(ns * sizeof(int32_t));
    if (!slots) fail_oom(f);
    memset(slots, 0xff, ns * sizeof(int32_t));
    for (size_t i = 0; i < t->nents; i++) {
        size_t s = (size_t)t->ents[i].h & (ns - 1);
        while (slots[s] >= 0) s = (s + 1) & (ns - 1);
        slots[s] = (int32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = ns - 1;
}

/* Id of the byte string p[0:n]; a new entry keeps the pointer (copy==0: p must
 * outlive the table) or a copy made in the arena. */
static int32_t intern(Fail *f, Table *t, Arena *a, const unsigned char *p, size_t n, int copy) {
    if (UNLIKELY(t->mask == 0 || (t->nents + 1) * 2 > t->mask + 1)) table_rehash(f, t);
    uint64_t h = hash_bytes(p, n);
    size_t s = (size_t)h & t->mask;
    for (;;) {
        int32_t i = t->slots[s];
        if (i < 0) break;
        const Ent *e = &t->ents[i];
        if (e->h == h && e->n == n && memcmp(e->p, p, n) == 0) return i;
        s = (s + 1) & t->mask;
    }
    if (t->nents >= 0x7fffffff) fail_at(f, 0, "too many distinct strings");
    if (t->nents == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        Ent *ne = (Ent *)realloc(t->ents, nc * sizeof(Ent));
        if (!ne) fail_oom(f);
        t->ents = ne;
        t->cap = nc;
    }
    if (copy) {
        unsigned char *q = arena_alloc(f, a, n ? n : 1);
        if (n) memcpy(q, p, n);
        p = q;
    }
    int32_t id = (int32_t)t->nents++;
    t->ents[id].p = p;
    t->ents[id].n = n;
    t->ents[id].h = h;
    t->slots[s] = id;
    return id;
}

static void table_free(Table *t) {
    free(t->ents);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* ---------------- UTF-8 validation (strict, as upb and orjson) ---------------- */

/* p[0] >= 0x80: pointer after a valid multi-byte sequence, or NULL */
static inline const unsigned char *utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned b0 = p[0];
    if (b0 < 0xC2) return NULL;
    if (b0 < 0xE0) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80) return NULL;
        return p + 2;
    }
    if (b0 < 0xF0) {
        if (end - p < 3) return NULL;
        unsigned b1 = p[1];
        if (b0 == 0xE0) {
            if (b1 < 0xA0 || b1 > 0xBF) return NULL;
        } else if (b0 == 0xED) {
            if (b1 < 0x80 || b1 > 0x9F) return NULL;
        } else if ((b1 & 0xC0) != 0x80) {
            return NULL;
        }
        if ((p[2] & 0xC0) != 0x80) return NULL;
        return p + 3;
    }
    if (b0 > 0xF4 || end - p < 4) return NULL;
    unsigned b1 = p[1];
    if (b0 == 0xF0) {
        if (b1 < 0x90 || b1 > 0xBF) return NULL;
    } else if (b0 == 0xF4) {
        if (b1 < 0x80 || b1 > 0x8F) return NULL;
    } else if ((b1 & 0xC0) != 0x80) {
        return NULL;
    }
    if ((p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return NULL;
    return p + 4;
}

static int utf8_valid(const unsigned char *p, size_t n) {
    const unsigned char *end = p + n;
    while (p < end) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (w & 0x8080808080808080ULL) break;
            p += 8;
        }
        if (p >= end) break;
        if (*p < 0x80) {
            p++;
            continue;
        }
        p = utf8_seq(p, end);
        if (!p) return 0;
    }
    return 1;
}

/* ======================================================================
 * XSpace (protobuf wire format)
 * ====================================================================== */

enum { ST_NONE = 0, ST_DOUBLE, ST_UINT, ST_INT, ST_STR, ST_BYTES, ST_REF };

/* The stats the model reads (tb_perfdiag.trace.xspace_stats.STATS) are kept, split by stat as
 * they are read: a column of every stat row (its event, metadata id, kind and value) was
 * 1.7 GB on a 40 M-event file, and splitting it afterwards took two more passes. */
#define X_MAX_WANTED 64
/* a plane's wanted stat metadata ids below this are looked up in a table, others (and
 * negative ones) in a hash map: either holds only ids that name a wanted stat, so a plane
 * with 600 k stat metadata entries (ref values) costs a table as large as its largest
 * wanted id */
#define X_CODE_TABLE_MAX ((int64_t)1 << 24)

typedef struct {
    Vec ev, val, kind;   /* per row: event (int32), value (int64), kind (int8) */
} StatRows;

typedef struct {
    int64_t *keys;
    int8_t *codes;       /* -1: an id no longer wanted (a free slot has key 0) */
    size_t cap, n;       /* cap a power of two; n slots used */
} FarCodes;

typedef struct {
    Fail f;
    const unsigned char *buf, *end;
    Vec ev_line, ev_meta, ev_off, ev_dur;
    int n_wanted;
    const char *wanted[X_MAX_WANTED];   /* UTF-8 of the wanted names (owned by the caller) */
    Py_ssize_t wanted_len[X_MAX_WANTED];
    StatRows rows[X_MAX_WANTED];
    int8_t *code_table;  /* this plane's metadata id → wanted index, or -1 */
    size_t code_n;       /* ids below this are in the table */
    FarCodes far;        /* the same for wanted ids off the table */
    int64_t nevents;
    Vec meta;            /* scratch: one plane's fields except its lines */
    Vec ev_ids;          /* scratch: one plane's event metadata ids */
    Vec md_stat_ids;     /* scratch: ids of those entries that carry stats of their own */
    PyObject *plane_tmp[3]; /* one plane's event names, shown names, stat names */
    Table strings;
    Arena arena;
    int64_t nlines;
    int64_t *done;       /* NULL, or where the bytes scanned so far are published */
    PyObject *planes, *lines, *errors, *warnings, *hostnames;
    int mapped;          /* buf is a file mapping: strings are copied, pages let go behind */
    const unsigned char *kept; /* mapped: pages before this are already let go */
} XCtx;

/* Publishes how far the scan is for a progress bar read by another thread (an aligned
 * 8-byte store: a reader sees the old or the new value, never a mix). */
static inline void publish(int64_t *done, int64_t pos) {
    if (done) __atomic_store_n(done, pos, __ATOMIC_RELAXED);
}

#define XPOS(c, p) ((Py_ssize_t)((p) - (c)->buf))

/* A mapped file's pages behind the scan are dropped from this process every 32 MB: the
 * scan reads each byte once (strings are copied), so the file costs the process at most
 * this much resident memory, whatever its size; the pages stay in the page cache. */
#define MAP_LET_GO ((ptrdiff_t)32 << 20)

static void map_let_go(XCtx *c, const unsigned char *p) {
#if defined(MADV_DONTNEED)
    uintptr_t page = 4096, lo = (uintptr_t)c->kept, hi = (uintptr_t)p & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    c->kept = (const unsigned char *)hi;
#else
    c->kept = p;
#endif
}

static inline const unsigned char *x_varint(XCtx *c, const unsigned char *p, const unsigned char *end,
                                            uint64_t *out, int maxlen) {
    if (LIKELY(p < end && *p < 0x80)) {
        *out = *p;
        return p + 1;
    }
    uint64_t v = 0;
    for (int i = 0; i < maxlen; i++) {
        if (p + i >= end) fail_at(&c->f, XPOS(c, p), "truncated varint");
        unsigned b = p[i];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return p + i + 1;
        }
    }
    fail_at(&c->f, XPOS(c, p), "varint too long");
}

static inline const unsigned char *x_tag(XCtx *c, const unsigned char *p, const unsigned char *end,
                                         uint32_t *fn, uint32_t *wt) {
    uint64_t v;
    const unsigned char *q = x_varint(c, p, end, &v, 5);
    if (v > 0xffffffffULL || (v >> 3) == 0) fail_at(&c->f, XPOS(c, p), "bad field tag");
    *fn = (uint32_t)(v >> 3);
    *wt = (uint32_t)(v & 7);
    return q;
}

static inline const unsigned char *x_len(XCtx *c, const unsigned char *p, const unsigned char *end,
                                         size_t *n) {
    uint64_t v;
    const unsigned char *q = x_varint(c, p, end, &v, 5);
    if (v > 0x7fffffffULL || v > (uint64_t)(end - q)) fail_at(&c->f, XPOS(c, p), "length past end");
    *n = (size_t)v;
    return q;
}

static const unsigned char *x_skip(XCtx *c, const unsigned char *p, const unsigned char *end,
                                   uint32_t wt) {
    uint64_t v;
    size_t n;
    switch (wt) {
    case 0:
        return x_varint(c, p, end, &v, 10);
    case 1:
        if (end - p < 8) fail_at(&c->f, XPOS(c, p), "truncated fixed64");
        return p + 8;
    case 2:
        p = x_len(c, p, end, &n);
        return p + n;
    case 5:
        if (end - p < 4) fail_at(&c->f, XPOS(c, p), "truncated fixed32");
        return p + 4;
    default:
        /* groups (3/4) are legal but never used by XSpace; 6/7 are invalid */
        fail_at(&c->f, XPOS(c, p), "unsupported wire type");
    }
}

/* ---- schema-driven validation of the plane metadata kept as bytes ---- */

enum { F_VARINT, F_FIXED64, F_STR, F_BYTES, F_MSG, F_REPVARINT };
enum { M_XSTAT, M_XEVMETA, M_XSTATMETA, M_EVENTRY, M_STATENTRY, M_COUNT };

typedef struct {
    uint32_t num;
    uint8_t kind;
    uint8_t sub;
} FieldDef;

static const FieldDef XSTAT_F[] = {{1, F_VARINT, 0}, {2, F_FIXED64, 0}, {3, F_VARINT, 0},
                                   {4, F_VARINT, 0}, {5, F_STR, 0},     {6, F_BYTES, 0},
                                   {7, F_VARINT, 0}};
static const FieldDef XEVMETA_F[] = {{1, F_VARINT, 0}, {2, F_STR, 0},          {4, F_STR, 0},
                                     {3, F_BYTES, 0},  {5, F_MSG, M_XSTAT},    {6, F_REPVARINT, 0}};
static const FieldDef XSTATMETA_F[] = {{1, F_VARINT, 0}, {2, F_STR, 0}, {3, F_STR, 0}};
static const FieldDef EVENTRY_F[] = {{1, F_VARINT, 0}, {2, F_MSG, M_XEVMETA}};
static const FieldDef STATENTRY_F[] = {{1, F_VARINT, 0}, {2, F_MSG, M_XSTATMETA}};

static const struct {
    const FieldDef *f;
    int n;
} SCHEMA[M_COUNT] = {
    {XSTAT_F, 7}, {XEVMETA_F, 6}, {XSTATMETA_F, 3}, {EVENTRY_F, 2}, {STATENTRY_F, 2},
};

/* depth is bounded by the schema (entry -> metadata -> XStat) */
static void x_validate(XCtx *c, const unsigned char *p, const unsigned char *end, int msg) {
    while (p < end) {
        uint32_t fn, wt;
        p = x_tag(c, p, end, &fn, &wt);
        const FieldDef *d = NULL;
        for (int i = 0; i < SCHEMA[msg].n; i++)
            if (SCHEMA[msg].f[i].num == fn) d = &SCHEMA[msg].f[i];
        if (d) {
            size_t n;
            uint64_t v;
            switch (d->kind) {
            case F_VARINT:
                if (wt == 0) { p = x_varint(c, p, end, &v, 10); continue; }
                break;
            case F_FIXED64:
                if (wt == 1) {
                    if (end - p < 8) fail_at(&c->f, XPOS(c, p), "truncated fixed64");
                    p += 8;
                    continue;
                }
                break;
            case F_STR:
                if (wt == 2) {
                    p = x_len(c, p, end, &n);
                    if (!utf8_valid(p, n)) fail_at(&c->f, XPOS(c, p), "string field had bad UTF-8");
                    p += n;
                    continue;
                }
                break;
            case F_BYTES:
                if (wt == 2) {
                    p = x_len(c, p, end, &n);
                    p += n;
                    continue;
                }
                break;
            case F_MSG:
                if (wt == 2) {
                    p = x_len(c, p, end, &n);
                    x_validate(c, p, p + n, d->sub);
                    p += n;
                    continue;
                }
                break;
            case F_REPVARINT:
                if (wt == 0) { p = x_varint(c, p, end, &v, 10); continue; }
                if (wt == 2) {
                    p = x_len(c, p, end, &n);
                    const unsigned char *e = p + n;
                    while (p < e) p = x_varint(c, p, e, &v, 10);
                    continue;
                }
                break;
            }
        }
        p = x_skip(c, p, end, wt); /* unknown field, or known with another wire type */
    }
}

/* ---- columns ---- */

/* the slot of key (never 0: 0 marks a free slot, and 0 is a table id), or the free slot
 * where it would go */
static inline size_t far_slot(const FarCodes *m, int64_t key) {
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 29) & (m->cap - 1);
    while (m->keys[i] != 0 && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

/* the wanted index of a stat of this plane (its metadata id), or -1 */
static inline int x_code(XCtx *c, int64_t meta) {
    if (LIKELY(meta >= 0 && (uint64_t)meta < c->code_n)) return c->code_table[meta];
    if (LIKELY(c->far.n == 0) || (meta >= 0 && meta < X_CODE_TABLE_MAX)) return -1;
    size_t i = far_slot(&c->far, meta);
    return c->far.keys[i] == meta ? c->far.codes[i] : -1;
}

static void x_stat(XCtx *c, const unsigned char *p, const unsigned char *end) {
    int64_t meta = 0;
    int kind = ST_NONE;
    uint64_t ival = 0;
    double dval = 0.0;
    const unsigned char *sp = NULL;
    size_t sn = 0;
    while (p < end) {
        uint32_t fn, wt;
        uint64_t v;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (wt == 0 && (fn == 1 || fn == 3 || fn == 4 || fn == 7)) {
            p = x_varint(c, p, end, &v, 10);
            if (fn == 1) {
                meta = (int64_t)v;
            } else {
                kind = fn == 3 ? ST_UINT : fn == 4 ? ST_INT : ST_REF;
                ival = v;
            }
        } else if (wt == 1 && fn == 2) {
            if (end - p < 8) fail_at(&c->f, XPOS(c, p), "truncated double");
            memcpy(&dval, p, 8);
            p += 8;
            kind = ST_DOUBLE;
        } else if (wt == 2 && (fn == 5 || fn == 6)) {
            p = x_len(c, p, end, &n);
            if (fn == 5 && !utf8_valid(p, n)) fail_at(&c->f, XPOS(c, p), "string field had bad UTF-8");
            sp = p;
            sn = n;
            kind = fn == 5 ? ST_STR : ST_BYTES;
            p += n;
        } else {
            p = x_skip(c, p, end, wt);
        }
    }
    int code = x_code(c, meta);
    if (code < 0) return;
    int64_t iv = 0;
    if (kind == ST_DOUBLE) {
        memcpy(&iv, &dval, 8); /* a double's bits: doubles are rare, a column of them is not */
    } else if (kind == ST_STR || kind == ST_BYTES) {
        /* a mapping's pages are let go behind the scan: keep a copy of each distinct value */
        iv = intern(&c->f, &c->strings, &c->arena, sp, sn, c->mapped);
    } else if (kind != ST_NONE) {
        iv = (int64_t)ival;
    }
    StatRows *r = &c->rows[code];
    VEC_PUSH(&c->f, &r->ev, int32_t, (int32_t)c->nevents);
    VEC_PUSH(&c->f, &r->val, int64_t, iv);
    VEC_PUSH(&c->f, &r->kind, int8_t, (int8_t)kind);
}

static void x_event(XCtx *c, const unsigned char *p, const unsigned char *end, int32_t li) {
    int64_t meta = 0, off = 0, dur = 0;
    while (p < end) {
        uint32_t fn, wt;
        uint64_t v;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (wt == 0 && (fn == 1 || fn == 2 || fn == 3 || fn == 5)) {
            p = x_varint(c, p, end, &v, 10);
            if (fn == 1) meta = (int64_t)v;
            else if (fn == 2) off = (int64_t)v;
            else if (fn == 5) off = 0; /* num_occurrences: the oneof no longer holds offset_ps */
            else dur = (int64_t)v;
        } else if (wt == 2 && fn == 4) {
            p = x_len(c, p, end, &n);
            x_stat(c, p, p + n);
            p += n;
        } else {
            p = x_skip(c, p, end, wt);
        }
    }
    VEC_PUSH(&c->f, &c->ev_line, int32_t, li);
    VEC_PUSH(&c->f, &c->ev_meta, int64_t, meta);
    VEC_PUSH(&c->f, &c->ev_off, int64_t, off);
    VEC_PUSH(&c->f, &c->ev_dur, int64_t, dur);
    /* a stat row names its event as an int32 */
    if (UNLIKELY(++c->nevents > INT32_MAX)) fail_at(&c->f, XPOS(c, p), "too many events");
}

static PyObject *x_str(XCtx *c, const unsigned char *p, size_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "strict");
    if (!s) fail_py(&c->f);
    return s;
}

static void x_line(XCtx *c, const unsigned char *p, const unsigned char *end, Py_ssize_t pi) {
    if (c->nlines >= 0x7fffffff) fail_at(&c->f, XPOS(c, p), "too many lines");
    int32_t li = (int32_t)c->nlines++;
    int64_t id = 0, disp_id = 0, ts = 0, dur = 0;
    const unsigned char *np = p, *dp = p;
    size_t nn = 0, dn = 0;
    while (p < end) {
        uint32_t fn, wt;
        uint64_t v;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (wt == 0 && (fn == 1 || fn == 10 || fn == 3 || fn == 9)) {
            p = x_varint(c, p, end, &v, 10);
            if (fn == 1) id = (int64_t)v;
            else if (fn == 10) disp_id = (int64_t)v;
            else if (fn == 3) ts = (int64_t)v;
            else dur = (int64_t)v;
        } else if (wt == 2 && (fn == 2 || fn == 11)) {
            p = x_len(c, p, end, &n);
            if (!utf8_valid(p, n)) fail_at(&c->f, XPOS(c, p), "string field had bad UTF-8");
            if (fn == 2) { np = p; nn = n; } else { dp = p; dn = n; }
            p += n;
        } else if (wt == 2 && fn == 4) {
            p = x_len(c, p, end, &n);
            x_event(c, p, p + n, li);
            p += n;
            publish(c->done, XPOS(c, p));
            if (c->mapped && UNLIKELY(p - c->kept >= MAP_LET_GO)) map_let_go(c, p);
        } else {
            p = x_skip(c, p, end, wt);
        }
    }
    PyThreadState *held = gil_hold(&c->f);
    PyObject *name = x_str(c, np, nn);
    PyObject *dname = PyUnicode_DecodeUTF8((const char *)dp, (Py_ssize_t)dn, "strict");
    if (!dname) { Py_DECREF(name); fail_py(&c->f); }
    PyObject *t = Py_BuildValue("(nLLNNLL)", pi, (long long)id, (long long)disp_id, name, dname,
                                (long long)ts, (long long)dur);
    if (!t) fail_py(&c->f);
    int r = PyList_Append(c->lines, t);
    Py_DECREF(t);
    if (r < 0) fail_py(&c->f);
    gil_restore(&c->f, held);
}

/* the fields of one map entry: returns the key (1, varint) and collects every occurrence
   of the value (2) into vals/vlens, since protobuf merges them */
static int64_t x_entry(XCtx *c, const unsigned char *p, const unsigned char *end,
                       const unsigned char **vals, size_t *vlens, int *nvals, int cap) {
    int64_t key = 0;
    *nvals = 0;
    while (p < end) {
        uint32_t fn, wt;
        uint64_t v;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (fn == 1 && wt == 0) {
            p = x_varint(c, p, end, &v, 10);
            key = (int64_t)v;
        } else if (fn == 2 && wt == 2) {
            p = x_len(c, p, end, &n);
            if (*nvals == cap) fail_at(&c->f, XPOS(c, p), "map value repeated too often");
            vals[*nvals] = p;
            vlens[(*nvals)++] = n;
            p += n;
        } else {
            p = x_skip(c, p, end, wt);
        }
    }
    return key;
}

/* last occurrence of string fields f1 and f2 across the value's occurrences; *has3 (when
   not NULL) tells whether a length-delimited field f3 occurs */
static void x_two_strings(XCtx *c, const unsigned char **vals, const size_t *vlens, int nvals,
                          uint32_t f1, uint32_t f2, const unsigned char **s1, size_t *n1,
                          const unsigned char **s2, size_t *n2, uint32_t f3, int *has3) {
    *n1 = *n2 = 0;
    *s1 = *s2 = (const unsigned char *)"";
    if (has3) *has3 = 0;
    for (int k = 0; k < nvals; k++) {
        const unsigned char *p = vals[k], *end = vals[k] + vlens[k];
        while (p < end) {
            uint32_t fn, wt;
            size_t n;
            p = x_tag(c, p, end, &fn, &wt);
            if (has3 && wt == 2 && fn == f3) *has3 = 1;
            if (wt == 2 && (fn == f1 || fn == f2)) {
                p = x_len(c, p, end, &n);
                if (fn == f1) { *s1 = p; *n1 = n; } else { *s2 = p; *n2 = n; }
                p += n;
            } else {
                p = x_skip(c, p, end, wt);
            }
        }
    }
}

#define MAX_VALUE_PARTS 64

/* event_metadata entry → id, name, shown name (display_name, else name); the id also goes
   to stat_ids when the entry has stats (5) of its own: few do (TPU ops keep their program
   id and scope there), so Python reads only those from the plane message */
static void x_evmeta(XCtx *c, const unsigned char *p, const unsigned char *end, Vec *ids,
                     Vec *stat_ids, PyObject *raw, PyObject *shown) {
    const unsigned char *vals[MAX_VALUE_PARTS], *sn, *sd;
    size_t vlens[MAX_VALUE_PARTS], nn, nd;
    int nvals, has_stats;
    int64_t key = x_entry(c, p, end, vals, vlens, &nvals, MAX_VALUE_PARTS);
    x_two_strings(c, vals, vlens, nvals, 2, 4, &sn, &nn, &sd, &nd, 5, &has_stats);
    if (has_stats) VEC_PUSH(&c->f, stat_ids, int64_t, key);
    PyThreadState *held = gil_hold(&c->f);
    PyObject *name = x_str(c, sn, nn);
    PyObject *disp = nd ? PyUnicode_DecodeUTF8((const char *)sd, (Py_ssize_t)nd, "strict") : name;
    if (nd && !disp) { Py_DECREF(name); fail_py(&c->f); }
    if (!nd) Py_INCREF(disp);
    int r = PyList_Append(raw, name) | PyList_Append(shown, disp);
    Py_DECREF(name);
    Py_DECREF(disp);
    if (r < 0) fail_py(&c->f);
    gil_restore(&c->f, held);
    VEC_PUSH(&c->f, ids, int64_t, key);
}

/* stat_metadata entry → {id: name} (a later entry for the same id wins, as in a map) */
static void x_statmeta(XCtx *c, const unsigned char *p, const unsigned char *end, PyObject *names) {
    const unsigned char *vals[MAX_VALUE_PARTS], *sn, *sd;
    size_t vlens[MAX_VALUE_PARTS], nn, nd;
    int nvals;
    int64_t key = x_entry(c, p, end, vals, vlens, &nvals, MAX_VALUE_PARTS);
    x_two_strings(c, vals, vlens, nvals, 2, 3, &sn, &nn, &sd, &nd, 0, NULL);
    PyThreadState *held = gil_hold(&c->f);
    PyObject *k = PyLong_FromLongLong(key);
    if (!k) fail_py(&c->f);
    PyObject *name = PyUnicode_DecodeUTF8((const char *)sn, (Py_ssize_t)nn, "strict");
    if (!name) { Py_DECREF(k); fail_py(&c->f); }
    int r = PyDict_SetItem(names, k, name);
    Py_DECREF(k);
    Py_DECREF(name);
    if (r < 0) fail_py(&c->f);
    gil_restore(&c->f, held);
}

/* key → code in this plane's lookup; an id that names no wanted stat is stored only to
 * undo an earlier entry of the same id */
static void x_set_code(XCtx *c, int64_t key, int code) {
    if (key >= 0 && key < X_CODE_TABLE_MAX) {
        if ((uint64_t)key >= c->code_n) {
            if (code < 0) return;
            size_t n = c->code_n ? c->code_n : 64;
            while (n <= (uint64_t)key) n *= 2;
            int8_t *t = realloc(c->code_table, n);
            if (!t) fail_oom(&c->f);
            memset(t + c->code_n, -1, n - c->code_n);
            c->code_table = t;
            c->code_n = n;
        }
        c->code_table[key] = (int8_t)code;
        return;
    }
    FarCodes *m = &c->far;
    if (m->cap) {
        size_t i = far_slot(m, key);
        if (m->keys[i] == key) {
            m->codes[i] = (int8_t)code;
            return;
        }
    }
    if (code < 0) return;
    if (2 * (m->n + 1) > m->cap) {       /* at most half full: rehash into twice the room */
        FarCodes g = {NULL, NULL, m->cap ? 2 * m->cap : 16, 0};
        g.keys = calloc(g.cap, sizeof(int64_t));
        g.codes = malloc(g.cap);
        if (!g.keys || !g.codes) {
            free(g.keys);
            free(g.codes);
            fail_oom(&c->f);
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                size_t j = far_slot(&g, m->keys[i]);
                g.keys[j] = m->keys[i];
                g.codes[j] = m->codes[i];
                g.n++;
            }
        free(m->keys);
        free(m->codes);
        *m = g;
    }
    size_t i = far_slot(m, key);
    m->keys[i] = key;
    m->codes[i] = (int8_t)code;
    m->n++;
}

/* The plane's stat metadata read before its lines (protobuf writes the lines first), so
 * that each stat row is kept or dropped as it is read: id → wanted index, the last entry
 * of an id winning as in a map.  The lines are skipped by their length, unread. */
static void x_plane_codes(XCtx *c, const unsigned char *p, const unsigned char *end) {
    if (c->code_n) memset(c->code_table, -1, c->code_n);
    if (c->far.n) {
        memset(c->far.keys, 0, c->far.cap * sizeof(int64_t));
        c->far.n = 0;
    }
    while (p < end) {
        uint32_t fn, wt;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (wt != 2 || fn != 5) {
            p = x_skip(c, p, end, wt);
            continue;
        }
        p = x_len(c, p, end, &n);
        const unsigned char *vals[MAX_VALUE_PARTS], *sn, *sd;
        size_t vlens[MAX_VALUE_PARTS], nn, nd;
        int nvals, code = -1;
        int64_t key = x_entry(c, p, p + n, vals, vlens, &nvals, MAX_VALUE_PARTS);
        x_two_strings(c, vals, vlens, nvals, 2, 3, &sn, &nn, &sd, &nd, 0, NULL);
        for (int w = 0; w < c->n_wanted; w++)
            if ((size_t)c->wanted_len[w] == nn && memcmp(c->wanted[w], sn, nn) == 0) {
                code = w;
                break;
            }
        x_set_code(c, key, code);
        p += n;
    }
}

static void x_plane(XCtx *c, const unsigned char *p, const unsigned char *end) {
    Py_ssize_t pi = PyList_GET_SIZE(c->planes);
    x_plane_codes(c, p, end);
    int64_t id = 0;
    const unsigned char *np = p;
    size_t nn = 0;
    c->meta.len = 0;
    c->ev_ids.len = 0;
    c->md_stat_ids.len = 0;
    PyThreadState *held = gil_hold(&c->f);
    PyObject *raw = PyList_New(0), *shown = PyList_New(0), *stat_names = PyDict_New();
    Py_XDECREF(c->plane_tmp[0]);
    Py_XDECREF(c->plane_tmp[1]);
    Py_XDECREF(c->plane_tmp[2]);
    c->plane_tmp[0] = raw;                /* owned by the context until the tuple takes them */
    c->plane_tmp[1] = shown;
    c->plane_tmp[2] = stat_names;
    if (!raw || !shown || !stat_names) fail_py(&c->f);
    gil_restore(&c->f, held);
    while (p < end) {
        const unsigned char *q0 = p;
        uint32_t fn, wt;
        uint64_t v;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (wt == 2 && fn == 3) { /* lines: scanned, not kept in the metadata bytes */
            p = x_len(c, p, end, &n);
            x_line(c, p, p + n, pi);
            p += n;
            continue;
        }
        if (wt == 0 && fn == 1) {
            p = x_varint(c, p, end, &v, 10);
            id = (int64_t)v;
        } else if (wt == 2 && fn == 2) {
            p = x_len(c, p, end, &n);
            if (!utf8_valid(p, n)) fail_at(&c->f, XPOS(c, p), "string field had bad UTF-8");
            np = p;
            nn = n;
            p += n;
        } else if (wt == 2 && (fn == 4 || fn == 5 || fn == 6)) {
            p = x_len(c, p, end, &n);
            x_validate(c, p, p + n, fn == 4 ? M_EVENTRY : fn == 5 ? M_STATENTRY : M_XSTAT);
            if (fn == 4) x_evmeta(c, p, p + n, &c->ev_ids, &c->md_stat_ids, raw, shown);
            else if (fn == 5) x_statmeta(c, p, p + n, stat_names);
            p += n;
        } else {
            p = x_skip(c, p, end, wt);
        }
        vec_put(&c->f, &c->meta, q0, (size_t)(p - q0));
    }
    held = gil_hold(&c->f);
    PyObject *name = x_str(c, np, nn);
    PyObject *meta = PyBytes_FromStringAndSize(c->meta.data ? c->meta.data : "",
                                               (Py_ssize_t)c->meta.len);
    if (!meta) { Py_DECREF(name); fail_py(&c->f); }
    PyObject *ids = PyBytes_FromStringAndSize(c->ev_ids.data ? c->ev_ids.data : "",
                                              (Py_ssize_t)c->ev_ids.len);
    if (!ids) { Py_DECREF(name); Py_DECREF(meta); fail_py(&c->f); }
    PyObject *md_ids = PyBytes_FromStringAndSize(
        c->md_stat_ids.data ? c->md_stat_ids.data : "", (Py_ssize_t)c->md_stat_ids.len);
    if (!md_ids) { Py_DECREF(name); Py_DECREF(meta); Py_DECREF(ids); fail_py(&c->f); }
    PyObject *t = Py_BuildValue("(LNN(NOOON))", (long long)id, name, meta, ids, raw, shown,
                                stat_names, md_ids);
    if (!t) fail_py(&c->f);
    int r = PyList_Append(c->planes, t);
    Py_DECREF(t);
    if (r < 0) fail_py(&c->f);
    gil_restore(&c->f, held);
}

static void x_space(XCtx *c, const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        uint32_t fn, wt;
        size_t n;
        p = x_tag(c, p, end, &fn, &wt);
        if (wt == 2 && fn == 1) {
            p = x_len(c, p, end, &n);
            x_plane(c, p, p + n);
            p += n;
        } else if (wt == 2 && fn >= 2 && fn <= 4) {
            p = x_len(c, p, end, &n);
            if (!utf8_valid(p, n)) fail_at(&c->f, XPOS(c, p), "string field had bad UTF-8");
            PyThreadState *held = gil_hold(&c->f);
            PyObject *s = x_str(c, p, n);
            PyObject *lst = fn == 2 ? c->errors : fn == 3 ? c->warnings : c->hostnames;
            int r = PyList_Append(lst, s);
            Py_DECREF(s);
            if (r < 0) fail_py(&c->f);
            gil_restore(&c->f, held);
            p += n;
        } else {
            p = x_skip(c, p, end, wt);
        }
    }
}

static void xctx_free(XCtx *c) {
    Vec *vs[] = {&c->ev_line, &c->ev_meta, &c->ev_off, &c->ev_dur, &c->meta, &c->ev_ids,
                 &c->md_stat_ids};
    free(c->code_table);
    free(c->far.keys);
    free(c->far.codes);
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) vec_free(vs[i]);
    for (int w = 0; w < X_MAX_WANTED; w++) {
        vec_free(&c->rows[w].ev);
        vec_free(&c->rows[w].val);
        vec_free(&c->rows[w].kind);
    }
    table_free(&c->strings);
    arena_free(&c->arena);
    for (int i = 0; i < 3; i++) Py_XDECREF(c->plane_tmp[i]);
    Py_XDECREF(c->planes);
    Py_XDECREF(c->lines);
    Py_XDECREF(c->errors);
    Py_XDECREF(c->warnings);
    Py_XDECREF(c->hostnames);
    free(c);
}

/* dict[key] = value, stealing value */
static int dict_put(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int r = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return r;
}

/* A scanner's arguments: the bytes, and optionally a writable, aligned buffer of at least
 * 8 bytes (a one-element int64 array) where the bytes scanned so far are published. */
static int scan_args(PyObject *args, const char *fn, Py_buffer *view, Py_buffer *done,
                     int64_t **done_at) {
    PyObject *arg, *done_obj = Py_None;
    *done_at = NULL;
    done->obj = NULL;
    if (!PyArg_ParseTuple(args, "O|O", &arg, &done_obj)) return -1;
    if (PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) < 0) return -1;
    if (done_obj == Py_None) return 0;
    if (PyObject_GetBuffer(done_obj, done, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    if (done->len < 8 || ((uintptr_t)done->buf & 7)) {
        PyBuffer_Release(done);
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: the progress counter must be an aligned int64", fn);
        return -1;
    }
    *done_at = (int64_t *)done->buf;
    return 0;
}

static void scan_args_release(Py_buffer *view, Py_buffer *done) {
    if (done->obj) PyBuffer_Release(done);
    PyBuffer_Release(view);
}

/* ---------------- a file mapping that shrinks under the scan ----------------
 * Reading a page of a mapping past the end of its file raises SIGBUS, which would end
 * the process: a trace truncated (or a disk failing) while it is scanned must instead be
 * an error for that one file.  While a mapped scan runs, its thread names the mapping's
 * range here; a SIGBUS for an address in it jumps back to the scan's entry, which frees
 * what the scan held (a Python object being built at that moment may leak: this is the
 * rare path) and raises OSError.  Any other SIGBUS goes to the handler that was there
 * before (faulthandler's, or the default: the process ends as it would without us). */
#ifdef HAVE_BUS_GUARD
typedef struct {
    sigjmp_buf jb;
    const unsigned char *lo, *hi;
} BusGuard;

static _Thread_local BusGuard *volatile bus_guard;
static struct sigaction bus_prev;

static void bus_handler(int sig, siginfo_t *si, void *uc) {
    BusGuard *g = bus_guard;
    if (g && si && si->si_code > 0 && (const unsigned char *)si->si_addr >= g->lo &&
        (const unsigned char *)si->si_addr < g->hi) {
        bus_guard = NULL;
        siglongjmp(g->jb, 1);
    }
    if (bus_prev.sa_flags & SA_SIGINFO) {
        bus_prev.sa_sigaction(sig, si, uc);
    } else if (bus_prev.sa_handler != SIG_DFL && bus_prev.sa_handler != SIG_IGN) {
        bus_prev.sa_handler(sig);
    } else {
        /* the default action, as if this handler had never been installed: a fault
         * happens again when the handler returns; a sent signal is sent again */
        signal(SIGBUS, SIG_DFL);
        if (!si || si->si_code <= 0) raise(SIGBUS);
    }
}

/* Called with the GIL held before each mapped scan: (re)installs the handler when
 * SIGBUS is not ours (first use, or faulthandler enabled since), chaining to the one
 * found there. */
static int bus_guard_install(void) {
    struct sigaction cur, act;
    if (sigaction(SIGBUS, NULL, &cur) < 0) return -1;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == bus_handler) return 0;
    memset(&act, 0, sizeof(act));
    act.sa_sigaction = bus_handler;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    bus_prev = cur;
    return sigaction(SIGBUS, &act, NULL);
}
#endif

/* The wanted stat names (a tuple of str) into the context; -1 with an error set. */
static int x_wanted(XCtx *c, PyObject *wanted) {
    if (!PyTuple_Check(wanted) || PyTuple_GET_SIZE(wanted) > X_MAX_WANTED) {
        PyErr_Format(PyExc_TypeError, "scan_xspace: the wanted stats are a tuple of at most "
                     "%d names", X_MAX_WANTED);
        return -1;
    }
    c->n_wanted = (int)PyTuple_GET_SIZE(wanted);
    for (int w = 0; w < c->n_wanted; w++) {
        PyObject *name = PyTuple_GET_ITEM(wanted, w);
        /* the UTF-8 lives as long as the str, which the caller's tuple holds */
        c->wanted[w] = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &c->wanted_len[w])
                                             : NULL;
        if (!c->wanted[w]) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "scan_xspace: a stat name is not a str");
            return -1;
        }
    }
    return 0;
}

/* per wanted stat with rows: name → (events, values, kinds) Columns; NULL on error */
static PyObject *x_stat_columns(XCtx *c, PyObject *wanted) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int w = 0; w < c->n_wanted; w++) {
        StatRows *r = &c->rows[w];
        if (!r->ev.len) continue;
        PyObject *t = PyTuple_New(3);
        if (!t) goto fail;
        PyObject *cols[3] = {vec_to_column(&r->ev), vec_to_column(&r->val), vec_to_column(&r->kind)};
        for (int k = 0; k < 3; k++) {
            if (!cols[k]) {
                for (int j = k + 1; j < 3; j++) Py_XDECREF(cols[j]);
                Py_DECREF(t);
                goto fail;
            }
            PyTuple_SET_ITEM(t, k, cols[k]);
        }
        int rc = PyDict_SetItem(out, PyTuple_GET_ITEM(wanted, w), t);
        Py_DECREF(t);
        if (rc < 0) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *scan_xspace_impl(PyObject *args, int mapped) {
    Py_buffer view, done;
    int64_t *done_at;
    PyObject *wanted = NULL;
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 3) {
        PyErr_SetString(PyExc_TypeError, "scan_xspace(buf, done or None, wanted stat names)");
        return NULL;
    }
    wanted = PyTuple_GET_ITEM(args, 2);
    PyObject *head = PyTuple_GetSlice(args, 0, 2);
    if (!head) return NULL;
    int head_rc = scan_args(head, "scan_xspace", &view, &done, &done_at);
    Py_DECREF(head);
    if (head_rc < 0) return NULL;
#ifdef HAVE_BUS_GUARD
    BusGuard bus;
    if (mapped && bus_guard_install() < 0) {
        scan_args_release(&view, &done);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
#else
    if (mapped) {
        scan_args_release(&view, &done);
        PyErr_SetString(PyExc_NotImplementedError, "no guarded mapped scan on this system");
        return NULL;
    }
#endif
    XCtx *c = (XCtx *)calloc(1, sizeof(XCtx));
    if (!c) {
        scan_args_release(&view, &done);
        return PyErr_NoMemory();
    }
    PyObject *out = NULL;
    c->buf = (const unsigned char *)view.buf;
    c->end = c->buf + view.len;
    c->done = done_at;
    c->mapped = mapped;
    c->kept = c->buf;
    if (x_wanted(c, wanted) < 0) {
        xctx_free(c);
        scan_args_release(&view, &done);
        return NULL;
    }
    if (setjmp(c->f.jb)) {
#ifdef HAVE_BUS_GUARD
        bus_guard = NULL;
#endif
        gil_hold(&c->f);
        raise_fail(&c->f, "native XSpace scan");
        xctx_free(c);
        scan_args_release(&view, &done);
        return NULL;
    }
#ifdef HAVE_BUS_GUARD
    if (mapped) {
        if (sigsetjmp(bus.jb, 1)) {
            gil_hold(&c->f);
            PyErr_Clear();
            PyErr_SetString(PyExc_OSError, "the file shrank or could not be read while it "
                                           "was scanned (truncated or rewritten meanwhile, "
                                           "or a read error)");
            xctx_free(c);
            scan_args_release(&view, &done);
            return NULL;
        }
        bus.lo = c->buf;
        bus.hi = c->end + 4096; /* a fault reports the address read, inside the last page */
        bus_guard = &bus;
    }
#endif
    c->planes = PyList_New(0);
    c->lines = PyList_New(0);
    c->errors = PyList_New(0);
    c->warnings = PyList_New(0);
    c->hostnames = PyList_New(0);
    if (!c->planes || !c->lines || !c->errors || !c->warnings || !c->hostnames) fail_py(&c->f);
    gil_release(&c->f);
    x_space(c, c->buf, c->end);
    gil_hold(&c->f);
    publish(c->done, (int64_t)view.len);

    PyObject *strings = PyList_New((Py_ssize_t)c->strings.nents);
    if (!strings) fail_py(&c->f);
    for (size_t i = 0; i < c->strings.nents; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)c->strings.ents[i].p,
                                                (Py_ssize_t)c->strings.ents[i].n);
        if (!b) { Py_DECREF(strings); fail_py(&c->f); }
        PyList_SET_ITEM(strings, (Py_ssize_t)i, b);
    }
    out = PyDict_New();
    if (!out) { Py_DECREF(strings); fail_py(&c->f); }
    if (PyDict_SetItemString(out, "planes", c->planes) < 0 ||
        PyDict_SetItemString(out, "lines", c->lines) < 0 ||
        dict_put(out, "ev_line", vec_to_column(&c->ev_line)) < 0 ||
        dict_put(out, "ev_meta", vec_to_column(&c->ev_meta)) < 0 ||
        dict_put(out, "ev_offset_ps", vec_to_column(&c->ev_off)) < 0 ||
        dict_put(out, "ev_dur_ps", vec_to_column(&c->ev_dur)) < 0 ||
        dict_put(out, "stats", x_stat_columns(c, wanted)) < 0 ||
        PyDict_SetItemString(out, "strings", strings) < 0 ||
        PyDict_SetItemString(out, "hostnames", c->hostnames) < 0 ||
        PyDict_SetItemString(out, "errors", c->errors) < 0 ||
        PyDict_SetItemString(out, "warnings", c->warnings) < 0) {
        Py_DECREF(out);
        out = NULL;
    }
    Py_DECREF(strings);
#ifdef HAVE_BUS_GUARD
    bus_guard = NULL;
#endif
    xctx_free(c);
    scan_args_release(&view, &done);
    return out;
}

static PyObject *scan_xspace(PyObject *self, PyObject *args) {
    (void)self;
    return scan_xspace_impl(args, 0);
}

/* The same scan over a read-only file mapping (an mmap object): strings are copied out,
 * pages are let go behind the scan, and a file that shrinks meanwhile raises OSError
 * instead of ending the process with SIGBUS.  Not on Windows (NotImplementedError),
 * where a mapped file cannot be truncated but the reader does not map either. */
static PyObject *scan_xspace_mapped(PyObject *self, PyObject *args) {
    (void)self;
    return scan_xspace_impl(args, 1);
}

/* ======================================================================
 * Kineto (Chrome trace JSON)
 * ====================================================================== */

#define J_MAX_DEPTH 1000 /* orjson refuses more than 1024 levels */

enum { T_MISSING = 0, T_STR, T_NUM, T_TRUE, T_FALSE, T_NULL, T_OBJ, T_ARR };

typedef struct {
    const unsigned char *s, *e; /* the literal text */
    const unsigned char *int_s, *int_e, *frac_s, *frac_e;
    int neg, has_frac, has_exp;
    int is_float; /* Python type after orjson: float (else int) */
    int fits_i64; /* an int in int64 range (value in i) */
    int64_t i;
    uint64_t u; /* magnitude of an int outside int64 but inside uint64 */
    int64_t exp;
} Num;

typedef struct {
    int t;
    int esc;   /* T_STR: has escapes */
    int empty; /* T_OBJ/T_ARR: no members */
    const unsigned char *s, *e; /* T_STR: content between the quotes */
    Num num;
} Tok;

/* event keys */
enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_NKEYS, K_ARGS = K_NKEYS, K_OTHER };
/* args keys, in STAT_ARGS order; external_id has two spellings */
enum { A_CORR, A_EXT1, A_EXT2, A_DEVICE, A_STREAM, A_BYTES, A_NKEYS, A_OTHER = A_NKEYS };
#define N_STATS 5
static const char *const STAT_NAMES[N_STATS] = {"correlation", "external_id", "device", "stream",
                                                "bytes"};
/* metadata keys copied from the document */
#define N_META 5
static const char *const META_KEYS[N_META] = {"deviceProperties", "distributedInfo",
                                              "baseTimeNanoseconds", "schemaVersion",
                                              "displayTimeUnit"};

enum { V_NONE, V_TRUE, V_FALSE, V_INT, V_FLOAT, V_STR };

typedef struct {
    uint8_t type[2];
    int64_t i[2];
    double d[2];
    size_t soff[2], slen[2]; /* V_STR: payload inside the interned key */
} TrackDesc;

typedef struct {
    Vec idx, val, isf; /* event index, 8-byte value (int64 or double), is-float flag */
    int any_float;
} StatCol;

typedef struct {
    Fail f;
    const unsigned char *buf, *end;
    Table names, cats, tracks;
    Arena arena;
    Vec name_ids, cat_ids, track_ids, dur_ps;
    Vec ts_exact;  /* i128 ps (text truncated to 6 decimals) */
    Vec ts_isexp;  /* uint8 */
    Vec tdesc;     /* TrackDesc per track */
    Vec ts_out;    /* int64 ps after base_us */
    Vec sane;      /* uint8 per event: its time can be placed */
    Vec pick;      /* double: scratch for the median */
    Vec scratch, keybuf;
    StatCol stats[N_STATS];
    Vec ts_approx; /* double: ts as float64 (the reference's view) */
    Vec dur_d;     /* double: dur as float64 */
    int64_t n_kept, n_raw, bad;
    int64_t *done;     /* NULL, or where the bytes scanned so far are published */
    PyObject *mevents; /* list of the text (bytes) of each "M" event */
    PyObject *meta[N_META]; /* text (bytes) of each metadata value, or NULL */
    /* Streaming: the text comes in chunks.  The walk commits after each unit (the
     * document's opening, one top-level member, one traceEvents element, one
     * separator); a unit that runs past the end of the buffer is not committed and is
     * walked again, whole, once the next chunk is in. */
    int final;       /* the buffer ends the document */
    int committing;  /* a complete unit is being recorded: failures are real */
    int need_more;   /* the walk stopped at the buffer's end */
    int state;       /* JS_*: where the next unit starts */
    int seen_events;
    int dead;        /* a real failure happened: no more feeding */
    Py_ssize_t pos;  /* offset of the next unit in buf */
    Vec inbuf;       /* the uncommitted tail, then the chunk after it */
    size_t retry_at; /* after running dry: walk again once inbuf holds this much */
} JCtx;

#define JPOS(c, p) ((Py_ssize_t)((p) - (c)->buf))

/* the farthest any token looks ahead of the byte it fails at (a \\uXXXX\\uXXXX pair) */
#define J_LOOKAHEAD 16

static NORETURN void j_dry(JCtx *c) {
    c->need_more = 1;
    longjmp(c->f.jb, 1);
}

/* A failure this close to the end of a chunk that is not the last may be a token cut by
 * the chunk's end: the unit is walked again with more text. */
static NORETURN void jfail(JCtx *c, const unsigned char *p, const char *msg) {
    if (!c->final && !c->committing && p >= c->buf && p <= c->end && c->end - p <= J_LOOKAHEAD)
        j_dry(c);
    fail_at(&c->f, JPOS(c, p), msg);
}

static inline const unsigned char *jws(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        unsigned ch = *p;
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') p++;
        else break;
    }
    return p;
}

/* next non-whitespace byte, which must exist */
static inline const unsigned char *jnext(JCtx *c, const unsigned char *p) {
    p = jws(p, c->end);
    if (UNLIKELY(p >= c->end)) jfail(c, p, "unexpected end of data");
    return p;
}

static inline int hexval(unsigned ch) {
    if (ch >= '0' && ch <= '9') return (int)(ch - '0');
    ch |= 0x20;
    if (ch >= 'a' && ch <= 'f') return (int)(ch - 'a' + 10);
    return -1;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return 0;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 1;
}

/* p at a backslash: validated escape; returns the pointer after it and the code point */
static const unsigned char *j_escape(JCtx *c, const unsigned char *p, unsigned *cp) {
    const unsigned char *end = c->end;
    if (end - p < 2) jfail(c, p, "unterminated escape");
    switch (p[1]) {
    case '"': *cp = '"'; return p + 2;
    case '\\': *cp = '\\'; return p + 2;
    case '/': *cp = '/'; return p + 2;
    case 'b': *cp = '\b'; return p + 2;
    case 'f': *cp = '\f'; return p + 2;
    case 'n': *cp = '\n'; return p + 2;
    case 'r': *cp = '\r'; return p + 2;
    case 't': *cp = '\t'; return p + 2;
    case 'u': {
        unsigned u, lo;
        if (end - p < 6 || !hex4(p + 2, &u)) jfail(c, p, "invalid \\u escape");
        if (u >= 0xDC00 && u <= 0xDFFF) jfail(c, p, "lone low surrogate");
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &lo) || lo < 0xDC00 ||
                lo > 0xDFFF)
                jfail(c, p, "lone high surrogate");
            *cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            return p + 12;
        }
        *cp = u;
        return p + 6;
    }
    default:
        jfail(c, p, "invalid escape");
    }
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* p just after the opening quote: pointer after the closing quote */
static const unsigned char *j_string_long(JCtx *c, const unsigned char *p, int *esc) {
    const unsigned char *end = c->end;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: a quote, a backslash, or (signed) below 0x20, which takes
         * control characters and every non-ASCII byte */
        {
            const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                          space = _mm_set1_epi8(0x20);
            while (end - p >= 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)p);
                __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                           _mm_cmplt_epi8(v, space));
                int m = _mm_movemask_epi8(hit);
                if (m) {
                    p += __builtin_ctz((unsigned)m);
                    goto found;
                }
                p += 16;
            }
        }
#endif
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
            uint64_t m = (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w) & HIGHS;
            if (m) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
                p += __builtin_ctzll(m) >> 3;
#endif
                break;
            }
            p += 8;
        }
#ifdef __SSE2__
    found:
#endif
        if (UNLIKELY(p >= end)) jfail(c, p, "unterminated string");
        unsigned ch = *p;
        if (ch == '"') return p + 1;
        if (ch == '\\') {
            unsigned cp;
            *esc = 1;
            p = j_escape(c, p, &cp);
        } else if (ch < 0x20) {
            jfail(c, p, "control character in string");
        } else if (ch < 0x80) {
            p++;
        } else {
            const unsigned char *q = utf8_seq(p, end);
            if (!q) jfail(c, p, "invalid UTF-8");
            p = q;
        }
    }
}

/* p just after an opening quote: the byte after the closing one.  Most strings in a
 * trace are short keys and values: the first 16 bytes are looked at here, inline; a
 * string with more, or with an escape or a byte to check, goes to j_string_long. */
static inline const unsigned char *j_string(JCtx *c, const unsigned char *p, int *esc) {
#ifdef __SSE2__
    if (c->end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        int q = _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')));
        int other = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')),
                                                   _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))));
        /* a quote before any other byte to stop at */
        if (q && (other == 0 || (q & -q) < (other & -other)))
            return p + __builtin_ctz((unsigned)q) + 1;
        if (!q && !other) p += 16;      /* plain bytes: not looked at again */
    }
#endif
    return j_string_long(c, p, esc);
}

/* decode validated string content s..e (escapes) into out (capacity >= e - s) */
static size_t j_decode(JCtx *c, const unsigned char *s, const unsigned char *e, unsigned char *out) {
    unsigned char *o = out;
    while (s < e) {
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        unsigned cp;
        s = j_escape(c, s, &cp);
        if (cp < 0x80) {
            *o++ = (unsigned char)cp;
        } else if (cp < 0x800) {
            *o++ = (unsigned char)(0xC0 | (cp >> 6));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *o++ = (unsigned char)(0xE0 | (cp >> 12));
            *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        } else {
            *o++ = (unsigned char)(0xF0 | (cp >> 18));
            *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
    }
    return (size_t)(o - out);
}

/* the bytes of a string token (decoded into c->scratch when it has escapes) */
static const unsigned char *tok_bytes(JCtx *c, const Tok *t, size_t *n) {
    if (!t->esc) {
        *n = (size_t)(t->e - t->s);
        return t->s;
    }
    size_t raw = (size_t)(t->e - t->s);
    c->scratch.len = 0;
    if (raw > c->scratch.cap) vec_grow(&c->f, &c->scratch, raw);
    *n = j_decode(c, t->s, t->e, (unsigned char *)c->scratch.data);
    return (const unsigned char *)c->scratch.data;
}

static double parse_double_text(JCtx *c, const unsigned char *s, const unsigned char *e) {
    char local[64];
    size_t n = (size_t)(e - s);
    char *b = local;
    if (n >= sizeof(local)) {
        b = (char *)malloc(n + 1);
        if (!b) fail_oom(&c->f);
    }
    memcpy(b, s, n);
    b[n] = 0;
    char *endp = NULL;
    PyThreadState *held = gil_hold(&c->f);
    double d = PyOS_string_to_double(b, &endp, NULL);
    int ok = !(d == -1.0 && PyErr_Occurred()) && endp == b + n;
    if (!ok) PyErr_Clear();
    gil_restore(&c->f, held);
    if (b != local) free(b);
    if (!ok) jfail(c, s, "unparsable number");
    return d;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* the float64 value of a number, correctly rounded (as orjson and Python) */
static double num_double(JCtx *c, const Num *n) {
    if (!n->is_float) return n->fits_i64 ? (double)n->i : (double)n->u;
    /* exact fast path (Clinger): a significand of at most 2**53 and a power of ten of at
     * most 1e22 are both exact doubles, so one multiplication or division rounds
     * correctly.  Counting up to 19 digits cannot overflow uint64; microsecond epoch
     * timestamps with nanosecond decimals (16 digits) stay on this path. */
    uint64_t m = 0;
    int digits = 0;
    const unsigned char *q;
    for (q = n->int_s; q < n->int_e; q++) {
        if (m == 0 && *q == '0') continue;
        m = m * 10 + (uint64_t)(*q - '0');
        if (++digits > 19) goto slow;
    }
    int64_t e10 = n->exp;
    if (n->has_frac) {
        for (q = n->frac_s; q < n->frac_e; q++) {
            if (m == 0 && *q == '0') { e10--; continue; }
            m = m * 10 + (uint64_t)(*q - '0');
            e10--;
            if (++digits > 19) goto slow;
        }
    }
    if (m == 0) return n->neg ? -0.0 : 0.0;
    if (m > (1ULL << 53) || e10 < -22 || e10 > 22) goto slow;
    {
        double d = (double)m;
        d = e10 >= 0 ? d * POW10[e10] : d / POW10[-e10];
        return n->neg ? -d : d;
    }
slow:
    return parse_double_text(c, n->s, n->e);
}

/* p at '-' or a digit: the text of a JSON number checked and its parts marked in n (no
 * value yet).  Field by field: a memset of n (rep stos) was about 7 % of the scan. */
static inline const unsigned char *j_number_lex(JCtx *c, const unsigned char *p, Num *n) {
    const unsigned char *end = c->end;
    n->neg = n->has_frac = n->has_exp = n->is_float = n->fits_i64 = 0;
    n->i = 0;
    n->u = 0;
    n->exp = 0;
    n->frac_s = n->frac_e = NULL;
    n->s = p;
    if (*p == '-') {
        n->neg = 1;
        p++;
    }
    n->int_s = p;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        jfail(c, p, "invalid number");
    }
    n->int_e = p;
    if (p < end && *p == '.') {
        p++;
        n->frac_s = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == n->frac_s) jfail(c, p, "no digit after decimal point");
        n->frac_e = p;
        n->has_frac = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        const unsigned char *es = p;
        int64_t ev = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ev < 100000000) ev = ev * 10 + (*p - '0');
            p++;
        }
        if (p == es) jfail(c, p, "no digit in exponent");
        n->exp = eneg ? -ev : ev;
        n->has_exp = 1;
    }
    n->e = p;
    n->is_float = n->has_frac || n->has_exp;
    return p;
}

/* orjson refuses numbers that overflow to infinity (n a float to it) */
static inline void j_refuse_infinity(JCtx *c, const Num *n) {
    if (n->is_float && (int64_t)(n->int_e - n->int_s) + n->exp > 300) {
        double d = parse_double_text(c, n->s, n->e);
        if (isinf(d)) jfail(c, n->s, "number is infinity when parsed as double");
    }
}

/* p at '-' or a digit: validated JSON number */
static const unsigned char *j_number(JCtx *c, const unsigned char *p, Num *n) {
    p = j_number_lex(c, p, n);
    size_t nd = (size_t)(n->int_e - n->int_s);
    if (!n->is_float) {
        uint64_t u = 0;
        int over = nd > 20;
        if (nd <= 19) {
            /* 19 digits always fit: no overflow test (a division) per digit */
            for (const unsigned char *q = n->int_s; q < n->int_e; q++)
                u = u * 10 + (uint64_t)(*q - '0');
        } else {
            for (const unsigned char *q = n->int_s; !over && q < n->int_e; q++) {
                uint64_t d = (uint64_t)(*q - '0');
                if (u > (UINT64_MAX - d) / 10) over = 1;
                else u = u * 10 + d;
            }
        }
        if (over) {
            n->is_float = 1; /* orjson: integers past 64 bits become floats */
        } else if (n->neg) {
            if (u <= (uint64_t)INT64_MAX) {
                n->fits_i64 = 1;
                n->i = -(int64_t)u;
            } else if (u == (uint64_t)INT64_MAX + 1) {
                n->fits_i64 = 1;
                n->i = INT64_MIN;
            } else {
                n->is_float = 1;
            }
        } else if (u <= (uint64_t)INT64_MAX) {
            n->fits_i64 = 1;
            n->i = (int64_t)u;
        } else {
            n->u = u;
        }
    }
    j_refuse_infinity(c, n);
    return p;
}

/* p at '-' or a digit: a number checked as j_number checks it, without its value: most
 * numbers in a trace are args nobody reads.  An integer of 20 digits or fewer that is a
 * float to orjson (past 64 bits) cannot reach infinity, so its digits are not added up. */
static const unsigned char *j_number_skip(JCtx *c, const unsigned char *p) {
    Num n;
    p = j_number_lex(c, p, &n);
    n.is_float |= n.int_e - n.int_s > 20;
    j_refuse_infinity(c, &n);
    return p;
}

static const unsigned char *j_literal(JCtx *c, const unsigned char *p, int *t) {
    size_t left = (size_t)(c->end - p);
    if (left >= 4 && memcmp(p, "true", 4) == 0) { *t = T_TRUE; return p + 4; }
    if (left >= 5 && memcmp(p, "false", 5) == 0) { *t = T_FALSE; return p + 5; }
    if (left >= 4 && memcmp(p, "null", 4) == 0) { *t = T_NULL; return p + 4; }
    jfail(c, p, "unexpected character, expected a JSON value");
}

/* p at the first byte of a value (non-whitespace); depth = nesting level a container
 * here would have.  Validates and skips it without recursion. */
static const unsigned char *j_skip(JCtx *c, const unsigned char *p, int depth) {
    unsigned char stack[J_MAX_DEPTH + 1];
    int sp = 0;
    const unsigned char *end = c->end;
    for (;;) {
        /* a value at p */
        unsigned ch = *p;
        if (ch == '"') {
            int esc = 0;
            p = j_string(c, p + 1, &esc);
        } else if (ch == '{' || ch == '[') {
            if (depth + sp > J_MAX_DEPTH) jfail(c, p, "nesting too deep");
            stack[sp++] = (unsigned char)ch;
            p = jnext(c, p + 1);
            if (ch == '{') {
                if (*p == '}') {
                    p++;
                    sp--;
                } else {
                    int esc = 0;
                    if (*p != '"') jfail(c, p, "expected a key");
                    p = j_string(c, p + 1, &esc);
                    p = jnext(c, p);
                    if (*p != ':') jfail(c, p, "expected ':'");
                    p = jnext(c, p + 1);
                    continue;
                }
            } else {
                if (*p == ']') {
                    p++;
                    sp--;
                } else {
                    continue;
                }
            }
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            p = j_number_skip(c, p);
        } else {
            int t;
            p = j_literal(c, p, &t);
        }
        /* after a complete value */
        for (;;) {
            if (sp == 0) return p;
            p = jws(p, end);
            if (p >= end) jfail(c, p, "unexpected end of data");
            unsigned top = stack[sp - 1];
            if (*p == ',') {
                p = jnext(c, p + 1);
                if (top == '{') {
                    int esc = 0;
                    if (*p != '"') jfail(c, p, "expected a key");
                    p = j_string(c, p + 1, &esc);
                    p = jnext(c, p);
                    if (*p != ':') jfail(c, p, "expected ':'");
                    p = jnext(c, p + 1);
                }
                break;
            }
            if (*p == (top == '{' ? '}' : ']')) {
                p++;
                sp--;
                continue;
            }
            jfail(c, p, "expected ',' or a closing bracket");
        }
    }
}

/* a value at p recorded as a token (containers are skipped) */
static const unsigned char *j_tok(JCtx *c, const unsigned char *p, int depth, Tok *t) {
    unsigned ch = *p;
    t->esc = 0;
    t->empty = 0;
    if (ch == '"') {
        t->t = T_STR;
        t->s = p + 1;
        p = j_string(c, p + 1, &t->esc);
        t->e = p - 1;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        t->t = T_NUM;
        p = j_number(c, p, &t->num);
    } else if (ch == '{' || ch == '[') {
        t->t = ch == '{' ? T_OBJ : T_ARR;
        const unsigned char *q = jws(p + 1, c->end);
        t->empty = q < c->end && *q == (ch == '{' ? '}' : ']');
        p = j_skip(c, p, depth);
    } else {
        p = j_literal(c, p, &t->t);
    }
    return p;
}

/* identify a key among names[0:n] (decoding escapes when present) */
static int key_id(JCtx *c, const unsigned char *s, const unsigned char *e, int esc,
                  const char *const *names, int n) {
    unsigned char buf[128];
    size_t len = (size_t)(e - s);
    if (esc) {
        if (len > sizeof(buf)) return n; /* decodes to more than 16 bytes: no match */
        len = j_decode(c, s, e, buf);
        s = buf;
    }
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return i;
    return n;
}

static const char *const EVENT_KEYS[K_NKEYS + 1] = {"ph", "cat", "name", "pid", "tid",
                                                    "ts", "dur", "args"};
static const char *const ARG_KEYS[A_NKEYS] = {"correlation", "External id", "external id",
                                              "device",      "stream",      "bytes"};

static inline int event_key(JCtx *c, const unsigned char *s, const unsigned char *e, int esc) {
    size_t n = (size_t)(e - s);
    if (!esc) { /* fast path for the common spellings */
        switch (n) {
        case 2:
            if (s[0] == 'p' && s[1] == 'h') return K_PH;
            if (s[0] == 't' && s[1] == 's') return K_TS;
            return K_OTHER;
        case 3:
            if (memcmp(s, "cat", 3) == 0) return K_CAT;
            if (memcmp(s, "pid", 3) == 0) return K_PID;
            if (memcmp(s, "tid", 3) == 0) return K_TID;
            if (memcmp(s, "dur", 3) == 0) return K_DUR;
            return K_OTHER;
        case 4:
            if (memcmp(s, "name", 4) == 0) return K_NAME;
            if (memcmp(s, "args", 4) == 0) return K_ARGS;
            return K_OTHER;
        default:
            return K_OTHER;
        }
    }
    return key_id(c, s, e, esc, EVENT_KEYS, K_NKEYS + 1);
}

/* p at the opening quote of a key: one of the usual event keys, read by comparing the
 * eight bytes after the quote with its text and closing quote (where it returns the key
 * and the byte after that quote), else -1: no string scan for the keys every event
 * has (3 % of the scan). */
static inline int event_key_quick(const unsigned char *p, const unsigned char *end,
                                  const unsigned char **after) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KEYW(a, b, c, d, e) \
    ((uint64_t)(a) | (uint64_t)(b) << 8 | (uint64_t)(c) << 16 | (uint64_t)(d) << 24 | (uint64_t)(e) << 32)
    if (end - p < 9) return -1;
    uint64_t w;
    memcpy(&w, p + 1, 8);
    uint64_t w3 = w & 0xFFFFFFULL, w4 = w & 0xFFFFFFFFULL, w5 = w & 0xFFFFFFFFFFULL;
    int k = -1, n = 0;
    if (w3 == KEYW('p', 'h', '"', 0, 0)) k = K_PH, n = 3;
    else if (w3 == KEYW('t', 's', '"', 0, 0)) k = K_TS, n = 3;
    else if (w4 == KEYW('p', 'i', 'd', '"', 0)) k = K_PID, n = 4;
    else if (w4 == KEYW('t', 'i', 'd', '"', 0)) k = K_TID, n = 4;
    else if (w4 == KEYW('d', 'u', 'r', '"', 0)) k = K_DUR, n = 4;
    else if (w4 == KEYW('c', 'a', 't', '"', 0)) k = K_CAT, n = 4;
    else if (w5 == KEYW('n', 'a', 'm', 'e', '"')) k = K_NAME, n = 5;
    else if (w5 == KEYW('a', 'r', 'g', 's', '"')) k = K_ARGS, n = 5;
#undef KEYW
    *after = p + 1 + n;
    return k;
#else
    (void)p, (void)end, (void)after;
    return -1;
#endif
}

/* most args keys are none of ours: told apart by their length first */
static inline int args_key(JCtx *c, const unsigned char *s, const unsigned char *e, int esc) {
    size_t n = (size_t)(e - s);
    if (!esc) {
        switch (n) {
        case 5:
            return memcmp(s, "bytes", 5) == 0 ? A_BYTES : A_OTHER;
        case 6:
            if (memcmp(s, "device", 6) == 0) return A_DEVICE;
            if (memcmp(s, "stream", 6) == 0) return A_STREAM;
            return A_OTHER;
        case 11:
            if (memcmp(s, "correlation", 11) == 0) return A_CORR;
            if (memcmp(s, "External id", 11) == 0) return A_EXT1;
            if (memcmp(s, "external id", 11) == 0) return A_EXT2;
            return A_OTHER;
        default:
            return A_OTHER;
        }
    }
    return key_id(c, s, e, esc, ARG_KEYS, A_NKEYS);
}

/* "args" object at p (its '{'): records the stat keys (last occurrence wins) */
static const unsigned char *j_args(JCtx *c, const unsigned char *p, Tok *slots) {
    p = jnext(c, p + 1);
    if (*p == '}') return p + 1;
    for (;;) {
        if (*p != '"') jfail(c, p, "expected a key");
        const unsigned char *ks = p + 1;
        int esc = 0;
        p = j_string(c, ks, &esc);
        int k = args_key(c, ks, p - 1, esc);
        p = jnext(c, p);
        if (*p != ':') jfail(c, p, "expected ':'");
        p = jnext(c, p + 1);
        if (k < A_NKEYS) p = j_tok(c, p, 5, &slots[k]);
        else p = j_skip(c, p, 5);
        p = jnext(c, p);
        if (*p == ',') {
            p = jnext(c, p + 1);
            continue;
        }
        if (*p == '}') return p + 1;
        jfail(c, p, "expected ',' or '}'");
    }
}

/* does a string token equal the ASCII text lit? */
static int tok_is(JCtx *c, const Tok *t, const char *lit) {
    if (t->t != T_STR) return 0;
    size_t n, ln = strlen(lit);
    if (!t->esc && (size_t)(t->e - t->s) != ln) return 0;
    const unsigned char *b = tok_bytes(c, t, &n);
    return n == ln && memcmp(b, lit, n) == 0;
}

/* str(value) of a name or (truthy) category value, as the bytes to intern */
static const unsigned char *tok_text(JCtx *c, const Tok *t, size_t *n, const unsigned char *at) {
    switch (t->t) {
    case T_MISSING:
    case T_NULL:
        *n = 4;
        return (const unsigned char *)"None";
    case T_TRUE:
        *n = 4;
        return (const unsigned char *)"True";
    case T_FALSE:
        *n = 5;
        return (const unsigned char *)"False";
    case T_STR:
        return tok_bytes(c, t, n);
    case T_NUM:
        if (!t->num.is_float) {
            if (t->num.fits_i64 && t->num.i == 0) {
                *n = 1;
                return (const unsigned char *)"0"; /* "-0" */
            }
            *n = (size_t)(t->num.e - t->num.s); /* JSON integers are canonical */
            return t->num.s;
        }
        jfail(c, at, "float name or category (falls back to the reference scanner)");
    default:
        jfail(c, at, "object or array as name or category (falls back to the reference scanner)");
    }
}

/* canonical key bytes of a pid/tid value (Python equality: 1 == 1.0 == True) */
static void track_part(JCtx *c, const Tok *t, TrackDesc *d, int w, const unsigned char *at) {
    Vec *k = &c->keybuf;
    unsigned char cls;
    int64_t iv = 0;
    double dv = 0;
    switch (t->t) {
    case T_MISSING:
    case T_NULL:
        d->type[w] = V_NONE;
        cls = 'N';
        vec_put(&c->f, k, &cls, 1);
        return;
    case T_TRUE:
    case T_FALSE:
        d->type[w] = t->t == T_TRUE ? V_TRUE : V_FALSE;
        iv = t->t == T_TRUE;
        cls = 'I';
        break;
    case T_NUM:
        if (!t->num.is_float) {
            if (!t->num.fits_i64) jfail(c, at, "pid/tid past int64");
            d->type[w] = V_INT;
            d->i[w] = iv = t->num.i;
            cls = 'I';
        } else {
            dv = num_double(c, &t->num);
            d->type[w] = V_FLOAT;
            d->d[w] = dv;
            if (dv == floor(dv) && dv >= -9223372036854775808.0 && dv < 9223372036854775808.0) {
                iv = (int64_t)dv;
                cls = 'I';
            } else {
                cls = 'F';
            }
        }
        break;
    case T_STR: {
        size_t n;
        const unsigned char *b = tok_bytes(c, t, &n);
        uint64_t ln = n;
        d->type[w] = V_STR;
        cls = 'S';
        vec_put(&c->f, k, &cls, 1);
        vec_put(&c->f, k, &ln, 8);
        d->soff[w] = k->len;
        d->slen[w] = n;
        vec_put(&c->f, k, b, n);
        return;
    }
    default:
        jfail(c, at, "pid/tid container");
    }
    vec_put(&c->f, k, &cls, 1);
    if (cls == 'I') vec_put(&c->f, k, &iv, 8);
    else vec_put(&c->f, k, &dv, 8);
}

static void stat_value(JCtx *c, int s, int64_t k, const Tok *t, const unsigned char *at) {
    StatCol *col = &c->stats[s];
    uint8_t isf;
    if (t->num.is_float) {
        double d = num_double(c, &t->num);
        vec_put(&c->f, &col->val, &d, 8);
        isf = 1;
        col->any_float = 1;
    } else {
        if (!t->num.fits_i64) jfail(c, at, "stat value past int64");
        vec_put(&c->f, &col->val, &t->num.i, 8);
        isf = 0;
    }
    VEC_PUSH(&c->f, &col->idx, int64_t, k);
    vec_put(&c->f, &col->isf, &isf, 1);
}

/* A time's exact ps from the text (fractional digits past 6 truncated, as the
 * reference) and its float64 value; written with an exponent (or absurdly long), the
 * float64 value stands for both.  A time of at most 19 digits, 6 of them decimals, no
 * exponent (every profiler's microseconds with up to picosecond decimals) is its
 * significand m times a power of ten, both exactly: with m <= 2**53 the double is
 * m / 10**decimals, correctly rounded as in num_double, and the digits are read once
 * for both (the general path reads them again for each). */
static void ts_record(JCtx *c, const Num *n) {
    size_t ni = (size_t)(n->int_e - n->int_s);
    size_t nf = n->has_frac ? (size_t)(n->frac_e - n->frac_s) : 0;
    uint8_t isexp = (uint8_t)(n->has_exp || ni > 30);
    i128 v = 0;
    double d;
    uint64_t m = 0;
    int once = !n->has_exp && nf <= 6 && ni + nf <= 19; /* 19 digits cannot overflow m */
    if (once) {
        for (const unsigned char *q = n->int_s; q < n->int_e; q++) m = m * 10 + (uint64_t)(*q - '0');
        if (nf)
            for (const unsigned char *q = n->frac_s; q < n->frac_e; q++)
                m = m * 10 + (uint64_t)(*q - '0');
        once = m <= (1ULL << 53);
    }
    if (once) {
        static const int64_t SCALE[7] = {1000000, 100000, 10000, 1000, 100, 10, 1};
        v = (i128)m * SCALE[nf];
        if (!n->is_float) d = (double)(n->neg ? -(int64_t)m : (int64_t)m); /* "-0": 0.0 */
        else if (m == 0) d = n->neg ? -0.0 : 0.0;
        else d = (n->neg ? -1.0 : 1.0) * ((double)m / POW10[nf]);
    } else {
        d = num_double(c, n);
        if (!isexp) {
            for (const unsigned char *q = n->int_s; q < n->int_e; q++) v = v * 10 + (*q - '0');
            int64_t frac = 0;
            int fd = 0;
            if (n->has_frac)
                for (const unsigned char *q = n->frac_s; q < n->frac_e && fd < 6; q++, fd++)
                    frac = frac * 10 + (*q - '0');
            for (; fd < 6; fd++) frac *= 10;
            v = v * 1000000 + frac;
        }
    }
    if (n->neg) v = -v;
    vec_put(&c->f, &c->ts_exact, &v, sizeof(v));
    vec_put(&c->f, &c->ts_isexp, &isexp, 1);
    vec_put(&c->f, &c->ts_approx, &d, 8);
}

/* events further than this from the median time are unplaceable (kineto._MAX_SPAN_US) */
#define MAX_SPAN_US 1e12

/* np.median of a[0:n] (n > 0, no NaN); reorders a.  Quickselect with pseudo-random
 * pivots and a three-way partition (runs of equal values stay linear). */
static double median_inplace(double *a, size_t n) {
    uint64_t rng = 0x9E3779B97F4A7C15ULL ^ n;
    size_t k = n / 2;
    int64_t lo = 0, hi = (int64_t)n - 1;
    while (lo < hi) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        double pivot = a[lo + (int64_t)(rng % (uint64_t)(hi - lo + 1))];
        int64_t lt = lo, i = lo, gt = hi;
        while (i <= gt) {
            double x = a[i];
            if (x < pivot) {
                a[i++] = a[lt];
                a[lt++] = x;
            } else if (x > pivot) {
                a[i] = a[gt];
                a[gt--] = x;
            } else {
                i++;
            }
        }
        if ((int64_t)k < lt) hi = lt - 1;
        else if ((int64_t)k > gt) lo = gt + 1;
        else break;
    }
    /* a[0:k] <= a[k] <= a[k+1:] now */
    double upper = a[k];
    if (n % 2) return upper;
    double lower = a[0];
    for (size_t j = 1; j < k; j++)
        if (a[j] > lower) lower = a[j];
    return (lower + upper) / 2.0; /* np.mean of the two middle values */
}

static inline int64_t to_i64_checked(JCtx *c, double x, const unsigned char *at) {
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) jfail(c, at, "value past int64");
    return (int64_t)x;
}

/* p at '{' of an event, index i in traceEvents */
static const unsigned char *j_event(JCtx *c, const unsigned char *p, int64_t i) {
    const unsigned char *ev_start = p;
    /* only the kind is cleared: every reader looks at it first (a memset of both
     * arrays was about 7 % of the scan) */
    Tok tk[K_NKEYS];
    Tok slots[A_NKEYS];
    for (int j = 0; j < K_NKEYS; j++) tk[j].t = T_MISSING;
    for (int j = 0; j < A_NKEYS; j++) slots[j].t = T_MISSING;
    int args_obj = 0;
    p = jnext(c, p + 1);
    if (*p == '}') {
        p++;
    } else {
        for (;;) {
            if (*p != '"') jfail(c, p, "expected a key");
            const unsigned char *after;
            int k = event_key_quick(p, c->end, &after);
            if (k >= 0) {
                p = after;
            } else {
                const unsigned char *ks = p + 1;
                int esc = 0;
                p = j_string(c, ks, &esc);
                k = event_key(c, ks, p - 1, esc);
            }
            p = jnext(c, p);
            if (*p != ':') jfail(c, p, "expected ':'");
            p = jnext(c, p + 1);
            if (k < K_NKEYS) {
                p = j_tok(c, p, 4, &tk[k]);
            } else if (k == K_ARGS) {
                for (int j = 0; j < A_NKEYS; j++) slots[j].t = T_MISSING;
                if (*p == '{') {
                    args_obj = 1;
                    p = j_args(c, p, slots);
                } else {
                    args_obj = 0;
                    p = j_skip(c, p, 4);
                }
            } else {
                p = j_skip(c, p, 4);
            }
            p = jnext(c, p);
            if (*p == ',') {
                p = jnext(c, p + 1);
                continue;
            }
            if (*p == '}') {
                p++;
                break;
            }
            jfail(c, p, "expected ',' or '}'");
        }
    }

    /* ---- the reference's per-event logic ---- */
    c->committing = 1; /* the event is whole: from here on, failures are real */
    if (!tok_is(c, &tk[K_PH], "X")) {
        if (tok_is(c, &tk[K_PH], "M")) {
            PyThreadState *held = gil_hold(&c->f);
            PyObject *t = PyBytes_FromStringAndSize((const char *)ev_start, p - ev_start);
            if (!t) fail_py(&c->f);
            int r = PyList_Append(c->mevents, t);
            Py_DECREF(t);
            if (r < 0) fail_py(&c->f);
            gil_restore(&c->f, held);
        }
        return p;
    }
    const Tok *ts = &tk[K_TS], *dur = &tk[K_DUR], *pid = &tk[K_PID], *tid = &tk[K_TID];
    if (ts->t != T_NUM || (dur->t != T_NUM && dur->t != T_MISSING) || pid->t == T_OBJ ||
        pid->t == T_ARR || tid->t == T_OBJ || tid->t == T_ARR) {
        c->bad++;
        return p;
    }
    /* cat = e.get("cat") or "" */
    const Tok *cat = &tk[K_CAT];
    const unsigned char *cb;
    size_t cn;
    int falsy;
    switch (cat->t) {
    case T_MISSING:
    case T_NULL:
    case T_FALSE:
        falsy = 1;
        break;
    case T_STR:
        falsy = cat->e == cat->s;
        break;
    case T_NUM:
        falsy = cat->num.is_float ? num_double(c, &cat->num) == 0.0
                                  : (cat->num.fits_i64 && cat->num.i == 0);
        break;
    case T_OBJ:
    case T_ARR:
        falsy = cat->empty;
        break;
    default:
        falsy = 0;
    }
    if (tok_is(c, cat, "Trace") || tok_is(c, pid, "Spans") || tok_is(c, pid, "Traces")) return p;

    int64_t k = c->n_kept++;
    if (k >= 0x7fffffff) jfail(c, ev_start, "too many events");
    /* name */
    size_t nn;
    const unsigned char *nb = tok_text(c, &tk[K_NAME], &nn, ev_start);
    /* copied: the text is a chunk that will be gone */
    int32_t nid = intern(&c->f, &c->names, &c->arena, nb, nn, 1);
    VEC_PUSH(&c->f, &c->name_ids, int32_t, nid);
    /* category */
    if (falsy) {
        cb = (const unsigned char *)"";
        cn = 0;
    } else {
        cb = tok_text(c, cat, &cn, ev_start);
    }
    int32_t cid = intern(&c->f, &c->cats, &c->arena, cb, cn, 1);
    VEC_PUSH(&c->f, &c->cat_ids, int32_t, cid);
    /* track */
    TrackDesc d;
    memset(&d, 0, sizeof(d));
    c->keybuf.len = 0;
    track_part(c, pid, &d, 0, ev_start);
    track_part(c, tid, &d, 1, ev_start);
    int32_t tid_ = intern(&c->f, &c->tracks, &c->arena, (const unsigned char *)c->keybuf.data,
                          c->keybuf.len, 1);
    if ((size_t)tid_ * sizeof(TrackDesc) == c->tdesc.len) vec_put(&c->f, &c->tdesc, &d, sizeof(d));
    VEC_PUSH(&c->f, &c->track_ids, int32_t, tid_);
    /* ts, dur */
    ts_record(c, &ts->num);
    VEC_PUSH(&c->f, &c->dur_d, double, dur->t == T_NUM ? num_double(c, &dur->num) : 0.0);
    /* stats from args: per stat the first spelling whose value is not null */
    if (args_obj) {
        static const int first_key[N_STATS] = {A_CORR, A_EXT1, A_DEVICE, A_STREAM, A_BYTES};
        for (int s = 0; s < N_STATS; s++) {
            int nkeys = s == 1 ? 2 : 1;
            for (int j = 0; j < nkeys; j++) {
                const Tok *v = &slots[first_key[s] + j];
                if (v->t == T_MISSING || v->t == T_NULL) continue;
                if (v->t == T_NUM) stat_value(c, s, k, v, ev_start);
                break;
            }
        }
    }
    return p;
}

/* where the next unit starts */
enum { JS_BEGIN, JS_FIRST, JS_MEMBER, JS_AFTER, JS_EVFIRST, JS_EVENT, JS_EVSEP, JS_TAIL };

/* a value that ends the buffer (a number) may go on in the next chunk */
static inline void j_settled(JCtx *c, const unsigned char *p) {
    if (p >= c->end && !c->final) j_dry(c);
}

static inline void j_commit(JCtx *c, const unsigned char *p, int state) {
    c->pos = JPOS(c, p);
    c->state = state;
    c->committing = 0;
}

/* Walks buf[pos:end] unit by unit from c->state; returns at the end of the text, or
 * longjmps: a failure, or (not final) a unit cut by the end of the buffer. */
static void j_run(JCtx *c) {
    const unsigned char *p = c->buf + c->pos;
    static const char *const TE[1] = {"traceEvents"};
    for (;;) {
        if (c->state != JS_BEGIN && c->state != JS_TAIL) {
            /* whitespace is committed as it comes (a stream of it costs nothing) */
            p = jws(p, c->end);
            if (p >= c->end && !c->final) {
                j_commit(c, p, c->state);
                return;
            }
        }
        switch (c->state) {
        case JS_BEGIN:
            p = jws(p, c->end);
            if (p >= c->end && !c->final) {
                j_commit(c, p, JS_BEGIN);
                return;
            }
            if (p >= c->end || *p != '{') jfail(c, p, "document is not a JSON object");
            j_commit(c, ++p, JS_FIRST);
            break;
        case JS_FIRST:
            p = jnext(c, p);
            if (*p == '}') j_commit(c, ++p, JS_TAIL);
            else c->state = JS_MEMBER;
            break;
        case JS_MEMBER: {
            p = jnext(c, p);
            if (*p != '"') jfail(c, p, "expected a key");
            const unsigned char *ks = p + 1;
            int esc = 0;
            p = j_string(c, ks, &esc);
            const unsigned char *ke = p - 1;
            p = jnext(c, p);
            if (*p != ':') jfail(c, p, "expected ':'");
            p = jnext(c, p + 1);
            if (key_id(c, ks, ke, esc, TE, 1) == 0) {
                if (c->seen_events) jfail(c, ks, "duplicate traceEvents");
                if (*p != '[') jfail(c, p, "traceEvents is not a list");
                c->seen_events = 1;
                j_commit(c, ++p, JS_EVFIRST);
            } else {
                int m = key_id(c, ks, ke, esc, META_KEYS, N_META);
                const unsigned char *vs = p;
                p = j_skip(c, p, 2);
                j_settled(c, p);
                c->committing = 1;
                if (m < N_META) {
                    PyThreadState *held = gil_hold(&c->f);
                    PyObject *v = PyBytes_FromStringAndSize((const char *)vs, p - vs);
                    if (!v) fail_py(&c->f);
                    Py_XSETREF(c->meta[m], v);
                    gil_restore(&c->f, held);
                }
                j_commit(c, p, JS_AFTER);
            }
            break;
        }
        case JS_AFTER:
            p = jnext(c, p);
            if (*p == ',') j_commit(c, ++p, JS_MEMBER);
            else if (*p == '}') j_commit(c, ++p, JS_TAIL);
            else jfail(c, p, "expected ',' or '}'");
            break;
        case JS_EVFIRST:
            p = jnext(c, p);
            if (*p == ']') j_commit(c, ++p, JS_AFTER);
            else c->state = JS_EVENT;
            break;
        case JS_EVENT:
            p = jnext(c, p);
            if (*p == '{') {
                p = j_event(c, p, c->n_raw);
            } else {
                p = j_skip(c, p, 3);
                j_settled(c, p);
                c->bad++;
            }
            c->n_raw++;
            j_commit(c, p, JS_EVSEP);
            publish(c->done, JPOS(c, p));
            break;
        case JS_EVSEP:
            p = jnext(c, p);
            if (*p == ',') j_commit(c, ++p, JS_EVENT);
            else if (*p == ']') j_commit(c, ++p, JS_AFTER);
            else jfail(c, p, "expected ',' or ']'");
            break;
        default: /* JS_TAIL */
            p = jws(p, c->end);
            if (p != c->end) jfail(c, p, "unexpected content after document");
            j_commit(c, p, JS_TAIL);
            if (c->final && !c->seen_events) jfail(c, p, "no traceEvents list");
            return;
        }
    }
}

#define JCTX_VECS (15 + 3 * N_STATS)

/* every growable vector of a context, for freeing it or emptying it for reuse */
static void jctx_vecs(JCtx *c, Vec **vs) {
    Vec *own[] = {&c->name_ids, &c->cat_ids, &c->track_ids, &c->dur_ps, &c->ts_exact,
                  &c->ts_approx, &c->dur_d, &c->ts_isexp, &c->tdesc, &c->scratch, &c->keybuf,
                  &c->ts_out, &c->sane, &c->pick, &c->inbuf};
    size_t n = sizeof(own) / sizeof(own[0]);
    memcpy(vs, own, sizeof(own));
    for (int s = 0; s < N_STATS; s++) {
        vs[n++] = &c->stats[s].idx;
        vs[n++] = &c->stats[s].val;
        vs[n++] = &c->stats[s].isf;
    }
}

static void jctx_free(JCtx *c) {
    table_free(&c->names);
    table_free(&c->cats);
    table_free(&c->tracks);
    arena_free(&c->arena);
    Vec *vs[JCTX_VECS];
    jctx_vecs(c, vs);
    for (size_t i = 0; i < JCTX_VECS; i++) vec_free(vs[i]);
    Py_XDECREF(c->mevents);
    for (int m = 0; m < N_META; m++) Py_XDECREF(c->meta[m]);
    free(c);
}

static PyObject *str_list(const Table *t) {
    PyObject *l = PyList_New((Py_ssize_t)t->nents);
    if (!l) return NULL;
    for (size_t i = 0; i < t->nents; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)t->ents[i].p, (Py_ssize_t)t->ents[i].n,
                                           "strict");
        if (!s) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, s);
    }
    return l;
}

static PyObject *track_value(const TrackDesc *d, int w, const unsigned char *key) {
    switch (d->type[w]) {
    case V_NONE: Py_RETURN_NONE;
    case V_TRUE: Py_RETURN_TRUE;
    case V_FALSE: Py_RETURN_FALSE;
    case V_INT: return PyLong_FromLongLong(d->i[w]);
    case V_FLOAT: return PyFloat_FromDouble(d->d[w]);
    default:
        return PyUnicode_DecodeUTF8((const char *)key + d->soff[w], (Py_ssize_t)d->slen[w], "strict");
    }
}

/* everything after the walk; Python objects only */
static PyObject *j_result(JCtx *c) {
    int64_t n = c->n_kept;
    const double *approx = (const double *)c->ts_approx.data;
    const double *dur = (const double *)c->dur_d.data;
    const uint8_t *ie = (const uint8_t *)c->ts_isexp.data;
    /* "sane" events, as the reference: a finite duration under MAX_SPAN, and a time
     * within MAX_SPAN of the median time of the events with such a duration */
    for (int64_t k = 0; k < n; k++) {
        uint8_t ok = isfinite(approx[k]) && isfinite(dur[k]) && fabs(dur[k]) < MAX_SPAN_US;
        VEC_PUSH(&c->f, &c->sane, uint8_t, ok);
        if (ok) VEC_PUSH(&c->f, &c->pick, double, approx[k]);
    }
    int any_sane = c->pick.len > 0;
    if (any_sane) {
        double med = median_inplace((double *)c->pick.data, c->pick.len / 8);
        for (int64_t k = 0; k < n; k++)
            if (c->sane.data[k] && !(fabs(approx[k] - med) < MAX_SPAN_US)) c->sane.data[k] = 0;
    }
    vec_free(&c->pick);
    const uint8_t *ok = (const uint8_t *)c->sane.data;
    /* base_us = floor(min ts) over the sane events, as float64 like the reference */
    int64_t base_us = 0;
    double tmin = 0.0;
    int seen = 0;
    for (int64_t k = 0; k < n; k++)
        if (ok[k] && (!seen || approx[k] < tmin)) {
            tmin = approx[k];
            seen = 1;
        }
    if (seen) base_us = to_i64_checked(c, floor(tmin), c->buf);
    i128 base_ps = (i128)base_us * 1000000;
    /* the int64 columns overwrite the float64 ones they come from, element by element
     * (each read before it is written): 16 bytes an event less at the scan's peak */
    int64_t *ts_out = (int64_t *)c->ts_approx.data, *dur_out = (int64_t *)c->dur_d.data;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = INT64_MIN, d = 0; /* OUT_OF_RANGE, as the reference */
        if (ok[k]) {
            if (ie[k]) {
                v = to_i64_checked(c, nearbyint((approx[k] - (double)base_us) * 1e6), c->buf);
            } else {
                i128 r;
                memcpy(&r, c->ts_exact.data + (size_t)k * sizeof(i128), sizeof(r));
                r -= base_ps;
                if (r < (i128)INT64_MIN || r > (i128)INT64_MAX) jfail(c, c->buf, "timestamp past int64");
                v = (int64_t)r;
            }
            d = to_i64_checked(c, nearbyint(dur[k] * 1e6), c->buf);
        }
        ts_out[k] = v;
        dur_out[k] = d;
    }
    c->ts_out = c->ts_approx;
    c->dur_ps = c->dur_d;
    memset(&c->ts_approx, 0, sizeof(Vec));
    memset(&c->dur_d, 0, sizeof(Vec));
    /* stats: a column with any float goes through float64 and rint, like np.asarray */
    for (int s = 0; s < N_STATS; s++) {
        StatCol *col = &c->stats[s];
        if (!col->any_float) continue;
        size_t m = col->isf.len;
        for (size_t j = 0; j < m; j++) {
            double x;
            int64_t iv;
            memcpy(&iv, col->val.data + j * 8, 8);
            if (col->isf.data[j]) memcpy(&x, &iv, 8);
            else x = (double)iv;
            iv = to_i64_checked(c, nearbyint(x), c->buf);
            memcpy(col->val.data + j * 8, &iv, 8);
        }
    }

    /* the per-event scratch is done with: freed before the columns are handed over */
    Vec *done_with[] = {&c->ts_exact, &c->ts_approx, &c->dur_d, &c->ts_isexp, &c->sane, &c->pick,
                        &c->inbuf};
    for (size_t j = 0; j < sizeof(done_with) / sizeof(done_with[0]); j++) vec_free(done_with[j]);

    /* no longjmp past this point: Python errors unwind through `error` */
    PyObject *out = PyDict_New(), *stats = PyDict_New(), *meta = PyDict_New();
    PyObject *tk = PyList_New((Py_ssize_t)c->tracks.nents);
    PyObject *names = NULL, *cats = NULL;
    if (!out || !stats || !meta || !tk) goto error;
    for (int s = 0; s < N_STATS; s++) {
        StatCol *col = &c->stats[s];
        if (!col->isf.len) continue;
        PyObject *pair = Py_BuildValue("(NN)", vec_to_column(&col->idx), vec_to_column(&col->val));
        if (!pair) goto error;
        int r = PyDict_SetItemString(stats, STAT_NAMES[s], pair);
        Py_DECREF(pair);
        if (r < 0) goto error;
    }
    const TrackDesc *ds = (const TrackDesc *)c->tdesc.data;
    for (size_t j = 0; j < c->tracks.nents; j++) {
        const unsigned char *key = c->tracks.ents[j].p;
        PyObject *a = track_value(&ds[j], 0, key);
        PyObject *b = a ? track_value(&ds[j], 1, key) : NULL;
        PyObject *t = (a && b) ? PyTuple_Pack(2, a, b) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (!t) goto error;
        PyList_SET_ITEM(tk, (Py_ssize_t)j, t);
    }
    for (int m = 0; m < N_META; m++) {
        if (c->meta[m] && PyDict_SetItemString(meta, META_KEYS[m], c->meta[m]) < 0) goto error;
    }
    names = str_list(&c->names);
    cats = str_list(&c->cats);
    if (!names || !cats) goto error;
    if (dict_put(out, "n_raw", PyLong_FromLongLong(c->n_raw)) < 0 ||
        PyDict_SetItemString(out, "names", names) < 0 ||
        dict_put(out, "name_ids", vec_to_column(&c->name_ids)) < 0 ||
        PyDict_SetItemString(out, "cats", cats) < 0 ||
        dict_put(out, "cat_ids", vec_to_column(&c->cat_ids)) < 0 ||
        PyDict_SetItemString(out, "track_keys", tk) < 0 ||
        dict_put(out, "track_ids", vec_to_column(&c->track_ids)) < 0 ||
        dict_put(out, "base_us", PyLong_FromLongLong(base_us)) < 0 ||
        dict_put(out, "ts_ps", vec_to_column(&c->ts_out)) < 0 ||
        dict_put(out, "dur_ps", vec_to_column(&c->dur_ps)) < 0 ||
        PyDict_SetItemString(out, "stats", stats) < 0 ||
        PyDict_SetItemString(out, "meta", meta) < 0 ||
        PyDict_SetItemString(out, "m_events", c->mevents) < 0 ||
        dict_put(out, "bad", PyLong_FromLongLong(c->bad)) < 0)
        goto error;
    Py_DECREF(names);
    Py_DECREF(cats);
    Py_DECREF(tk);
    Py_DECREF(stats);
    Py_DECREF(meta);
    return out;
error:
    Py_XDECREF(names);
    Py_XDECREF(cats);
    Py_XDECREF(tk);
    Py_XDECREF(stats);
    Py_XDECREF(meta);
    Py_XDECREF(out);
    return NULL;
}

static JCtx *jctx_new(void) {
    JCtx *c = (JCtx *)calloc(1, sizeof(JCtx));
    if (!c) {
        PyErr_NoMemory();
        return NULL;
    }
    c->mevents = PyList_New(0);
    if (!c->mevents) {
        free(c);
        return NULL;
    }
    return c;
}

static PyObject *scan_kineto(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view, done;
    int64_t *done_at;
    if (scan_args(args, "scan_kineto", &view, &done, &done_at) < 0) return NULL;
    JCtx *c = jctx_new();
    if (!c) {
        scan_args_release(&view, &done);
        return NULL;
    }
    c->buf = (const unsigned char *)view.buf;
    c->end = c->buf + view.len;
    c->done = done_at;
    c->final = 1;
    if (setjmp(c->f.jb)) {
        gil_hold(&c->f);
        raise_fail(&c->f, "native Kineto scan");
        jctx_free(c);
        scan_args_release(&view, &done);
        return NULL;
    }
    gil_release(&c->f);
    j_run(c);
    gil_hold(&c->f);
    publish(c->done, (int64_t)view.len);
    PyObject *out = j_result(c); /* NULL with a Python error set */
    jctx_free(c);
    scan_args_release(&view, &done);
    return out;
}

/* ---- the same scan fed chunk by chunk: the text never exists whole ---- */

#define KSTREAM "tb_perfdiag._native.kineto_stream"

static void kstream_free(PyObject *cap) {
    JCtx *c = (JCtx *)PyCapsule_GetPointer(cap, KSTREAM);
    if (c) jctx_free(c);
}

static PyObject *kineto_stream(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    JCtx *c = jctx_new();
    if (!c) return NULL;
    PyObject *cap = PyCapsule_New(c, KSTREAM, kstream_free);
    if (!cap) jctx_free(c);
    return cap;
}

/* appends a chunk and walks what is whole; final: the chunk ends the document, and
 * the columns are returned (else None) */
static PyObject *kineto_feed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    Py_buffer view;
    int final;
    if (!PyArg_ParseTuple(args, "Oy*p", &cap, &view, &final)) return NULL;
    JCtx *c = (JCtx *)PyCapsule_GetPointer(cap, KSTREAM);
    if (!c) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (c->dead) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "native Kineto scan: fed after a failure");
        return NULL;
    }
    c->final = final;
    c->committing = 0;
    c->need_more = 0;
    volatile int holding = 1; /* the view (j_result may fail after it is released) */
    if (setjmp(c->f.jb)) {
        gil_hold(&c->f);
        if (!c->need_more) {
            c->dead = 1;
            raise_fail(&c->f, "native Kineto scan");
            if (holding) PyBuffer_Release(&view);
            return NULL;
        }
    } else {
        vec_put(&c->f, &c->inbuf, view.buf, (size_t)view.len);
        if (!final && c->inbuf.len < c->retry_at) {
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        c->buf = (const unsigned char *)c->inbuf.data;
        c->end = c->buf + c->inbuf.len;
        gil_release(&c->f);
        j_run(c);
        gil_hold(&c->f);
    }
    PyBuffer_Release(&view);
    holding = 0;
    /* keep the uncommitted tail; a unit longer than a chunk waits for twice its text
     * before it is walked again (no quadratic re-walks) */
    size_t left = c->inbuf.len - (size_t)c->pos;
    if (left && c->pos) memmove(c->inbuf.data, c->inbuf.data + c->pos, left);
    c->inbuf.len = left;
    c->pos = 0;
    c->retry_at = c->need_more ? 2 * left : 0;
    c->buf = c->end = NULL;
    if (!final) Py_RETURN_NONE;
    c->dead = 1; /* the columns are handed over once */
    return j_result(c);
}

/* ---- a stretch of traceEvents scanned on its own thread, then absorbed ----
 * The text between two event starts (a '{' after a newline) is walked by a context of
 * its own that starts where an event is expected; the stream takes it as if it had
 * walked the text itself when, at that point, it expects an event with nothing
 * pending (kineto_absorb).  Else the caller feeds the text as usual, so a guess that
 * was wrong (a pretty-printed args object, the list's end) costs only the time. */

#define KPART "tb_perfdiag._native.kineto_part"

static void kpart_free(PyObject *cap) {
    JCtx *c = (JCtx *)PyCapsule_GetPointer(cap, KPART);
    if (c) jctx_free(c);
}

/* a context as new, keeping what it has allocated: a part absorbed is walked again
 * over the next stretch without faulting its columns' pages in anew (a fresh context a
 * stretch was 340 K more page faults on the 20 M-event trace) */
static void jctx_reset(JCtx *c) {
    Table *ts[] = {&c->names, &c->cats, &c->tracks};
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        ts[i]->nents = 0;
        if (ts[i]->slots) memset(ts[i]->slots, 0xff, (ts[i]->mask + 1) * sizeof(int32_t));
    }
    arena_free(&c->arena);
    Vec *vs[JCTX_VECS];
    jctx_vecs(c, vs);
    for (size_t i = 0; i < JCTX_VECS; i++) {
        if (vs[i]->col) vec_free(vs[i]); /* handed over: not ours to write again */
        vs[i]->len = 0;
    }
    for (int s = 0; s < N_STATS; s++) c->stats[s].any_float = 0;
    PyList_SetSlice(c->mevents, 0, PyList_GET_SIZE(c->mevents), NULL);
    for (int m = 0; m < N_META; m++) Py_CLEAR(c->meta[m]);
    c->n_kept = c->n_raw = c->bad = 0;
    c->done = NULL;
    c->final = c->committing = c->need_more = c->dead = 0;
    c->pos = 0;
    c->retry_at = 0;
    c->buf = c->end = NULL;
    c->f.err = NULL;
    c->f.err_pos = 0;
}

/* kineto_part(buf, lo, hi[, spare]) -> the walk of buf[lo:hi], read in place, as whole
 * events each followed by its separator, or None when the text is not that.  spare: a
 * part already absorbed, whose context (and capsule) the walk reuses. */
static PyObject *kineto_part(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b;
    Py_ssize_t lo, hi;
    PyObject *spare = Py_None;
    if (!PyArg_ParseTuple(args, "y*nn|O", &b, &lo, &hi, &spare)) return NULL;
    if (lo < 0 || hi < lo || hi > b.len) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "kineto_part: lo:hi outside the buffer");
        return NULL;
    }
    JCtx *reused = NULL;
    if (spare != Py_None) {
        reused = (JCtx *)PyCapsule_GetPointer(spare, KPART);
        if (!reused || !reused->dead) {
            PyBuffer_Release(&b);
            if (reused) PyErr_SetString(PyExc_ValueError, "kineto_part: spare not absorbed");
            return NULL;
        }
        jctx_reset(reused);
    }
    JCtx *volatile c = reused ? reused : jctx_new();
    if (!c) {
        PyBuffer_Release(&b);
        return NULL;
    }
    c->state = JS_EVENT;
    c->seen_events = 1;
    c->buf = (const unsigned char *)b.buf + lo;
    c->end = (const unsigned char *)b.buf + hi;
    if (setjmp(c->f.jb)) {
        /* cut short, or not events: the stream walks this text itself (and names any
         * problem).  A reused context stays its capsule's, marked spent. */
        gil_hold(&c->f);
        PyErr_Clear();
        c->buf = c->end = NULL;
        if (reused) c->dead = 1;
        else jctx_free(c);
        PyBuffer_Release(&b);
        Py_RETURN_NONE;
    }
    gil_release(&c->f);
    j_run(c);
    gil_hold(&c->f);
    int whole = c->state == JS_EVENT && c->pos == hi - lo;
    c->buf = c->end = NULL;
    PyBuffer_Release(&b);
    if (!whole) {
        if (reused) c->dead = 1;
        else jctx_free(c);
        Py_RETURN_NONE;
    }
    if (reused) {
        Py_INCREF(spare);
        return spare;
    }
    PyObject *cap = PyCapsule_New(c, KPART, kpart_free);
    if (!cap) jctx_free(c);
    return cap;
}

/* the part's ids of table t in ours, new strings added in the part's first-seen order
 * (the order a walk of its text would add them in) */
static int32_t *absorb_table(JCtx *c, Table *ours, const Table *t) {
    int32_t *lut = (int32_t *)malloc((t->nents ? t->nents : 1) * sizeof(int32_t));
    if (!lut) fail_oom(&c->f);
    for (size_t i = 0; i < t->nents; i++)
        lut[i] = intern(&c->f, ours, &c->arena, t->ents[i].p, t->ents[i].n, 1);
    return lut;
}

static void absorb_ids(JCtx *c, Vec *ours, const Vec *part, const int32_t *lut) {
    size_t m = part->len / sizeof(int32_t);
    if (ours->len + part->len > ours->cap) vec_grow(&c->f, ours, part->len);
    const int32_t *from = (const int32_t *)part->data;
    int32_t *to = (int32_t *)(ours->data + ours->len);
    for (size_t k = 0; k < m; k++) to[k] = lut[from[k]];
    ours->len += part->len;
}

/* kineto_absorb(stream, part) -> True when the stream took the part's events as if it
 * had walked their text; False (nothing changed) when it is not expecting an event
 * with nothing pending */
static PyObject *kineto_absorb(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *scap, *pcap;
    if (!PyArg_ParseTuple(args, "OO", &scap, &pcap)) return NULL;
    JCtx *c = (JCtx *)PyCapsule_GetPointer(scap, KSTREAM);
    JCtx *p = c ? (JCtx *)PyCapsule_GetPointer(pcap, KPART) : NULL;
    if (!p) return NULL;
    /* an event expected next (the list's first element, or one after a comma) */
    if (c->dead || p->dead || (c->state != JS_EVENT && c->state != JS_EVFIRST) ||
        c->inbuf.len != 0 || c->n_kept + p->n_kept >= 0x7fffffff)
        Py_RETURN_FALSE;
    p->dead = 1; /* absorbed once */
    c->state = JS_EVENT; /* where the part's text ends */
    volatile int32_t *lut_n = NULL, *lut_c = NULL, *lut_t = NULL;
    if (setjmp(c->f.jb)) {
        gil_hold(&c->f);
        free((void *)lut_n);
        free((void *)lut_c);
        free((void *)lut_t);
        c->dead = 1;
        raise_fail(&c->f, "native Kineto scan");
        return NULL;
    }
    Py_ssize_t nm = PyList_GET_SIZE(p->mevents);
    for (Py_ssize_t j = 0; j < nm; j++)
        if (PyList_Append(c->mevents, PyList_GET_ITEM(p->mevents, j)) < 0) fail_py(&c->f);
    gil_release(&c->f);
    lut_n = absorb_table(c, &c->names, &p->names);
    lut_c = absorb_table(c, &c->cats, &p->cats);
    lut_t = absorb_table(c, &c->tracks, &p->tracks);
    const TrackDesc *pd = (const TrackDesc *)p->tdesc.data;
    for (size_t i = 0; i < p->tracks.nents; i++)
        if ((size_t)lut_t[i] * sizeof(TrackDesc) == c->tdesc.len)
            vec_put(&c->f, &c->tdesc, &pd[i], sizeof(TrackDesc));
    absorb_ids(c, &c->name_ids, &p->name_ids, (const int32_t *)lut_n);
    absorb_ids(c, &c->cat_ids, &p->cat_ids, (const int32_t *)lut_c);
    absorb_ids(c, &c->track_ids, &p->track_ids, (const int32_t *)lut_t);
    vec_put(&c->f, &c->ts_exact, p->ts_exact.data, p->ts_exact.len);
    vec_put(&c->f, &c->ts_isexp, p->ts_isexp.data, p->ts_isexp.len);
    vec_put(&c->f, &c->ts_approx, p->ts_approx.data, p->ts_approx.len);
    vec_put(&c->f, &c->dur_d, p->dur_d.data, p->dur_d.len);
    for (int s = 0; s < N_STATS; s++) {
        StatCol *o = &c->stats[s], *q = &p->stats[s];
        size_t m = q->idx.len / sizeof(int64_t);
        if (o->idx.len + q->idx.len > o->idx.cap) vec_grow(&c->f, &o->idx, q->idx.len);
        const int64_t *from = (const int64_t *)q->idx.data;
        int64_t *to = (int64_t *)(o->idx.data + o->idx.len);
        for (size_t k = 0; k < m; k++) to[k] = from[k] + c->n_kept;
        o->idx.len += q->idx.len;
        vec_put(&c->f, &o->val, q->val.data, q->val.len);
        vec_put(&c->f, &o->isf, q->isf.data, q->isf.len);
        o->any_float |= q->any_float;
    }
    c->n_kept += p->n_kept;
    c->n_raw += p->n_raw;
    c->bad += p->bad;
    gil_hold(&c->f);
    free((void *)lut_n);
    free((void *)lut_c);
    free((void *)lut_t);
    Py_RETURN_TRUE;
}

/* ====================================================================== */
/* Nesting of events sorted by (track, ts, -dur), as one pass per track: an event's
 * parent is the deepest event still open at its start (end > ts), i.e. the latest
 * earlier event of the track that is still open — what a stack walk sees, also when
 * an annotation starts inside a frame and outlives it.  The stack is the ancestor
 * chain of the previous event; ended events are popped from its top.  depth =
 * depth(parent) + 1. */

static PyObject *nest_sorted(PyObject *self, PyObject *args) {
    Py_buffer tb, sb, db;
    int wide = 1;
    if (!PyArg_ParseTuple(args, "y*y*y*|p", &tb, &sb, &db, &wide)) return NULL;
    PyObject *out = NULL, *depth_b = NULL, *parent_b = NULL;
    int64_t *stack = NULL;
    Py_ssize_t n = sb.len / 8;
    if (sb.len % 8 || db.len != sb.len || tb.len != n * 4 || (!wide && n >= INT32_MAX)) {
        PyErr_SetString(PyExc_ValueError, "nest_sorted: want int32 track, int64 ts, int64 dur "
                        "(int32 parents: fewer than 2**31 - 1 events)");
        goto done;
    }
    depth_b = new_column(n * 2);
    parent_b = new_column(n * (wide ? 8 : 4));
    /* only as deep as the deepest nesting is ever touched */
    stack = malloc(sizeof(int64_t) * (n + 1));
    if (!depth_b || !parent_b || !stack) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    {
        const int32_t *track = tb.buf;
        const int64_t *ts = sb.buf, *dur = db.buf;
        int16_t *depth = (int16_t *)COL_DATA(depth_b);
        int64_t *parent64 = wide ? (int64_t *)COL_DATA(parent_b) : NULL;
        int32_t *parent32 = wide ? NULL : (int32_t *)COL_DATA(parent_b);
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t sn = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i == 0 || track[i] != track[i - 1]) sn = 0;
            /* ends from durations: an end column would be one more int64 per event */
            while (sn > 0 && ts[stack[sn - 1]] + dur[stack[sn - 1]] <= ts[i]) sn--;
            int64_t p = sn > 0 ? stack[sn - 1] : -1;
            if (wide) parent64[i] = p;
            else parent32[i] = (int32_t)p;
            int d = p >= 0 ? depth[p] + 1 : 0;
            depth[i] = (int16_t)(d > 32767 ? 32767 : d);
            stack[sn++] = i;
        }
        Py_END_ALLOW_THREADS
    }
    out = PyTuple_Pack(2, depth_b, parent_b);
done:
    Py_XDECREF(depth_b);
    Py_XDECREF(parent_b);
    free(stack);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    return out;
}

/* The busy set of a device (tb_perfdiag.analysis.intervals.union_of_runs): the union of
 * [ts, ts + dur) over the events ev, given as runs each sorted by start (one per track),
 * merged with a heap of the runs' heads; intervals that touch merge.  Two passes (count,
 * then fill) so that nothing the size of the events is allocated besides the result:
 * the numpy union sorted copies of the starts and ends (1.4 GB on a 20 M-op device). */
typedef struct { int64_t t; Py_ssize_t pos, end; } bu_head;

static void bu_sift(bu_head *h, Py_ssize_t n, Py_ssize_t i) {
    bu_head x = h[i];
    for (;;) {
        Py_ssize_t l = 2 * i + 1, m = l;
        if (l >= n) break;
        if (l + 1 < n && h[l + 1].t < h[l].t) m = l + 1;
        if (h[m].t >= x.t) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
}

/* One merge of the runs.  With thr >= 0 it also finds the idle gaps of at least thr
 * between the merged intervals, each with the op that ended before it (of the ops ending
 * at its start, the last in ev) and the op that ended it (of those starting at its end,
 * the first in ev): what the sorts of the ops by start and by end gave find_gaps.
 * Without output arrays it only counts. */
typedef struct { int64_t *gs, *ge, *prev, *next; Py_ssize_t n; } bu_gaps;

/* ev: the device's event indices, int32 (w32) or int64 (ev); bu_pass and busy_union */
#define BU_EV(i) (w32 ? (int64_t)w32[i] : ev[i])
static Py_ssize_t bu_pass(const int64_t *ts, const int64_t *dur, const int64_t *ev,
                          const int32_t *w32, const int64_t *runs, Py_ssize_t k, bu_head *h,
                          int64_t *us, int64_t *ue, int64_t thr, bu_gaps *g) {
    Py_ssize_t nh = 0, m = 0;
    for (Py_ssize_t r = 0; r < k; r++)
        if (runs[r] < runs[r + 1]) {
            h[nh].pos = runs[r];
            h[nh].end = runs[r + 1];
            h[nh].t = ts[BU_EV(runs[r])];
            nh++;
        }
    for (Py_ssize_t i = nh / 2; i-- > 0;) bu_sift(h, nh, i);
    int64_t cs = 0, ce = 0;
    Py_ssize_t last = -1, refine = -1;    /* the interval's last-ending op; a gap's next */
    int open = 0;
    g->n = 0;
    while (nh > 0) {
        Py_ssize_t pos = h[0].pos;
        int64_t e = BU_EV(pos);
        int64_t s = ts[e], f = s + dur[e];
        if (!open) { cs = s; ce = f; open = 1; last = pos; }
        else if (s > ce) {
            if (us) { us[m] = cs; ue[m] = ce; }
            m++;
            refine = -1;
            if (thr >= 0 && s - ce >= thr) {
                if (g->gs) {
                    g->gs[g->n] = ce;
                    g->ge[g->n] = s;
                    g->prev[g->n] = last;
                    g->next[g->n] = pos;
                }
                refine = g->n++;
            }
            cs = s; ce = f; last = pos;
        } else {
            if (s == cs && refine >= 0 && g->gs && pos < g->next[refine]) g->next[refine] = pos;
            if (f > ce || (f == ce && pos > last)) { ce = f; last = pos; }
        }
        if (++h[0].pos < h[0].end) h[0].t = ts[BU_EV(h[0].pos)];
        else h[0] = h[--nh];
        if (nh > 0) bu_sift(h, nh, 0);
    }
    if (open) {
        if (us) { us[m] = cs; ue[m] = ce; }
        m++;
    }
    return m;
}

static PyObject *busy_union(PyObject *self, PyObject *args) {
    Py_buffer tsb, durb, evb, rb;
    long long thr = -1;
    int width = 8;
    if (!PyArg_ParseTuple(args, "y*y*y*y*|Li", &tsb, &durb, &evb, &rb, &thr, &width))
        return NULL;
    PyObject *out = NULL, *b[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    bu_head *h = NULL;
    Py_ssize_t n_all = tsb.len / 8, n = (width == 4 || width == 8) ? evb.len / width : 0,
               k = rb.len / 8 - 1;
    int ok = !(tsb.len % 8) && durb.len == tsb.len && (width == 4 || width == 8) &&
             !(evb.len % width) && !(rb.len % 8) && k >= 0;
    const int64_t *ts = tsb.buf, *dur = durb.buf, *runs = rb.buf;
    /* int32 event indices (a device of 20 M ops: 80 MB fewer held through the gap loop) */
    const int64_t *ev = width == 8 ? evb.buf : NULL;
    const int32_t *w32 = width == 4 ? evb.buf : NULL;
    if (ok) {
        ok = runs[0] == 0 && runs[k] == n;
        for (Py_ssize_t r = 0; ok && r < k; r++) ok = runs[r] <= runs[r + 1];
        for (Py_ssize_t i = 0; ok && i < n; i++) ok = BU_EV(i) >= 0 && BU_EV(i) < n_all;
        for (Py_ssize_t r = 0; ok && r < k; r++)
            for (Py_ssize_t i = runs[r] + 1; ok && i < runs[r + 1]; i++)
                ok = ts[BU_EV(i - 1)] <= ts[BU_EV(i)];
    }
#undef BU_EV
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "busy_union: want int64 ts and dur of all events, "
                        "int32 or int64 event indices (width) in runs sorted by start, "
                        "int64 run bounds");
        goto done;
    }
    h = malloc(sizeof(bu_head) * (size_t)(k > 0 ? k : 1));
    if (!h) { PyErr_NoMemory(); goto done; }
    Py_ssize_t m;
    bu_gaps g = {NULL, NULL, NULL, NULL, 0};
    Py_BEGIN_ALLOW_THREADS
    m = bu_pass(ts, dur, ev, w32, runs, k, h, NULL, NULL, thr, &g);
    Py_END_ALLOW_THREADS
    Py_ssize_t sizes[6] = {m, m, g.n, g.n, g.n, g.n};
    for (int i = 0; i < 6; i++)
        if (!(b[i] = new_column(sizes[i] * 8))) goto done;
    {
        int64_t *p[6];
        for (int i = 0; i < 6; i++) p[i] = (int64_t *)COL_DATA(b[i]);
        g.gs = p[2]; g.ge = p[3]; g.prev = p[4]; g.next = p[5];
        Py_BEGIN_ALLOW_THREADS
        bu_pass(ts, dur, ev, w32, runs, k, h, p[0], p[1], thr, &g);
        Py_END_ALLOW_THREADS
    }
    out = thr >= 0 ? PyTuple_Pack(6, b[0], b[1], b[2], b[3], b[4], b[5])
                   : PyTuple_Pack(2, b[0], b[1]);
done:
    for (int i = 0; i < 6; i++) Py_XDECREF(b[i]);
    free(h);
    PyBuffer_Release(&tsb);
    PyBuffer_Release(&durb);
    PyBuffer_Release(&evb);
    PyBuffer_Release(&rb);
    return out;
}

/* Launch -> device-activity links by correlation id (tb_perfdiag.trace.build
 * .correlation_links) where the host side's ids are small and dense, as a counter's are:
 * one table over the ids, the first host call of an id wins (what the sort of the
 * general case gives).  Returns None where the ids are not dense (the caller sorts).
 * Three passes over the id rows and no mask or gather the size of the events: the numpy
 * version made ten (2.9 s on a 40 M-event XSpace). */
static PyObject *corr_links(PyObject *self, PyObject *args) {
    Py_buffer kdb, odb, ixb, vlb;
    unsigned long long host_mask, dev_mask;
    int wide_out = 1, val_w = 8;
    if (!PyArg_ParseTuple(args, "y*y*y*y*KK|pi", &kdb, &odb, &ixb, &vlb, &host_mask, &dev_mask,
                          &wide_out, &val_w))
        return NULL;
    PyObject *out = NULL, *src_b = NULL, *dst_b = NULL;
    /* a host event per id, in the answer's index type (int32 below 2**31 events: 80 MB
       for 20 M ids where int64 was 160, at the read's high-water mark) */
    void *lut = NULL;
    Py_ssize_t n_ev = kdb.len, m = (val_w == 4 || val_w == 8) ? vlb.len / val_w : 0;
    /* event indices as the stat holds them (int32 below 2**31 events): an int64 copy of
     * them was 320 MB at 40 M rows */
    int wide_in = m && ixb.len == m * 8;
    if (odb.len != n_ev || (val_w != 4 && val_w != 8) || vlb.len % val_w ||
        (ixb.len != m * 4 && ixb.len != m * 8) ||
        (!wide_out && n_ev > INT32_MAX)) {
        PyErr_SetString(PyExc_ValueError, "corr_links: want int8 kind and bool on_device per "
                        "event, int32 or int64 event indices and int32 or int64 ids");
        goto done;
    }
    const int8_t *kind = kdb.buf;
    const uint8_t *on_dev = odb.buf;
#define CL_VAL(r) (val_w == 8 ? ((const int64_t *)vlb.buf)[r] : (int64_t)((const int32_t *)vlb.buf)[r])
#define CL_LUT(v) (wide_out ? ((int64_t *)lut)[v] : (int64_t)((int32_t *)lut)[v])
    const int64_t *idx64 = ixb.buf;
    const int32_t *idx32 = ixb.buf;
#define CL_IDX(r) (wide_in ? idx64[r] : (int64_t)idx32[r])
    /* kinds are 0..63: a bit each */
#define CL_KIND_IN(e, mask) (kind[e] >= 0 && kind[e] < 64 && (((mask) >> kind[e]) & 1))
    Py_ssize_t n_host = 0, n_dev = 0;
    int64_t lo = 0, hi = -1;
    for (Py_ssize_t r = 0; r < m; r++) {
        int64_t e = CL_IDX(r);
        if (e < 0 || e >= n_ev) {
            PyErr_SetString(PyExc_ValueError, "corr_links: an event index out of range");
            goto done;
        }
        if (!on_dev[e] && CL_KIND_IN(e, host_mask)) {
            int64_t v = CL_VAL(r);
            if (n_host == 0 || v < lo) lo = v;
            if (n_host == 0 || v > hi) hi = v;
            n_host++;
        } else if (on_dev[e] && CL_KIND_IN(e, dev_mask)) n_dev++;
    }
    if (n_host == 0 || n_dev == 0) {
        out = Py_BuildValue("(y#y#)", "", (Py_ssize_t)0, "", (Py_ssize_t)0);
        goto done;
    }
    if (lo < 0 || hi >= 8 * n_host + 1024) {   /* not a counter's ids: the caller sorts */
        Py_INCREF(Py_None);
        out = Py_None;
        goto done;
    }
    const size_t w = wide_out ? 8 : 4;
    lut = pages_take(w * (size_t)(hi + 1));
    src_b = new_column(n_dev * (Py_ssize_t)w);
    dst_b = new_column(n_dev * (Py_ssize_t)w);
    if (!lut || !src_b || !dst_b) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    {
        char *src = COL_DATA(src_b), *dst = COL_DATA(dst_b);
        Py_ssize_t k = 0;
        Py_BEGIN_ALLOW_THREADS
        memset(lut, 0xff, w * (size_t)(hi + 1));             /* -1 in either width */
        for (Py_ssize_t r = 0; r < m; r++) {
            int64_t e = CL_IDX(r), v = CL_VAL(r);
            if (!on_dev[e] && CL_KIND_IN(e, host_mask) && CL_LUT(v) < 0) {
                if (wide_out) ((int64_t *)lut)[v] = e;
                else ((int32_t *)lut)[v] = (int32_t)e;
            }
        }
        for (Py_ssize_t r = 0; r < m; r++) {
            int64_t e = CL_IDX(r), v = CL_VAL(r);
            if (on_dev[e] && CL_KIND_IN(e, dev_mask) && v >= 0 && v <= hi && CL_LUT(v) >= 0) {
                if (wide_out) {
                    ((int64_t *)src)[k] = CL_LUT(v);
                    ((int64_t *)dst)[k] = e;
                } else {
                    ((int32_t *)src)[k] = (int32_t)CL_LUT(v);
                    ((int32_t *)dst)[k] = (int32_t)e;
                }
                k++;
            }
        }
        Py_END_ALLOW_THREADS
        column_cut(src_b, (size_t)k * w);
        column_cut(dst_b, (size_t)k * w);
    }
#undef CL_KIND_IN
#undef CL_IDX
#undef CL_VAL
#undef CL_LUT
    out = PyTuple_Pack(2, src_b, dst_b);
done:
    Py_XDECREF(src_b);
    Py_XDECREF(dst_b);
    pages_give(lut);
    PyBuffer_Release(&kdb);
    PyBuffer_Release(&odb);
    PyBuffer_Release(&ixb);
    PyBuffer_Release(&vlb);
    return out;
}

/* Values that flow from each event to the events it encloses, in one pass in event order
 * (a parent is an earlier event of its track, so it is final when its children come):
 * numpy walks the nesting one level at a time, a mask and two gathers per level
 * (tb_perfdiag.trace.model.Trace.nested_levels).  `parent_down_index`: an event with no
 * value (< 0) takes its parent's (the innermost annotation around every event).
 * `parent_down_bucket`: an event not yet specific takes its parent's bucket when that
 * bucket is inherited or its own is idle, and is specific from then on
 * (analysis.hostline.event_buckets). */
static int pd_parents_ok(const int32_t *parent, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (parent[i] >= i || parent[i] < -1) return 0;
    return 1;
}

static PyObject *parent_down_index(PyObject *self, PyObject *args) {
    Py_buffer pb, vb;
    if (!PyArg_ParseTuple(args, "y*w*", &pb, &vb)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = pb.len / 4;
    const int32_t *parent = pb.buf;
    int32_t *val = vb.buf;
    int ok = !(pb.len % 4) && vb.len == pb.len;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        ok = pd_parents_ok(parent, n);
        if (ok)
            for (Py_ssize_t i = 0; i < n; i++)
                if (val[i] < 0 && parent[i] >= 0) val[i] = val[parent[i]];
        Py_END_ALLOW_THREADS
    }
    if (!ok) PyErr_SetString(PyExc_ValueError, "parent_down_index: want int32 parents, each "
                             "before its event, and an int32 column as long");
    else { Py_INCREF(Py_None); out = Py_None; }
    PyBuffer_Release(&pb);
    PyBuffer_Release(&vb);
    return out;
}

static PyObject *parent_down_bucket(PyObject *self, PyObject *args) {
    Py_buffer pb, bb, sb, ib;
    int b_idle;
    if (!PyArg_ParseTuple(args, "y*w*w*y*i", &pb, &bb, &sb, &ib, &b_idle)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = pb.len / 4;
    const int32_t *parent = pb.buf;
    int8_t *b = bb.buf;
    uint8_t *specific = sb.buf;
    const uint8_t *inherited = ib.buf;
    int ok = !(pb.len % 4) && bb.len == n && sb.len == n && ib.len == 256;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        ok = pd_parents_ok(parent, n);
        if (ok)
            for (Py_ssize_t i = 0; i < n; i++) {
                int32_t p = parent[i];
                if (p < 0 || specific[i]) continue;
                if (inherited[(uint8_t)b[p]] || b[i] == b_idle) {
                    b[i] = b[p];
                    specific[i] = 1;
                }
            }
        Py_END_ALLOW_THREADS
    }
    if (!ok) PyErr_SetString(PyExc_ValueError, "parent_down_bucket: want int32 parents, each "
                             "before its event, int8 buckets, bool specific, a 256 table");
    else { Py_INCREF(Py_None); out = Py_None; }
    PyBuffer_Release(&pb);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&ib);
    return out;
}

/* From each host event, the host event whose flow entered the work it belongs to
 * (tb_perfdiag.analysis.attribution.entry_of): the flow into its nearest
 * ancestor-or-self, else -2 - (its outermost ancestor) for the caller to look up the
 * thread region that ancestor ran in; -1 past max_depth ancestors.  A walk up the
 * parents per event, with no temporary: the numpy version deduplicated the parents level
 * by level (1.9 s on a 40 M-event trace). */
static PyObject *entry_walk(PyObject *self, PyObject *args) {
    Py_buffer evb, lkb, pab;
    int max_depth;
    if (!PyArg_ParseTuple(args, "y*y*y*i", &evb, &lkb, &pab, &max_depth)) return NULL;
    PyObject *out_b = NULL;
    Py_ssize_t m = evb.len / 8, n = lkb.len / 4;
    if (evb.len % 8 || lkb.len % 4 || pab.len != lkb.len) {
        PyErr_SetString(PyExc_ValueError, "entry_walk: want int64 events, int32 linked and "
                        "int32 parent per event");
        goto done;
    }
    out_b = new_column(m * 8);
    if (!out_b) goto done;
    {
        const int64_t *ev = evb.buf;
        const int32_t *linked = lkb.buf, *parent = pab.buf;
        int64_t *out = (int64_t *)COL_DATA(out_b);
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < m && !bad; r++) {
            int64_t x = ev[r], got = -1;
            for (int d = 0; x >= 0; d++) {
                if (x >= n) { bad = 1; break; }
                if (linked[x] >= 0) { got = linked[x]; break; }
                int32_t p = parent[x];
                if (p < 0) { got = -2 - x; break; }
                if (d >= max_depth) break;
                x = p;
            }
            out[r] = got;
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "entry_walk: an event index out of range");
            Py_CLEAR(out_b);
        }
    }
done:
    PyBuffer_Release(&evb);
    PyBuffer_Release(&lkb);
    PyBuffer_Release(&pab);
    return out_b;
}

/* The order of events by (track, ts, -dur), ties in input order
 * (tb_perfdiag.trace.build.event_order): a counting sort by track (stable), then each
 * track's run checked and only an unsorted run merge-sorted.  Events come line by line
 * in time order, so most runs need no sort at all; numpy sorted every event twice. */
/* event a before event b (a total order: ties by index, so the sort is stable) */
#define eo_less(a, b) eo_before(ts, dur, (a), (b))
static inline int eo_before(const int64_t *ts, const int64_t *dur, int64_t a, int64_t b) {
    if (ts[a] != ts[b]) return ts[a] < ts[b];
    if (dur[a] != dur[b]) return dur[a] > dur[b];
    return a < b;
}

static void eo_sort(const int64_t *ts, const int64_t *dur, int64_t *a, int64_t *tmp,
                    Py_ssize_t n) {
    if (n < 24) {
        for (Py_ssize_t i = 1; i < n; i++) {
            int64_t x = a[i];
            Py_ssize_t j = i;
            while (j > 0 && eo_less(x, a[j - 1])) { a[j] = a[j - 1]; j--; }
            a[j] = x;
        }
        return;
    }
    Py_ssize_t h = n / 2;
    eo_sort(ts, dur, a, tmp, h);
    eo_sort(ts, dur, a + h, tmp, n - h);
    if (!eo_less(a[h], a[h - 1])) return;               /* already in order */
    memcpy(tmp, a, h * sizeof(int64_t));
    Py_ssize_t i = 0, j = h, k = 0;
    while (i < h && j < n) a[k++] = eo_less(a[j], tmp[i]) ? a[j++] : tmp[i++];
    while (i < h) a[k++] = tmp[i++];
}

static PyObject *event_order_c(PyObject *self, PyObject *args) {
    Py_buffer trb, tsb, drb;
    Py_ssize_t n_tracks;
    int none_if_sorted = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*n|p", &trb, &tsb, &drb, &n_tracks, &none_if_sorted))
        return NULL;
    PyObject *out_b = NULL;
    int64_t *start = NULL, *tmp = NULL;
    Py_ssize_t n = tsb.len / 8;
    if (tsb.len % 8 || drb.len != tsb.len || trb.len != n * 4 || n_tracks < 0) {
        PyErr_SetString(PyExc_ValueError, "event_order: want int32 track, int64 ts and dur");
        goto done;
    }
    const int32_t *track = trb.buf;
    if (none_if_sorted) {
        /* events already in the model's order (a reader that emits line after line, each
           in time order): None, and no permutation of them all (305 MB at 40 M events,
           at the read's high-water mark) */
        const int64_t *ts0 = tsb.buf, *dur0 = drb.buf;
        int sorted = 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && sorted; i++) {
            if (track[i] < 0 || track[i] >= n_tracks) sorted = 0;
            else if (i && (track[i] < track[i - 1] ||
                           (track[i] == track[i - 1] && eo_before(ts0, dur0, i, i - 1))))
                sorted = 0;
        }
        Py_END_ALLOW_THREADS
        if (sorted) {
            out_b = Py_None;
            Py_INCREF(out_b);
            goto done;
        }
    }
    start = calloc((size_t)n_tracks + 1, sizeof(int64_t));
    out_b = new_column(n * 8);
    if (!start || !out_b) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int bad = 0, unsorted = 0;
    int64_t *o = (int64_t *)COL_DATA(out_b);
    const int64_t *ts = tsb.buf, *dur = drb.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (track[i] < 0 || track[i] >= n_tracks) { bad = 1; break; }
        start[track[i] + 1]++;
    }
    if (!bad) {
        for (Py_ssize_t t = 0; t < n_tracks; t++) start[t + 1] += start[t];
        for (Py_ssize_t i = 0; i < n; i++) o[start[track[i]]++] = i;   /* start: run ends */
        Py_ssize_t lo = 0, longest = 0;
        for (Py_ssize_t t = 0; t < n_tracks; t++) {
            Py_ssize_t hi = start[t];
            for (Py_ssize_t i = lo + 1; i < hi; i++)
                if (eo_less(o[i], o[i - 1])) {
                    if (hi - lo > longest) longest = hi - lo;
                    unsorted = 1;
                    break;
                }
            lo = hi;
        }
        if (unsorted) {
            tmp = pages_take(sizeof(int64_t) * (size_t)(longest / 2 + 1));
            if (!tmp) bad = 2;
            lo = 0;
            for (Py_ssize_t t = 0; t < n_tracks && tmp; t++) {
                Py_ssize_t hi = start[t];
                for (Py_ssize_t i = lo + 1; i < hi; i++)
                    if (eo_less(o[i], o[i - 1])) {
                        eo_sort(ts, dur, o + lo, tmp, hi - lo);
                        break;
                    }
                lo = hi;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad == 1) PyErr_SetString(PyExc_ValueError, "event_order: a track out of range");
    else if (bad == 2) PyErr_NoMemory();
    if (bad) Py_CLEAR(out_b);
#undef eo_less
done:
    free(start);
    pages_give(tmp);
    PyBuffer_Release(&trb);
    PyBuffer_Release(&tsb);
    PyBuffer_Release(&drb);
    return out_b;
}

/* The boundaries of a track's timeline in order: its starts merged with its ends, the
 * ends taken from a min-heap of the events already started (an end comes before every
 * later start unless equal to it, so only started events' ends can be next).  A sorted
 * column of all ends was 160 MB at 20 M events, at the analysis' peak; the heap holds
 * the events open at once. */
typedef struct { const int64_t *ts, *dur; Py_ssize_t n, i, hn; int64_t *heap; } hs_merge;

static void hs_push(hs_merge *g, int64_t v) {
    Py_ssize_t c = g->hn++;
    while (c > 0) {
        Py_ssize_t p = (c - 1) / 2;
        if (g->heap[p] <= v) break;
        g->heap[c] = g->heap[p];
        c = p;
    }
    g->heap[c] = v;
}

static int64_t hs_pop(hs_merge *g) {
    int64_t top = g->heap[0], v = g->heap[--g->hn];
    Py_ssize_t c = 0;
    for (;;) {
        Py_ssize_t l = 2 * c + 1;
        if (l >= g->hn) break;
        if (l + 1 < g->hn && g->heap[l + 1] < g->heap[l]) l++;
        if (v <= g->heap[l]) break;
        g->heap[c] = g->heap[l];
        c = l;
    }
    if (g->hn) g->heap[c] = v;
    return top;
}

/* the next boundary (a start before an equal end), or 0 when there is none */
static int hs_next(hs_merge *g, int64_t *t) {
    if (g->i < g->n && (g->hn == 0 || g->ts[g->i] <= g->heap[0])) {
        *t = g->ts[g->i];
        hs_push(g, g->ts[g->i] + g->dur[g->i]);
        g->i++;
        return 1;
    }
    if (g->hn == 0) return 0;
    *t = hs_pop(g);
    return 1;
}

/* One host thread's timeline (tb_perfdiag.analysis.hostline): the boundaries are the
 * distinct starts and ends of its events; in each segment the innermost op is the first
 * ancestor-or-self of the last event started by then that has not ended.  Its bucket is
 * the op's (idle where none), an idle marker stands for its parent, and per bucket the
 * segments in it with their cumulative time.  One pass with no copy of the events: the
 * numpy version held ten columns of twice the thread's events at once (the largest
 * transient of a 40 M-event trace's analysis). */
static PyObject *host_segments(PyObject *self, PyObject *args) {
    Py_buffer tsb, durb, parb, bkb, kdb;
    long long lo;
    int b_idle, k_idle, n_b, thin_every;
    Py_ssize_t thin_above;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*Liiini", &tsb, &durb, &parb, &bkb, &kdb,
                          &lo, &b_idle, &k_idle, &n_b, &thin_above, &thin_every))
        return NULL;
    PyObject *out = NULL, *times_b = NULL, *inner_b = NULL, *bucket_b = NULL, *lists = NULL,
             *totals = NULL;
    int64_t *count = NULL, **cum = NULL, *heap = NULL, *run = NULL, *every = NULL;
    int32_t **seg = NULL;
    Py_ssize_t n = tsb.len / 8;
    if (tsb.len % 8 || durb.len != tsb.len || parb.len != n * 4 ||
        bkb.len != n || kdb.len != n || n_b <= 0 || b_idle < 0 || b_idle >= n_b ||
        thin_every < 1) {
        PyErr_SetString(PyExc_ValueError, "host_segments: want int64 ts (sorted) and dur, "
                        "int32 parent, int8 bucket, int8 kind of one track");
        goto done;
    }
    /* only as deep as the most events open at once is ever touched */
    heap = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!heap) { PyErr_NoMemory(); goto done; }
    {
        const int64_t *ts = tsb.buf, *dur = durb.buf;
        const int32_t *par = parb.buf;
        const int8_t *bk = bkb.buf, *kd = kdb.buf;
        for (Py_ssize_t q = 1; q < n; q++)
            if (ts[q] < ts[q - 1]) {
                PyErr_SetString(PyExc_ValueError, "host_segments: starts out of order");
                goto done;
            }
        /* the distinct boundaries, counted */
        Py_ssize_t m = 0;
        {
            hs_merge g = {ts, dur, n, 0, 0, heap};
            int64_t t, last = 0;
            while (hs_next(&g, &t))
                if (m == 0 || t != last) { m++; last = t; }
        }
        times_b = new_column(m * 8);
        inner_b = new_column(m * 4);
        bucket_b = new_column(m);
        count = calloc((size_t)n_b, sizeof(int64_t));
        seg = calloc((size_t)n_b, sizeof(int32_t *));
        cum = calloc((size_t)n_b, sizeof(int64_t *));
        run = calloc((size_t)n_b, sizeof(int64_t));
        every = calloc((size_t)n_b, sizeof(int64_t));
        if (!times_b || !inner_b || !bucket_b || !count || !seg || !cum || !run || !every) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto done;
        }
        int64_t *times = (int64_t *)COL_DATA(times_b);
        int32_t *inner = (int32_t *)COL_DATA(inner_b);
        int8_t *bucket = (int8_t *)COL_DATA(bucket_b);
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t k = 0, cur = -1;
        hs_merge g = {ts, dur, n, 0, 0, heap};
        int64_t t;
        while (hs_next(&g, &t)) {
            if (k && t == times[k - 1]) continue;
            times[k] = t;
            while (cur + 1 < n && ts[cur + 1] <= t) cur++;     /* the last started by t */
            Py_ssize_t x = cur;
            while (x >= 0 && ts[x] + dur[x] <= t) {
                int64_t p = (int64_t)par[x] - lo;               /* parents share the track */
                x = (p >= 0 && p < x) ? (Py_ssize_t)p : -1;
            }
            int b = x >= 0 ? bk[x] : b_idle;
            if (b < 0 || b >= n_b) { bad = 1; b = b_idle; }
            int64_t in = (x >= 0 && b != b_idle) ? (int64_t)x + lo : -1;
            if (in >= 0 && kd[x] == k_idle) in = par[x];        /* a nested idle marker */
            inner[k] = (int32_t)in;
            bucket[k] = (int8_t)b;
            count[b]++;
            k++;
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "host_segments: a bucket out of range");
            goto done;
        }
        lists = PyList_New(2 * n_b);
        totals = PyList_New(n_b);
        if (!lists || !totals) goto done;
        /* the bucket with the most segments (the first such) gets no columns: HostLine
           derives its time from the others' (its columns were made only to be dropped:
           half the segments of a launch loop, 240 MB on a 20 M-event thread) */
        int implicit = 0;
        for (int b = 1; b < n_b; b++) if (count[b] > count[implicit]) implicit = b;
        for (int b = 0; b < n_b; b++) {          /* seg[b], cum[b]: where bucket b writes */
            if (b == implicit) {
                Py_INCREF(Py_None);
                PyList_SET_ITEM(lists, 2 * b, Py_None);
                Py_INCREF(Py_None);
                PyList_SET_ITEM(lists, 2 * b + 1, Py_None);
                continue;
            }
            /* a bucket of more running times than thin_above keeps every thin_every-th
               (the time before its segments 0, E, 2E…): the whole column was made only to
               be thinned, 150 MB of the analysis' peak on a 20 M-event thread */
            every[b] = count[b] + 1 > thin_above ? thin_every : 1;
            PyObject *sb_ = new_column(count[b] * 4);
            PyObject *cb_ = new_column((count[b] / every[b] + 1) * 8);
            if (!sb_ || !cb_) { Py_XDECREF(sb_); Py_XDECREF(cb_); goto done; }
            PyList_SET_ITEM(lists, 2 * b, sb_);
            PyList_SET_ITEM(lists, 2 * b + 1, cb_);
            seg[b] = (int32_t *)COL_DATA(sb_);
            cum[b] = (int64_t *)COL_DATA(cb_);
            cum[b][0] = 0;
        }
        Py_BEGIN_ALLOW_THREADS
        memset(count, 0, sizeof(int64_t) * (size_t)n_b);     /* now: segments written */
        for (Py_ssize_t q = 0; q < m; q++) {
            int b = bucket[q];
            if (b == implicit) continue;
            int64_t len = q + 1 < m ? times[q + 1] - times[q] : 0;
            seg[b][count[b]++] = (int32_t)q;
            run[b] += len;
            if (count[b] % every[b] == 0) cum[b][count[b] / every[b]] = run[b];
        }
        Py_END_ALLOW_THREADS
        for (int b = 0; b < n_b; b++) {
            PyObject *v = PyLong_FromLongLong(run[b]);
            if (!v) goto done;
            PyList_SET_ITEM(totals, b, v);
        }
        out = Py_BuildValue("(OOOOO)", times_b, inner_b, bucket_b, lists, totals);
    }
done:
    Py_XDECREF(times_b);
    Py_XDECREF(inner_b);
    Py_XDECREF(bucket_b);
    Py_XDECREF(lists);
    Py_XDECREF(totals);
    free(count);
    free(seg);
    free(cum);
    free(run);
    free(every);
    free(heap);
    PyBuffer_Release(&tsb);
    PyBuffer_Release(&durb);
    PyBuffer_Release(&parb);
    PyBuffer_Release(&bkb);
    PyBuffer_Release(&kdb);
    return out;
}

/* Count and time of every op name (tb_perfdiag.analysis.ops.op_table), host ops and
 * device ops apart, each in three cells: outside every step, in a step that is not
 * typical, in a typical step.  Two passes over the events (which names occur, then the
 * sums), exact int64 times, and no temporary the size of the events: the numpy version
 * made a dozen per chunk and a bincount as long as all names per chunk. */
static PyObject *op_counts(PyObject *self, PyObject *args) {
    Py_buffer nmb, kdb, trb, drb, stb, tyb, odb, dkb, nob;
    Py_ssize_t n_str;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*n", &nmb, &kdb, &trb, &drb, &stb, &tyb,
                          &odb, &dkb, &nob, &n_str))
        return NULL;
    PyObject *out = NULL, *ids_b[2] = {NULL, NULL}, *cnt_b[2] = {NULL, NULL},
             *tim_b[2] = {NULL, NULL}, *kind_b[2] = {NULL, NULL};
    int32_t *dense = NULL;
    Py_ssize_t n = nmb.len / 4, n_tr = odb.len, n_typ = tyb.len;
    int track_w = n ? (int)(trb.len / n) : 4;
    if (nmb.len % 4 || kdb.len != n || (n ? trb.len % n || !int_width_ok(track_w) : trb.len != 0) ||
        drb.len != n * 8 ||
        (n ? stb.len % n || !int_width_ok((int)(stb.len / n)) : stb.len != 0) || dkb.len != 256 ||
        nob.len != 256 || n_str < 0) {
        PyErr_SetString(PyExc_ValueError, "op_counts: want int32 name, int8 kind, int8/16/32/64 track, "
                        "int64 dur, int8/16/32/64 step, bool typical, bool per track, two 256 "
                        "tables");
        goto done;
    }
    const int32_t *name = nmb.buf;
    const void *track = trb.buf;
    const void *step = stb.buf;
    int step_w = n ? (int)(stb.len / n) : 4;
    const uint8_t *kind = kdb.buf, *typical = tyb.buf, *on_dev = odb.buf, *dev_kind = dkb.buf,
                  *not_op = nob.buf;
    const int64_t *dur = drb.buf;
    dense = malloc(sizeof(int32_t) * (size_t)(2 * n_str + 1));
    if (!dense) { PyErr_NoMemory(); goto done; }
    int bad = 0;
    Py_ssize_t k[2] = {0, 0};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < 2 * n_str; i++) dense[i] = -1;
    /* an event's side: 0 a host op, 1 a device op, -1 neither */
#define OPC_SIDE(i) (int_at(track, track_w, i) < 0 || int_at(track, track_w, i) >= n_tr ? -2 : \
                     on_dev[int_at(track, track_w, i)] ? \
                     (dev_kind[kind[i]] ? 1 : -1) : (not_op[kind[i]] ? -1 : 0))
    for (Py_ssize_t i = 0; i < n; i++) {
        int sd = OPC_SIDE(i);
        if (sd == -2 || name[i] < 0 || name[i] >= n_str) { bad = 1; break; }
        if (sd >= 0) dense[sd * n_str + name[i]] = 0;
    }
    if (!bad)
        for (int sd = 0; sd < 2; sd++)        /* numbered in name order, as flatnonzero does */
            for (Py_ssize_t x = 0; x < n_str; x++)
                if (dense[sd * n_str + x] == 0) dense[sd * n_str + x] = (int32_t)k[sd]++ + 1;
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "op_counts: a track or name out of range");
        goto done;
    }
    for (int sd = 0; sd < 2; sd++) {
        ids_b[sd] = new_column(k[sd] * 4);
        cnt_b[sd] = new_column(3 * k[sd] * 8);
        tim_b[sd] = new_column(3 * k[sd] * 8);
        kind_b[sd] = new_column(k[sd]);
        if (!ids_b[sd] || !cnt_b[sd] || !tim_b[sd] || !kind_b[sd]) goto done;
    }
    {
        int32_t *ids[2];
        int64_t *cnt[2], *tim[2];
        int8_t *kd[2];
        for (int sd = 0; sd < 2; sd++) {
            ids[sd] = (int32_t *)COL_DATA(ids_b[sd]);
            cnt[sd] = (int64_t *)COL_DATA(cnt_b[sd]);
            tim[sd] = (int64_t *)COL_DATA(tim_b[sd]);
            kd[sd] = (int8_t *)COL_DATA(kind_b[sd]);
            memset(cnt[sd], 0, 3 * k[sd] * 8);
            memset(tim[sd], 0, 3 * k[sd] * 8);
            memset(kd[sd], 0, k[sd]);
        }
        Py_BEGIN_ALLOW_THREADS
        for (int sd = 0; sd < 2; sd++)
            for (Py_ssize_t x = 0; x < n_str; x++)
                if (dense[sd * n_str + x] > 0) ids[sd][dense[sd * n_str + x] - 1] = (int32_t)x;
        for (Py_ssize_t i = 0; i < n; i++) {
            int sd = OPC_SIDE(i);
            if (sd < 0) continue;
            int64_t st = int_at(step, step_w, i);
            int cell = st < 0 ? 0 : (n_typ == 0 || st >= n_typ) ? 1 : typical[st] ? 2 : 1;
            Py_ssize_t c = 3 * (Py_ssize_t)(dense[sd * n_str + name[i]] - 1) + cell;
            cnt[sd][c]++;
            tim[sd][c] += dur[i];
            kd[sd][c / 3] = (int8_t)kind[i];
        }
        Py_END_ALLOW_THREADS
    }
#undef OPC_SIDE
    out = Py_BuildValue("((OOOO)(OOOO))", ids_b[0], cnt_b[0], tim_b[0], kind_b[0],
                        ids_b[1], cnt_b[1], tim_b[1], kind_b[1]);
done:
    for (int sd = 0; sd < 2; sd++) {
        Py_XDECREF(ids_b[sd]);
        Py_XDECREF(cnt_b[sd]);
        Py_XDECREF(tim_b[sd]);
        Py_XDECREF(kind_b[sd]);
    }
    free(dense);
    PyBuffer_Release(&nmb);
    PyBuffer_Release(&kdb);
    PyBuffer_Release(&trb);
    PyBuffer_Release(&drb);
    PyBuffer_Release(&stb);
    PyBuffer_Release(&tyb);
    PyBuffer_Release(&odb);
    PyBuffer_Release(&dkb);
    PyBuffer_Release(&nob);
    return out;
}

/* Device-op cells (tb_perfdiag.analysis.device_ops).  Every op's code is
 * step * n_dl + dl, dl = device * n_lab + group, in [0, n_codes).  Each code used is a
 * cell with its op count, summed duration and longest op (the earliest of equals).  The
 * same pass over the ops sums the rows (per dl: count, time, longest op, short ops and
 * their time, and count and time over the typical steps) and short ops per
 * (step, device).  Of each
 * (step, device) only the `keep` cells with the most time come back (ties: the row with
 * more time overall, then the lower group: the order the step view lists them in), in
 * increasing code order; the others are summed per (step, device) as the rest.  On an
 * XLA trace every HLO op of every step is a cell of its own, so the cells are as many as
 * the ops: kept whole they were most of the table's memory. */

enum { OC_STEP, OC_DL, OC_POS, OC_CNT, OC_TIM, OC_RCNT, OC_RTIM, OC_RPOS, OC_RSC, OC_RST,
       OC_RTC, OC_RTT, OC_SDSC, OC_SDST, OC_SDRG, OC_SDRC, OC_SDRT, OC_N };

/* the cell code of op i: (launching step, n_steps for none) × n_dl + device × n_lab +
 * group, step-major so that a step's cells lie together */
#define OC_STEP_OF(i) ((Py_ssize_t)(int_at(stp, stp_w, i) < 0 ? n_steps : int_at(stp, stp_w, i)))
#define OC_CODE(i) (OC_STEP_OF(i) * n_dl + (Py_ssize_t)(dvc ? dvc[i] : 0) * n_lab + lab[i])

/* a row's sums, together: the pass over the ops meets the rows in any order */
typedef struct { int64_t cnt, tim, pos, max, tc, tt; } oc_row;

/* a group of a (step, device) with the keys of the step view's order, held by value so
 * that comparing does not chase the cell tables */
typedef struct { int64_t tim, rtim; int32_t j; } oc_key;

/* group a comes before group b in the step view */
static inline int oc_before(const oc_key *a, const oc_key *b) {
    if (a->tim != b->tim) return a->tim > b->tim;
    if (a->rtim != b->rtim) return a->rtim > b->rtim;
    return a->j < b->j;
}

/* a heap of groups whose root is the last of them in the step view (once full) */
static void oc_sift(oc_key *h, Py_ssize_t n, Py_ssize_t i) {
    oc_key x = h[i];
    for (;;) {
        Py_ssize_t l = 2 * i + 1, m = l;
        if (l >= n) break;
        if (l + 1 < n && oc_before(&h[l], &h[l + 1])) m = l + 1;
        if (!oc_before(&x, &h[m])) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
}

/* x offered to the heap h of m (of at most cap) groups that keeps the first ones */
static inline void oc_offer(oc_key *h, Py_ssize_t *m, Py_ssize_t cap, oc_key x) {
    if (*m < cap) {
        h[(*m)++] = x;
        if (*m == cap)
            for (Py_ssize_t i = cap / 2; i-- > 0;) oc_sift(h, cap, i);
    } else if (oc_before(&x, &h[0])) {
        h[0] = x;
        oc_sift(h, cap, 0);
    }
}

/* a code's cell: its rank among the codes in use, or -1 where none is */
static inline int32_t oc_cell(const uint64_t *bits, const int32_t *wrank, Py_ssize_t c) {
    uint64_t w = bits[c >> 6], m = (uint64_t)1 << (c & 63);
    return (w & m) ? wrank[c >> 6] + __builtin_popcountll(w & (m - 1)) : -1;
}

static PyObject *op_cells(PyObject *self, PyObject *args) {
    Py_buffer lb, sb, vb, db, fb, tb;
    Py_ssize_t n_steps, n_dev, n_lab, keep;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*nnnn", &lb, &sb, &vb, &db, &fb, &tb, &n_steps,
                          &n_dev, &n_lab, &keep))
        return NULL;
    PyObject *out = NULL, *bufs[OC_N] = {NULL};
    int32_t *wrank = NULL, *ccnt = NULL, *cpos = NULL;
    uint64_t *bits = NULL;
    oc_key *heap = NULL;
    int64_t *ctim = NULL;
    oc_row *row = NULL;
    unsigned char *kept = NULL;
    Py_ssize_t n = lb.len / 4, n_cells = 0, n_kept = 0;
    Py_ssize_t n_dl = n_dev * n_lab, n_codes = (n_steps + 1) * n_dl;
    Py_ssize_t n_sd = (n_steps + 1) * n_dev;
    const int32_t *lab = lb.buf, *dvc = vb.len ? vb.buf : NULL;
    const void *stp = sb.buf;
    int stp_w = n ? (int)(sb.len / n) : 4;
    const unsigned char *typ = tb.len ? tb.buf : NULL;
    if (lb.len % 4 || (n ? sb.len % n || !int_width_ok(stp_w) : sb.len != 0) ||
            (vb.len && vb.len != lb.len) || db.len != 8 * n ||
            fb.len != n || n_steps < 0 || n_dev <= 0 || n_lab <= 0 || n >= INT32_MAX ||
            n_codes / n_dl != n_steps + 1 || (tb.len && tb.len != n_steps) || keep < 0) {
        PyErr_SetString(PyExc_ValueError, "op_cells: want int32 label, int8/16/32/64 step, int32 "
                        "device (or none), int64 dur, bool short of one length, bool typical per step "
                        "(or none), keep >= 0");
        goto done;
    }
    if (keep == 0 || keep > n_lab) keep = n_lab;          /* 0: every cell */
    /* the codes in use as a bitmap with each word's rank: a code's cell is its rank among
     * them (a table of an int32 per code was 320 MB at 20 M ops) */
    Py_ssize_t n_words = n_codes / 64 + 1;
    bits = pages_take_zeroed(sizeof(uint64_t) * (size_t)n_words);
    wrank = pages_take(sizeof(int32_t) * (size_t)n_words);
    if (!bits || !wrank) { PyErr_NoMemory(); goto done; }
    {
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t d = dvc ? dvc[i] : 0;
            int64_t st = int_at(stp, stp_w, i);
            if (lab[i] < 0 || lab[i] >= n_lab || st < -1 || st > n_steps || d < 0 || d >= n_dev) {
                bad = 1;
                break;
            }
            Py_ssize_t c = OC_CODE(i);
            bits[c >> 6] |= (uint64_t)1 << (c & 63);
        }
        if (!bad)
            for (Py_ssize_t w = 0; w < n_words; w++) {
                wrank[w] = (int32_t)n_cells;
                n_cells += __builtin_popcountll(bits[w]);
            }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "op_cells: a label, step or device out of range");
            goto done;
        }
    }
    /* every cell's figures are scratch: only the kept cells come back */
    ccnt = pages_take_zeroed(sizeof(int32_t) * (size_t)(n_cells + 1));
    cpos = pages_take(sizeof(int32_t) * (size_t)(n_cells + 1));
    ctim = pages_take_zeroed(sizeof(int64_t) * (size_t)(n_cells + 1));
    row = calloc((size_t)(n_dl + 1), sizeof(oc_row));
    kept = pages_take((size_t)(n_cells + 1));
    heap = malloc(sizeof(oc_key) * (size_t)(2 * keep + 64));
    for (int k = OC_RCNT; k <= OC_RTT; k++)
        bufs[k] = new_column(n_dl * 8);
    for (int k = OC_SDSC; k <= OC_SDRT; k++)
        bufs[k] = new_column(n_sd * 8);
    if (!ccnt || !cpos || !ctim || !row || !kept || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = OC_RCNT; k < OC_N; k++)
        if (!bufs[k]) goto done;
#define OC(k, T) ((T *)COL_DATA(bufs[k]))
    {
        const int64_t *dur = db.buf;
        const unsigned char *shrt = fb.buf;
        int64_t *rcnt = OC(OC_RCNT, int64_t), *rtim = OC(OC_RTIM, int64_t),
                *rpos = OC(OC_RPOS, int64_t), *rsc = OC(OC_RSC, int64_t),
                *rst = OC(OC_RST, int64_t), *rtc = OC(OC_RTC, int64_t),
                *rtt = OC(OC_RTT, int64_t), *sdsc = OC(OC_SDSC, int64_t),
                *sdst = OC(OC_SDST, int64_t), *sdrg = OC(OC_SDRG, int64_t),
                *sdrc = OC(OC_SDRC, int64_t), *sdrt = OC(OC_SDRT, int64_t);
        Py_BEGIN_ALLOW_THREADS
        memset(rsc, 0, n_dl * 8);
        memset(rst, 0, n_dl * 8);
        memset(sdsc, 0, n_sd * 8);
        memset(sdst, 0, n_sd * 8);
        memset(sdrg, 0, n_sd * 8);
        memset(sdrc, 0, n_sd * 8);
        memset(sdrt, 0, n_sd * 8);
        /* ops in increasing position: a strict > keeps the earliest longest op */
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t c = oc_cell(bits, wrank, OC_CODE(i));
            int32_t dv = dvc ? dvc[i] : 0, dl = dv * (int32_t)n_lab + lab[i];
            Py_ssize_t s = OC_STEP_OF(i);
            int64_t d = dur[i];
            if (!ccnt[c]++ || d > dur[cpos[c]]) cpos[c] = (int32_t)i;
            ctim[c] += d;
            oc_row *r = row + dl;
            if (!r->cnt++ || d > r->max) {
                r->pos = i;
                r->max = d;
            }
            r->tim += d;
            if (typ && s < n_steps && typ[s]) {
                r->tc++;
                r->tt += d;
            }
            if (shrt[i]) {
                rsc[dl]++;
                rst[dl] += d;
                sdsc[s * n_dev + dv]++;
                sdst[s * n_dev + dv] += d;
            }
        }
        for (Py_ssize_t dl = 0; dl < n_dl; dl++) {
            const oc_row *r = row + dl;
            rcnt[dl] = r->cnt;
            rtim[dl] = r->tim;
            rpos[dl] = r->cnt ? r->pos : -1;
            rtc[dl] = r->tc;
            rtt[dl] = r->tt;
        }
        /* per (step, device): the `keep` groups first in the step view, the rest summed.
         * A segment of many groups is first cut to those of at least the time of the
         * r-th of every stride-th group, r chosen so that about 1.25 keep pass: sifting
         * the heap over them all costs most of the pass. */
        for (Py_ssize_t sd = 0; sd < n_sd; sd++) {
            const Py_ssize_t seg = sd * n_lab;     /* the codes of this (step, device) */
            const int64_t *rt = rtim + (sd % n_dev) * n_lab;
            Py_ssize_t m = 0, used = 0;
            for (Py_ssize_t j = 0; j < n_lab; j++) used += oc_cell(bits, wrank, seg + j) >= 0;
            if (used <= keep) {
                for (Py_ssize_t j = 0; j < n_lab; j++)
                    if (oc_cell(bits, wrank, seg + j) >= 0) kept[oc_cell(bits, wrank, seg + j)] = 1;
                n_kept += used;
                continue;
            }
            int64_t floor_t = INT64_MIN, all_c = 0, all_t = 0;
            Py_ssize_t stride = used / (4 * keep);
            if (stride >= 2) {
                Py_ssize_t r = 5 * keep / (4 * stride) + 32, skip = 0;
                if (r > (used + stride - 1) / stride) r = (used + stride - 1) / stride;
                for (Py_ssize_t j = 0; j < n_lab; j++) {
                    int32_t k = oc_cell(bits, wrank, seg + j);
                    if (k < 0 || skip-- > 0) continue;
                    skip = stride - 1;
                    oc_offer(heap, &m, r, (oc_key){ctim[k], rt[j], (int32_t)j});
                }
                if (m == r) floor_t = heap[0].tim;
                m = 0;
            }
            Py_ssize_t passed = 0;
            for (Py_ssize_t j = 0; j < n_lab; j++) {
                int32_t k = oc_cell(bits, wrank, seg + j);
                if (k < 0) continue;
                kept[k] = 0;
                all_c += ccnt[k];
                all_t += ctim[k];
                if (ctim[k] >= floor_t) {
                    passed++;
                    oc_offer(heap, &m, keep, (oc_key){ctim[k], rt[j], (int32_t)j});
                }
            }
            if (passed < keep) {                  /* the sample misled: every group */
                m = 0;
                for (Py_ssize_t j = 0; j < n_lab; j++)
                    if (oc_cell(bits, wrank, seg + j) >= 0)
                        oc_offer(heap, &m, keep, (oc_key){ctim[oc_cell(bits, wrank, seg + j)], rt[j], (int32_t)j});
            }
            for (Py_ssize_t h = 0; h < m; h++) {
                int32_t k = oc_cell(bits, wrank, seg + heap[h].j);
                kept[k] = 1;
                all_c -= ccnt[k];
                all_t -= ctim[k];
            }
            n_kept += m;
            sdrg[sd] = used - m;
            sdrc[sd] = all_c;
            sdrt[sd] = all_t;
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = OC_STEP; k <= OC_POS; k++)
        bufs[k] = new_column(n_kept * 4);
    for (int k = OC_CNT; k <= OC_TIM; k++)
        bufs[k] = new_column(n_kept * 8);
    for (int k = OC_STEP; k <= OC_TIM; k++)
        if (!bufs[k]) goto done;
    {
        int32_t *cst = OC(OC_STEP, int32_t), *cdl = OC(OC_DL, int32_t),
                *pos = OC(OC_POS, int32_t);
        int64_t *cnt = OC(OC_CNT, int64_t), *tim = OC(OC_TIM, int64_t);
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t o = 0;
        /* the codes in use in order, a word's set bits at a time: cell k is the k-th */
        int32_t k = 0;
        for (Py_ssize_t w = 0; w < n_words; w++)
            for (uint64_t x = bits[w]; x; x &= x - 1, k++) {
                if (!kept[k]) continue;
                Py_ssize_t c = w * 64 + __builtin_ctzll(x);
                cst[o] = (int32_t)(c / n_dl);
                cdl[o] = (int32_t)(c % n_dl);
                pos[o] = cpos[k];
                cnt[o] = ccnt[k];
                tim[o++] = ctim[k];
            }
        Py_END_ALLOW_THREADS
    }
#undef OC
    out = PyTuple_New(OC_N);
    if (out)
        for (int k = 0; k < OC_N; k++) { PyTuple_SET_ITEM(out, k, bufs[k]); bufs[k] = NULL; }
done:
    for (int k = 0; k < OC_N; k++) Py_XDECREF(bufs[k]);
    pages_give(bits);
    pages_give(wrank);
    pages_give(ccnt);
    pages_give(cpos);
    pages_give(ctim);
    free(row);
    pages_give(kept);
    free(heap);
    PyBuffer_Release(&lb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&fb);
    PyBuffer_Release(&tb);
    return out;
}

/* np.searchsorted(a, v, side) over a sorted column a.  Sorted keys: one merge of the two
 * columns (numpy searches each key alone, and 20 M keys in a 20 M-row column miss the
 * cache at every step: 1 s on a 40 M-event trace).  Other keys: a binary search each
 * whose step is a conditional move, not a branch (numpy's branches mispredict on keys
 * in no order: 57 ms for a TPU trace's 1.8 M host events in its step windows).  None
 * where the column is not sorted (the caller then asks numpy). */
#define SS_SEARCH(T)                                                                    \
    do {                                                                                \
        const T *a = ab.buf, *v = vb.buf;                                               \
        for (Py_ssize_t i = 1; i < n && sorted; i++) if (a[i] < a[i - 1]) sorted = 0;   \
        if (!sorted) break;                                                             \
        int keys_sorted = 1;                                                            \
        for (Py_ssize_t j = 1; j < m && keys_sorted; j++)                               \
            if (v[j] < v[j - 1]) keys_sorted = 0;                                       \
        if (keys_sorted) {                                                              \
            Py_ssize_t i = 0;                                                           \
            if (right)                                                                  \
                for (Py_ssize_t j = 0; j < m; j++) {                                    \
                    while (i < n && a[i] <= v[j]) i++;                                  \
                    o[j] = i;                                                           \
                }                                                                       \
            else                                                                        \
                for (Py_ssize_t j = 0; j < m; j++) {                                    \
                    while (i < n && a[i] < v[j]) i++;                                   \
                    o[j] = i;                                                           \
                }                                                                       \
        } else {                                                                        \
            Py_ssize_t prev = 0;                                                        \
            for (Py_ssize_t j = 0; j < m; j++) {                                        \
                const T x = v[j];                                                       \
                SS_FIND(T, a, n, x, j && x >= v[j - 1], prev);                          \
                o[j] = prev;                                                            \
            }                                                                           \
        }                                                                               \
    } while (0)

/* The answer for key x: how many of the sorted a[0..n) are below it (SS_BELOW), left in
 * prev.  Where `on` (x is not below the last key, whose answer prev holds) it gallops on
 * from there: keys mostly in order take one or two steps; else the whole column.  Then
 * it halves by conditional moves. */
#define SS_FIND(T, a, n, x, on, prev)                                                   \
    do {                                                                                \
        Py_ssize_t lo_ = 0, len_ = (n);                                                 \
        if (on) {                                                                       \
            Py_ssize_t step_ = 1;                                                       \
            lo_ = (prev);                                                               \
            while (lo_ + step_ <= (n) && SS_BELOW((a)[lo_ + step_ - 1], (x))) {         \
                lo_ += step_;                                                           \
                step_ <<= 1;                                                            \
            }                                                                           \
            len_ = step_ < (n) - lo_ ? step_ : (n) - lo_;                               \
        }                                                                               \
        /* the answer is in [lo_, lo_ + len_] */                                        \
        const T *base_ = (a) + lo_;                                                     \
        if (len_ == 0) {                                                                \
            (prev) = lo_;                                                               \
        } else {                                                                        \
            while (len_ > 1) {                                                          \
                Py_ssize_t half_ = len_ >> 1;                                           \
                base_ = SS_BELOW(base_[half_], (x)) ? base_ + half_ : base_;            \
                len_ -= half_;                                                          \
            }                                                                           \
            (prev) = (base_ - (a)) + SS_BELOW(*base_, (x));                             \
        }                                                                               \
    } while (0)

#define SS_BELOW(y, x) (right ? (y) <= (x) : (y) < (x))

static PyObject *sorted_search(PyObject *self, PyObject *args) {
    Py_buffer ab, vb;
    int width, right;
    if (!PyArg_ParseTuple(args, "y*y*ip", &ab, &vb, &width, &right)) return NULL;
    PyObject *out_b = NULL;
    if ((width != 4 && width != 8) || ab.len % width || vb.len % width) {
        PyErr_SetString(PyExc_ValueError, "sorted_search: want two int32 or two int64 columns");
        goto done;
    }
    Py_ssize_t n = ab.len / width, m = vb.len / width;
    out_b = new_column(m * 8);
    if (!out_b) goto done;
    int64_t *o = (int64_t *)COL_DATA(out_b);
    int sorted = 1;
    Py_BEGIN_ALLOW_THREADS
    if (width == 8) SS_SEARCH(int64_t);
    else SS_SEARCH(int32_t);
    Py_END_ALLOW_THREADS
    if (!sorted) {
        Py_CLEAR(out_b);
        Py_INCREF(Py_None);
        out_b = Py_None;
    }
done:
    PyBuffer_Release(&ab);
    PyBuffer_Release(&vb);
    return out_b;
}

/* The ops with the most self time in each window of one host thread
 * (tb_perfdiag.analysis.detail.host_ops): the thread's segments clipped to a window
 * [a, b), their time summed per innermost op in a hash table of that window's own, and
 * the `per` largest kept (most time first, then the lower op).  Rows come by window,
 * then in that order.  numpy sorted every piece of every window twice per thread: a
 * tenth of a 122-thread TPU trace's analysis. */
/* how many of the sorted x[0..n) are below v: counting equal ones (right) or not */
static Py_ssize_t count_below(const int64_t *x, Py_ssize_t n, int64_t v, int right) {
    Py_ssize_t at = 0;
    SS_FIND(int64_t, x, n, v, 0, at);
    return at;
}

/* op x with time tx ranks before op y with time ty */
#define TSO_BEFORE(tx, x, ty, y) ((tx) > (ty) || ((tx) == (ty) && (x) < (y)))

static PyObject *top_self_ops(PyObject *self, PyObject *args) {
    Py_buffer sb, ib, ab, bb;
    int per;
    if (!PyArg_ParseTuple(args, "y*y*y*y*i", &sb, &ib, &ab, &bb, &per)) return NULL;
    PyObject *out = NULL, *cols[3] = {NULL, NULL, NULL};
    int32_t *key = NULL;
    int64_t *sum = NULL, *rows = NULL, *best_t = NULL;
    int32_t *best_op = NULL;
    Py_ssize_t m = sb.len / 8, n = ab.len / 8;
    if (sb.len % 8 || ib.len != m * 4 || ab.len % 8 || bb.len != ab.len || per < 0) {
        PyErr_SetString(PyExc_ValueError, "top_self_ops: want int64 segment starts, int32 "
                        "inner ops, int64 window starts and ends, and a count >= 0");
        goto done;
    }
    {
        const int64_t *st = sb.buf, *a = ab.buf, *b = bb.buf;
        const int32_t *inner = ib.buf;
        /* the table's size: twice the most segments one window touches, a power of 2 */
        Py_ssize_t most = 0;
        for (Py_ssize_t w = 0; w < n; w++) {
            Py_ssize_t lo = count_below(st, m, a[w], 1) - 1, hi = count_below(st, m, b[w], 0);
            if (lo < 0) lo = 0;
            if (hi - lo > most) most = hi - lo;
        }
        size_t cap = 16;
        while (cap < (size_t)most * 2) cap <<= 1;
        key = pages_take(cap * sizeof(int32_t));
        sum = pages_take(cap * sizeof(int64_t));
        rows = malloc(sizeof(int64_t) * 3 * (size_t)(n * (Py_ssize_t)per + 1));
        best_t = malloc(sizeof(int64_t) * ((size_t)per + 1));
        best_op = malloc(sizeof(int32_t) * ((size_t)per + 1));
        if (!key || !sum || !rows || !best_t || !best_op) { PyErr_NoMemory(); goto done; }
        Py_ssize_t k_out = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t w = 0; w < n && per > 0; w++) {
            Py_ssize_t lo = count_below(st, m, a[w], 1) - 1, hi = count_below(st, m, b[w], 0);
            if (lo < 0) lo = 0;
            if (hi <= lo) continue;
            size_t c = 16;
            while (c < (size_t)(hi - lo) * 2) c <<= 1;
            memset(key, 0xff, c * sizeof(int32_t));              /* -1: empty */
            for (Py_ssize_t k = lo; k < hi; k++) {
                int32_t op = inner[k];
                if (op < 0) continue;
                int64_t s = st[k] > a[w] ? st[k] : a[w];
                int64_t e = k + 1 < m ? st[k + 1] : INT64_MAX;
                if (e > b[w]) e = b[w];
                if (e <= s) continue;
                size_t h = ((uint32_t)op * 2654435761u) & (c - 1);
                while (key[h] >= 0 && key[h] != op) h = (h + 1) & (c - 1);
                if (key[h] < 0) { key[h] = op; sum[h] = 0; }
                sum[h] += e - s;
            }
            int kept = 0;
            for (size_t h = 0; h < c; h++) {
                if (key[h] < 0) continue;
                int64_t t = sum[h];
                int32_t op = key[h];
                if (kept == per && !TSO_BEFORE(t, op, best_t[kept - 1], best_op[kept - 1]))
                    continue;
                int j = kept < per ? kept++ : per - 1;       /* the last one drops out */
                while (j > 0 && TSO_BEFORE(t, op, best_t[j - 1], best_op[j - 1])) {
                    best_t[j] = best_t[j - 1];
                    best_op[j] = best_op[j - 1];
                    j--;
                }
                best_t[j] = t;
                best_op[j] = op;
            }
            for (int j = 0; j < kept; j++, k_out++) {
                rows[3 * k_out] = w;
                rows[3 * k_out + 1] = best_op[j];
                rows[3 * k_out + 2] = best_t[j];
            }
        }
        Py_END_ALLOW_THREADS
        for (int c = 0; c < 3; c++) {
            cols[c] = new_column(k_out * 8);
            if (!cols[c]) goto done;
            int64_t *o = (int64_t *)COL_DATA(cols[c]);
            for (Py_ssize_t r = 0; r < k_out; r++) o[r] = rows[3 * r + c];
        }
        out = Py_BuildValue("(OOO)", cols[0], cols[1], cols[2]);
    }
done:
    for (int c = 0; c < 3; c++) Py_XDECREF(cols[c]);
    pages_give(key);
    pages_give(sum);
    free(rows);
    free(best_t);
    free(best_op);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&ab);
    PyBuffer_Release(&bb);
    return out;
}
#undef TSO_BEFORE

/* A device's busy union per key (a step) and its split by op class
 * (tb_perfdiag.analysis.device_ops._overlap_rows): the union length of all ops, of
 * compute, copies, collectives, compute with copies and compute with collectives, in
 * one pass over the ops sorted by start (keys laid end to end, so that no key's
 * intervals reach the next key's).  Each op adds what reaches past the same set's ops
 * before it.  numpy made a pass and three temporaries per union: 0.7 of the overlap. */
static PyObject *overlap_unions(PyObject *self, PyObject *args) {
    Py_buffer sb, eb, cb, kb;
    Py_ssize_t n_keys;
    int c_comp, c_coll, c_copy, c_set;
    if (!PyArg_ParseTuple(args, "y*y*y*y*niiii", &sb, &eb, &cb, &kb, &n_keys, &c_comp,
                          &c_coll, &c_copy, &c_set))
        return NULL;
    PyObject *out_b = NULL;
    Py_ssize_t n = sb.len / 8;
    if (sb.len % 8 || eb.len != sb.len || cb.len != n || (kb.len && kb.len != n * 8) ||
        n_keys < 1 || n_keys > PY_SSIZE_T_MAX / 48) {
        PyErr_SetString(PyExc_ValueError, "overlap_unions: want int64 starts and ends, int8 "
                        "classes, int64 keys (or none) and a key count >= 1");
        goto done;
    }
    out_b = new_column(n_keys * 6 * 8);
    if (!out_b) goto done;
    {
        const int64_t *st = sb.buf, *en = eb.buf, *key = kb.len ? kb.buf : NULL;
        const int8_t *cls = cb.buf;
        int64_t *o = (int64_t *)COL_DATA(out_b);
        int64_t reach[6] = {0, 0, 0, 0, 0, 0};
        int seen = 0, bad = 0;
        Py_BEGIN_ALLOW_THREADS
        memset(o, 0, (size_t)n_keys * 6 * 8);
        for (Py_ssize_t i = 0; i < n; i++) {
            int k = cls[i];
            int comp = k == c_comp, copy = k == c_copy || k == c_set, coll = k == c_coll;
            int in = 1 | comp << 1 | copy << 2 | coll << 3 | (comp | copy) << 4 |
                     (comp | coll) << 5;
            int64_t kk = key ? key[i] : 0;
            if (kk < 0 || kk >= n_keys) { bad = 1; break; }
            int64_t *row = o + kk * 6, s = st[i], e = en[i];
            for (int u = 0; u < 6; u++) {
                if (!(in >> u & 1)) continue;
                if (!(seen >> u & 1)) {
                    row[u] += e - s;
                    reach[u] = e;
                    seen |= 1 << u;
                } else {
                    int64_t r = reach[u] > e ? reach[u] : e;
                    row[u] += r - (s > reach[u] ? s : reach[u]);
                    reach[u] = r;
                }
            }
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "overlap_unions: a key out of range");
            Py_CLEAR(out_b);
        }
    }
done:
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&kb);
    return out_b;
}

/* Ops ordered by their step (-1: none, first), stable, by counting: numpy's stable
 * argsort of 20 M steps held an int64 order and as much again of its own scratch
 * (tb_perfdiag.analysis.steps.launched_busy).  Returns (order int32 bytes, int64 where
 * the ops are 2**31 or more; bounds int64 bytes, n_steps + 1: where the ops of no step,
 * then of each step, end in the order). */
static PyObject *order_by_step(PyObject *self, PyObject *args) {
    Py_buffer sb, ab = {0};
    int width, at_width = 0;
    Py_ssize_t n_steps;
    if (!PyArg_ParseTuple(args, "y*in|y*i", &sb, &width, &n_steps, &ab, &at_width))
        return NULL;
    PyObject *out = NULL, *order_b = NULL, *bounds_b = NULL;
    /* with `at` (int32 or int64 event indices), op i's step is step[at[i]]: no column of
       the ops' steps (80 MB at 20 M ops, held at the gap loop's peak) */
    int indirect = ab.buf != NULL;
    Py_ssize_t n_step = int_width_ok(width) ? sb.len / width : 0;
    Py_ssize_t n = !indirect ? n_step : (at_width == 4 || at_width == 8) ? ab.len / at_width : 0;
    if (!int_width_ok(width) || sb.len % width || n_steps < 0 ||
        (indirect && ((at_width != 4 && at_width != 8) || ab.len % at_width))) {
        PyErr_SetString(PyExc_ValueError, "order_by_step: want int8/16/32/64 steps, n_steps >= 0 "
                        "(and int32 or int64 event indices into them)");
        goto done;
    }
    int wide = n >= INT32_MAX;
    order_b = new_column(n * (wide ? 8 : 4));
    bounds_b = new_column((n_steps + 1) * 8);
    if (!order_b || !bounds_b) goto done;
    {
        const int32_t *a32 = ab.buf;
        const int64_t *a64 = ab.buf;
        int64_t *at = (int64_t *)COL_DATA(bounds_b);
        char *o = COL_DATA(order_b);
        int bad = 0;
#define OBS_STEP(i, st)                                                                 \
        do {                                                                            \
            Py_ssize_t j_ = i;                                                          \
            if (indirect) {                                                             \
                int64_t e_ = at_width == 4 ? a32[i] : a64[i];                           \
                if (e_ < 0 || e_ >= n_step) { bad = 2; break; }                         \
                j_ = (Py_ssize_t)e_;                                                    \
            }                                                                           \
            st = int_at(sb.buf, width, j_);                                             \
        } while (0)
        Py_BEGIN_ALLOW_THREADS
        memset(at, 0, (size_t)(n_steps + 1) * 8);
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t st = 0;
            OBS_STEP(i, st);
            if (bad) break;
            if (st < -1 || st >= n_steps) { bad = 1; break; }
            at[st + 1]++;
        }
        if (!bad) {
            int64_t run = 0;
            for (Py_ssize_t k = 0; k <= n_steps; k++) {
                int64_t c = at[k];
                at[k] = run;
                run += c;
            }
            /* each bucket's cursor ends where the bucket ends: the bounds */
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t st = 0;
                OBS_STEP(i, st);
                st++;
                if (wide) ((int64_t *)o)[at[st]++] = i;
                else ((int32_t *)o)[at[st]++] = (int32_t)i;
            }
        }
#undef OBS_STEP
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, bad == 1 ? "order_by_step: a step out of range"
                                                       : "order_by_step: an event out of range");
            goto done;
        }
    }
    out = PyTuple_Pack(2, order_b, bounds_b);
done:
    Py_XDECREF(order_b);
    Py_XDECREF(bounds_b);
    PyBuffer_Release(&sb);
    if (ab.buf) PyBuffer_Release(&ab);
    return out;
}

/* The step each event belongs to by a time (tb_perfdiag.analysis.steps.launching_steps):
 * the start of the event that dispatched it (who, >= 0) unless own[i] says its own
 * start, then the last step window starting at or before that time (-1 before the first
 * one).  One pass, galloping from the last answer (events come thread by thread in time
 * order); numpy gathered, masked and searched in five columns of the events' size. */
#define SOE_PASS(W)                                                                     \
    do {                                                                                \
        const W *who = wb.buf;                                                          \
        Py_ssize_t prev = 0;                                                            \
        int64_t last = INT64_MIN;                                                       \
        for (Py_ssize_t i = 0; i < n; i++) {                                            \
            int64_t w = who[i];                                                         \
            if (w >= n) { bad = 1; break; }                                             \
            int64_t t = (w >= 0 && !(own && own[i])) ? ts[w] : ts[i];                   \
            SS_FIND(int64_t, hs, m, t, t >= last, prev);                                \
            last = t;                                                                   \
            int_put(o, out_w, i, (int64_t)prev - 1);                                    \
        }                                                                               \
    } while (0)

static PyObject *steps_of_events(PyObject *self, PyObject *args) {
    Py_buffer tb, wb, ob, hb;
    int width, out_w = 8;
    if (!PyArg_ParseTuple(args, "y*y*iy*y*|i", &tb, &wb, &width, &ob, &hb, &out_w)) return NULL;
    PyObject *out_b = NULL;
    Py_ssize_t n = tb.len / 8, m = hb.len / 8;
    if (tb.len % 8 || (width != 4 && width != 8) || wb.len != n * width ||
        (ob.len && ob.len != n) || hb.len % 8 || !int_width_ok(out_w) ||
        (out_w < 8 && m - 1 >= ((int64_t)1 << (8 * out_w - 1)))) {
        PyErr_SetString(PyExc_ValueError, "steps_of_events: want int64 starts, int32 or int64 "
                        "dispatching events, bool own times (or none), int64 window starts "
                        "(and an answer's width that holds their count)");
        goto done;
    }
    out_b = new_column(n * out_w);
    if (!out_b) goto done;
    {
        const int64_t *ts = tb.buf, *hs = hb.buf;
        const uint8_t *own = ob.len ? ob.buf : NULL;
        char *o = COL_DATA(out_b);
        int bad = 0, right = 1;            /* windows starting at or before the time */
        for (Py_ssize_t j = 1; j < m; j++)
            if (hs[j] < hs[j - 1]) bad = 2;
        Py_BEGIN_ALLOW_THREADS
        if (!bad) {
            if (width == 4) SOE_PASS(int32_t);
            else SOE_PASS(int64_t);
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, bad == 1 ? "steps_of_events: an event out of range"
                                                       : "steps_of_events: windows not sorted");
            Py_CLEAR(out_b);
        }
    }
done:
    PyBuffer_Release(&tb);
    PyBuffer_Release(&wb);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&hb);
    return out_b;
}
#undef SOE_PASS
#undef SS_FIND
#undef SS_SEARCH
#undef SS_BELOW

/* ====================================================================== */

/* np.searchsorted over a sorted int64 column held split (tb_perfdiag.analysis.sortedtimes):
 * value i is v0 + (high[r] << 32) + low[i] for the run r holding i (runs start at at[r],
 * at[n_runs] = n).  Per key: the run of its high part by a binary search of the runs,
 * then its low part among that run's. */
static PyObject *split_search(PyObject *self, PyObject *args) {
    Py_buffer hb, ab, lb, kb;
    long long v0;
    int right;
    if (!PyArg_ParseTuple(args, "y*y*y*Ly*p", &hb, &ab, &lb, &v0, &kb, &right)) return NULL;
    PyObject *out_b = NULL;
    Py_ssize_t g = hb.len / 8, n = lb.len / 4, m = kb.len / 8;
    if (hb.len % 8 || ab.len != (g + 1) * 8 || lb.len % 4 || kb.len % 8) {
        PyErr_SetString(PyExc_ValueError, "split_search: want int64 high parts, int64 run "
                        "starts (one more), uint32 low parts and int64 keys");
        goto done;
    }
    const int64_t *high = hb.buf, *at = ab.buf, *key = kb.buf;
    const uint32_t *low = lb.buf;
    if (at[g] != n) {
        PyErr_SetString(PyExc_ValueError, "split_search: the runs do not end at the values' end");
        goto done;
    }
    out_b = new_column(m * 8);
    if (!out_b) goto done;
    {
        int64_t *o = (int64_t *)COL_DATA(out_b);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < m; i++) {
            if (key[i] < v0) { o[i] = 0; continue; }
            uint64_t d = (uint64_t)key[i] - (uint64_t)v0;
            int64_t th = (int64_t)(d >> 32);
            uint32_t tl = (uint32_t)(d & 0xFFFFFFFFu);
            Py_ssize_t lo = 0, hi = g;             /* the first run of high part >= th */
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (high[mid] < th) lo = mid + 1;
                else hi = mid;
            }
            if (lo == g || high[lo] != th) { o[i] = at[lo]; continue; }
            Py_ssize_t a = at[lo], b = at[lo + 1];
            while (a < b) {
                Py_ssize_t mid = a + (b - a) / 2;
                if (right ? low[mid] <= tl : low[mid] < tl) a = mid + 1;
                else b = mid;
            }
            o[i] = a;
        }
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&hb);
    PyBuffer_Release(&ab);
    PyBuffer_Release(&lb);
    PyBuffer_Release(&kb);
    return out_b;
}

static PyMethodDef methods[] = {
    {"scan_xspace", scan_xspace, METH_VARARGS,
     "scan_xspace(buf, done, wanted) -> dict of raw columns, the stats named in wanted (a "
     "tuple of str) split by stat; see tb_perfdiag.trace.native_scan"},
    {"scan_xspace_mapped", scan_xspace_mapped, METH_VARARGS,
     "scan_xspace_mapped(mmap, done, wanted) -> scan_xspace over a file mapping, SIGBUS-guarded"},
    {"scan_kineto", scan_kineto, METH_VARARGS,
     "scan_kineto(buf[, done]) -> dict of raw columns; see tb_perfdiag.trace.native_scan"},
    {"kineto_stream", kineto_stream, METH_NOARGS,
     "kineto_stream() -> a scanner state for kineto_feed"},
    {"kineto_feed", kineto_feed, METH_VARARGS,
     "kineto_feed(state, chunk, final) -> None, or (final) the dict of scan_kineto"},
    {"kineto_part", kineto_part, METH_VARARGS,
     "kineto_part(buf, lo, hi[, spare]) -> the walk of buf[lo:hi] as whole traceEvents "
     "elements, each followed by its separator (a part for kineto_absorb), or None; spare: "
     "an absorbed part whose context is reused"},
    {"kineto_absorb", kineto_absorb, METH_VARARGS,
     "kineto_absorb(stream, part) -> True when the stream took the part's events as if "
     "it had walked their text, else False and nothing changed"},
    {"nest_sorted", nest_sorted, METH_VARARGS,
     "nest_sorted(track_i32, ts_i64, dur_i64[, wide=True]) -> (depth int16 bytes, parent "
     "int64 bytes, int32 when not wide)"},
    {"busy_union", busy_union, METH_VARARGS,
     "busy_union(ts_i64, dur_i64, ev, run_bounds_i64[, threshold (-1 none), ev width 4 or 8]) "
     "-> (starts, ends) "
     "bytes of the union of the events' intervals, and with a threshold (gap starts, ends, "
     "positions in ev of the op before and after) of the gaps at least that long; see "
     "analysis.intervals.union_of_runs"},
    {"corr_links", corr_links, METH_VARARGS,
     "corr_links(kind_i8, on_device_bool, idx_i32_or_i64, ids (int32 or int64), host_kind_bits, "
     "device_kind_bits[, wide=True, ids_width=8]) -> (src, dst) int64 bytes (int32 when not wide), or "
     "None where the host ids are not "
     "dense; see trace.build.correlation_links"},
    {"parent_down_index", parent_down_index, METH_VARARGS,
     "parent_down_index(parent_i32, values_i32 (written)) -> None: an event without a value "
     "(< 0) takes its parent's, in event order"},
    {"parent_down_bucket", parent_down_bucket, METH_VARARGS,
     "parent_down_bucket(parent_i32, bucket_i8, specific_bool (both written), "
     "inherited_256, b_idle) -> None; see analysis.hostline.event_buckets"},
    {"entry_walk", entry_walk, METH_VARARGS,
     "entry_walk(events_i64, linked_i32, parent_i32, max_depth) -> int64 bytes: the flow "
     "into the nearest ancestor-or-self, -2 - the outermost ancestor, or -1; see "
     "analysis.attribution.entry_of"},
    {"event_order", event_order_c, METH_VARARGS,
     "event_order(track_i32, ts_i64, dur_i64, n_tracks[, none_if_sorted]) -> int64 bytes: "
     "the order by (track, ts, -dur), ties in input order (None with none_if_sorted where "
     "the events are in that order already); see trace.build.event_order"},
    {"host_segments", host_segments, METH_VARARGS,
     "host_segments(ts_i64 (sorted), dur_i64, parent_i32, bucket_i8, kind_i8, lo, "
     "b_idle, k_idle, n_buckets, thin_above, thin_every) -> (times, inner, bucket, [segs, "
     "cums] per bucket (None for the bucket with the most segments; cums of more than "
     "thin_above entries kept every thin_every-th), total time per bucket) of "
     "analysis.hostline"},
    {"op_counts", op_counts, METH_VARARGS,
     "op_counts(name_i32, kind_i8, track (int8/16/32/64), dur_i64, step (int8/16/32/64), typical_bool, "
     "on_device_per_track_bool, device_kinds_256, not_op_256, n_strings) -> per side "
     "(ids, counts, times, kinds) of analysis.ops.op_table"},
    {"op_cells", op_cells, METH_VARARGS,
     "op_cells(label_i32, step (int8/16/32/64), device_i32 or b\"\", dur_i64, short_bool, typical_bool or b\"\", "
     "n_steps, n_dev, n_lab, keep) -> the cells and rows of "
     "analysis.device_ops._cells"},
    {"top_self_ops", top_self_ops, METH_VARARGS,
     "top_self_ops(seg_start_i64, seg_inner_i32, a_i64, b_i64, per) -> (window, op, self "
     "time) int64 bytes: per window [a, b), the per ops of most self time on one thread's "
     "timeline; see analysis.detail.host_ops"},
    {"overlap_unions", overlap_unions, METH_VARARGS,
     "overlap_unions(starts_i64, ends_i64, class_i8, key_i64 or b\"\", n_keys, compute, "
     "collective, memcpy, memset) -> int64 bytes (n_keys, 6): per key the union lengths of "
     "all ops, compute, copies, collectives, compute+copies, compute+collectives; see "
     "analysis.device_ops._overlap_rows"},
    {"order_by_step", order_by_step, METH_VARARGS,
     "order_by_step(steps, width, n_steps[, at, at_width]) -> (order bytes: int32, int64 "
     "from 2**31 ops; "
     "bounds int64 bytes): the ops by step, -1 first, stable; see "
     "analysis.steps.launched_busy"},
    {"split_search", split_search, METH_VARARGS,
     "split_search(high_i64, run_starts_i64, low_u32, v0, keys_i64, right) -> int64 bytes: "
     "np.searchsorted over a sorted column held split; see analysis.sortedtimes"},
    {"steps_of_events", steps_of_events, METH_VARARGS,
     "steps_of_events(ts_i64, who_i32_or_i64, width, own_bool or b\"\", window_starts_i64"
     "[, out_width 1/2/4/8]) -> int64 bytes (or out_width's): per event the last window starting at or before its dispatcher's "
     "start (or its own); see analysis.steps.launching_steps"},
    {"sorted_search", sorted_search, METH_VARARGS,
     "sorted_search(a, v, width (4 or 8), right) -> int64 bytes of np.searchsorted(a, v, "
     "side) by one merge, or None where a or v is not sorted; see trace.model.search"},
    {"pages_install", pages_install, METH_VARARGS,
     "pages_install(numpy _ARRAY_API capsule) -> bool: whether the recycled pages can be "
     "offered (numpy's own handler is the current one); see tb_perfdiag.trace.pages"},
    {"pages_enter", pages_enter, METH_VARARGS,
     "pages_enter(room=0) -> the data-memory handler it replaced in this context"},
    {"pages_leave", pages_leave, METH_VARARGS,
     "pages_leave(old) -> None: puts old back; the last scope out unmaps the cached pages"},
    {"pages_tune", pages_tune, METH_VARARGS,
     "pages_tune(big_line, poison) -> the old pair: for tests, the size from which blocks "
     "are recycled, and whether blocks made by malloc are filled with garbage"},
    {"pages_lower", pages_lower, METH_VARARGS,
     "pages_lower(n) -> bytes: what arrays in use and kept blocks may reach is at most n "
     "from now (use still raises it); kept blocks past it are unmapped"},
    {"pages_let_go", pages_let_go, METH_NOARGS,
     "pages_let_go() -> bytes: unmaps the kept blocks, and keeps blocks from then on only "
     "up to the use from then (before work that grows the process' other memory)"},
    {"pages_stats", pages_stats, METH_NOARGS,
     "pages_stats() -> dict: bytes of large blocks live and kept, of small blocks live, "
     "the peaks of in use and of held, hits and misses, open scopes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tb_perfdiag._native",
    "Native scanners for XSpace and Kineto traces (optional accelerator).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    return PyModule_Create(&module);
}
