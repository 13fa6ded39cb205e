/*
 * native/xspace.c — scan_xspace: the XSpace protobuf wire format into flat columns,
 * mirroring tb_perfdiag.trace.xspace.scan_python (see tb_perfdiag/trace/native_scan.py).
 * Validation is at least as strict as upb's: when this returns a result, upb would have
 * accepted the input.  Nesting is bounded by the schema.
 */
#include "common.h"
#include "methods.h"
#include "strings.h"


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

PyObject *scan_xspace(PyObject *self, PyObject *args) {
    (void)self;
    return scan_xspace_impl(args, 0);
}

/* The same scan over a read-only file mapping (an mmap object): strings are copied out,
 * pages are let go behind the scan, and a file that shrinks meanwhile raises OSError
 * instead of ending the process with SIGBUS.  Not on Windows (NotImplementedError),
 * where a mapped file cannot be truncated but the reader does not map either. */
PyObject *scan_xspace_mapped(PyObject *self, PyObject *args) {
    (void)self;
    return scan_xspace_impl(args, 1);
}

