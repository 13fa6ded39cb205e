/*
 * native/hlo.c — the instructions of one serialized HloProto as flat columns, for the
 * cost rules of tb_perfdiag.analysis.efficiency.hlo_costs: an XLA module of 30 k
 * instructions cost 0.1 s to walk through upb in Python (3.5 µs an instruction, its
 * fields read one attribute at a time), a few ms here.
 *
 * Only the fields the cost rules read per instruction are taken (its name, opcode,
 * shape's element count, bytes and element type, id, operands and first called
 * computation); what a rule needs beyond them (a dot's dimension numbers, a custom
 * call's target) Python reads from upb for those few instructions, by their position.
 * Every read is bounds-checked; a malformed message raises ValueError.
 */
#include "common.h"
#include "methods.h"

typedef struct {
    const char *err;
    int32_t *comp, *pos, *etype;
    int64_t *id, *called, *elements, *nbytes, *op_off;
    int64_t *op_ids;
    size_t n, cap, n_ops, cap_ops;
    int64_t *comp_id;
    size_t n_comp, cap_comp;
    const unsigned char *sizes; /* bytes per element, by element type */
    size_t n_sizes;
} HCtx;

static int h_varint(HCtx *c, const unsigned char **p, const unsigned char *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) { c->err = "truncated varint"; return -1; }
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) { *out = v; return 0; }
    }
    c->err = "varint too long";
    return -1;
}

/* the next field: its number, wire type and (length-delimited) its bytes, or (varint)
 * its value; fixed-width values are skipped */
static int h_field(HCtx *c, const unsigned char **p, const unsigned char *end, uint32_t *num,
                   int *wt, const unsigned char **s, const unsigned char **e, uint64_t *v) {
    uint64_t key;
    if (h_varint(c, p, end, &key) < 0) return -1;
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return h_varint(c, p, end, v);
    case 1:
        if (end - *p < 8) { c->err = "truncated fixed64"; return -1; }
        *p += 8;
        return 0;
    case 5:
        if (end - *p < 4) { c->err = "truncated fixed32"; return -1; }
        *p += 4;
        return 0;
    case 2: {
        uint64_t n;
        if (h_varint(c, p, end, &n) < 0) return -1;
        if (n > (uint64_t)(end - *p)) { c->err = "truncated field"; return -1; }
        *s = *p;
        *e = *p + n;
        *p += n;
        return 0;
    }
    default:
        c->err = "unsupported wire type";
        return -1;
    }
}

static int h_grow(void **buf, size_t *cap, size_t need, size_t width) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *nb = realloc(*buf, nc * width);
    if (!nb) return -1;
    *buf = nb;
    *cap = nc;
    return 0;
}

/* a shape's (elements, bytes, element type); a tuple has 0 elements and its parts'
 * bytes */
static int h_shape(HCtx *c, const unsigned char *p, const unsigned char *end, int depth,
                   int64_t *elements, int64_t *nbytes, int32_t *etype) {
    int64_t el = 1, by = 0;
    int tuple = 0;
    int32_t et = 0;
    if (depth > 32) { c->err = "shapes nested too deep"; return -1; }
    while (p < end) {
        uint32_t num;
        int wt;
        const unsigned char *s = NULL, *e = NULL;
        uint64_t v = 0;
        if (h_field(c, &p, end, &num, &wt, &s, &e, &v) < 0) return -1;
        if (num == 2 && wt == 0) {
            et = (int32_t)v;
        } else if (num == 3 && (wt == 0 || wt == 2)) {
            const unsigned char *q = s, *qe = e;
            uint64_t d = v;
            do {
                if (wt == 2) {
                    if (q >= qe) break;
                    if (h_varint(c, &q, qe, &d) < 0) return -1;
                }
                int64_t dd = (int64_t)d;
                if (dd < 0 || __builtin_mul_overflow(el, dd, &el)) el = 0;
            } while (wt == 2);
        } else if (num == 4 && wt == 2) {
            int64_t sub_el, sub_by;
            int32_t sub_et;
            if (h_shape(c, s, e, depth + 1, &sub_el, &sub_by, &sub_et) < 0) return -1;
            tuple = 1;
            if (__builtin_add_overflow(by, sub_by, &by)) by = 0;
        }
    }
    if (tuple) {
        *elements = 0;
        *nbytes = by;
    } else {
        int64_t size = (et >= 0 && (size_t)et < c->n_sizes) ? c->sizes[et] : 0;
        *elements = el;
        if (__builtin_mul_overflow(el, size, nbytes)) *nbytes = 0;
    }
    *etype = et;
    return 0;
}

/* every per-instruction column grows together, to twice the capacity (op_off has one more
 * entry: its end) */
static int h_grow_columns(HCtx *c) {
    size_t cap = c->cap ? c->cap * 2 : 1024;
    struct { void **col; size_t width; size_t extra; } cols[] = {
        {(void **)&c->comp, sizeof(int32_t), 0},      {(void **)&c->pos, sizeof(int32_t), 0},
        {(void **)&c->etype, sizeof(int32_t), 0},     {(void **)&c->id, sizeof(int64_t), 0},
        {(void **)&c->called, sizeof(int64_t), 0},    {(void **)&c->elements, sizeof(int64_t), 0},
        {(void **)&c->nbytes, sizeof(int64_t), 0},    {(void **)&c->op_off, sizeof(int64_t), 1}};
    for (size_t k = 0; k < sizeof(cols) / sizeof(cols[0]); k++) {
        void *nb = realloc(*cols[k].col, (cap + cols[k].extra) * cols[k].width);
        if (!nb) return -2;
        *cols[k].col = nb;
    }
    c->cap = cap;
    return 0;
}

static int h_instruction(HCtx *c, const unsigned char *p, const unsigned char *end,
                         int32_t comp, int32_t pos, PyObject *names, PyObject *opcodes,
                         PyObject *opcode_of) {
    const unsigned char *name = NULL, *name_e = NULL, *opc = NULL, *opc_e = NULL;
    int64_t id = -1, called = -1, elements = 0, nbytes = 0;
    int32_t etype = 0;
    size_t i = c->n;
    if (i + 1 > c->cap && h_grow_columns(c) < 0) return -2;
    c->op_off[i] = (int64_t)c->n_ops;
    while (p < end) {
        uint32_t num;
        int wt;
        const unsigned char *s = NULL, *e = NULL;
        uint64_t v = 0;
        if (h_field(c, &p, end, &num, &wt, &s, &e, &v) < 0) return -1;
        if (num == 1 && wt == 2) {
            name = s;
            name_e = e;
        } else if (num == 2 && wt == 2 && !opc) {
            opc = s;
            opc_e = e;
        } else if (num == 3 && wt == 2) {
            if (h_shape(c, s, e, 0, &elements, &nbytes, &etype) < 0) return -1;
        } else if (num == 35 && wt == 0) {
            id = (int64_t)v;
        } else if ((num == 36 || num == 38) && (wt == 0 || wt == 2)) {
            const unsigned char *q = s, *qe = e;
            uint64_t d = v;
            do {
                if (wt == 2) {
                    if (q >= qe) break;
                    if (h_varint(c, &q, qe, &d) < 0) return -1;
                }
                if (num == 36) {
                    if (h_grow((void **)&c->op_ids, &c->cap_ops, c->n_ops + 1, sizeof(int64_t)) < 0)
                        return -2;
                    c->op_ids[c->n_ops++] = (int64_t)d;
                } else if (called < 0) {
                    called = (int64_t)d;
                }
            } while (wt == 2);
        }
    }
    PyObject *nm = PyUnicode_DecodeUTF8((const char *)(name ? name : (const unsigned char *)""),
                                        name ? name_e - name : 0, "replace");
    if (!nm) return -3;
    int bad = PyList_Append(names, nm);
    Py_DECREF(nm);
    if (bad) return -3;
    /* the few opcodes as one str each */
    PyObject *key = PyBytes_FromStringAndSize((const char *)(opc ? opc : (const unsigned char *)""),
                                              opc ? opc_e - opc : 0);
    if (!key) return -3;
    PyObject *op = PyDict_GetItemWithError(opcode_of, key);
    if (!op) {
        if (PyErr_Occurred()) { Py_DECREF(key); return -3; }
        op = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), "replace");
        if (!op || PyDict_SetItem(opcode_of, key, op) < 0) {
            Py_XDECREF(op);
            Py_DECREF(key);
            return -3;
        }
        Py_DECREF(op);
    }
    Py_DECREF(key);
    if (PyList_Append(opcodes, op)) return -3;
    c->comp[i] = comp;
    c->pos[i] = pos;
    c->etype[i] = etype;
    c->id[i] = id;
    c->called[i] = called;
    c->elements[i] = elements;
    c->nbytes[i] = nbytes;
    c->n = i + 1;
    c->op_off[c->n] = (int64_t)c->n_ops;
    return 0;
}

static int h_module(HCtx *c, const unsigned char *p, const unsigned char *end, PyObject *names,
                    PyObject *opcodes, PyObject *opcode_of) {
    while (p < end) {
        uint32_t num;
        int wt;
        const unsigned char *s = NULL, *e = NULL;
        uint64_t v = 0;
        if (h_field(c, &p, end, &num, &wt, &s, &e, &v) < 0) return -1;
        if (num != 3 || wt != 2) continue;
        /* a computation: its id, then its instructions (the id may come after them) */
        int32_t ci = (int32_t)c->n_comp;
        if (h_grow((void **)&c->comp_id, &c->cap_comp, c->n_comp + 1, sizeof(int64_t)) < 0)
            return -2;
        c->comp_id[c->n_comp++] = -1;
        const unsigned char *q = s;
        int32_t pos = 0;
        while (q < e) {
            uint32_t n2;
            int w2;
            const unsigned char *s2 = NULL, *e2 = NULL;
            uint64_t v2 = 0;
            if (h_field(c, &q, e, &n2, &w2, &s2, &e2, &v2) < 0) return -1;
            if (n2 == 5 && w2 == 0) {
                c->comp_id[ci] = (int64_t)v2;
            } else if (n2 == 2 && w2 == 2) {
                int r = h_instruction(c, s2, e2, ci, pos++, names, opcodes, opcode_of);
                if (r < 0) return r;
            }
        }
    }
    return 0;
}

static PyObject *h_bytes(const void *data, size_t n) {
    return PyBytes_FromStringAndSize(data ? (const char *)data : "", (Py_ssize_t)n);
}

static void h_free(HCtx *c) {
    free(c->comp);
    free(c->pos);
    free(c->etype);
    free(c->id);
    free(c->called);
    free(c->elements);
    free(c->nbytes);
    free(c->op_off);
    free(c->op_ids);
    free(c->comp_id);
}

PyObject *hlo_instructions(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, sizes;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &sizes)) return NULL;
    HCtx c;
    memset(&c, 0, sizeof(c));
    c.sizes = sizes.buf;
    c.n_sizes = (size_t)sizes.len;
    PyObject *names = PyList_New(0), *opcodes = PyList_New(0), *opcode_of = PyDict_New();
    PyObject *out = NULL;
    int r = (names && opcodes && opcode_of) ? 0 : -3;
    const unsigned char *p = buf.buf, *end = p + buf.len;
    while (r == 0 && p < end) {
        uint32_t num;
        int wt;
        const unsigned char *s = NULL, *e = NULL;
        uint64_t v = 0;
        if (h_field(&c, &p, end, &num, &wt, &s, &e, &v) < 0) {
            r = -1;
            break;
        }
        if (num == 1 && wt == 2) r = h_module(&c, s, e, names, opcodes, opcode_of);
    }
    if (r == -1) {
        PyErr_SetString(PyExc_ValueError, c.err ? c.err : "malformed HloProto");
    } else if (r == -2) {
        PyErr_NoMemory();
    } else if (r == 0) {
        int64_t zero = 0;
        out = Py_BuildValue(
            "{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:O,s:O}",
            "comp", h_bytes(c.comp, c.n * sizeof(int32_t)),
            "pos", h_bytes(c.pos, c.n * sizeof(int32_t)),
            "etype", h_bytes(c.etype, c.n * sizeof(int32_t)),
            "id", h_bytes(c.id, c.n * sizeof(int64_t)),
            "called", h_bytes(c.called, c.n * sizeof(int64_t)),
            "elements", h_bytes(c.elements, c.n * sizeof(int64_t)),
            "nbytes", h_bytes(c.nbytes, c.n * sizeof(int64_t)),
            "op_off", c.n ? h_bytes(c.op_off, (c.n + 1) * sizeof(int64_t)) : h_bytes(&zero, sizeof(zero)),
            "op_ids", h_bytes(c.op_ids, c.n_ops * sizeof(int64_t)),
            "comp_id", h_bytes(c.comp_id, c.n_comp * sizeof(int64_t)),
            "n", PyLong_FromSize_t(c.n),
            "names", names, "opcodes", opcodes);
    }
    h_free(&c);
    Py_XDECREF(names);
    Py_XDECREF(opcodes);
    Py_XDECREF(opcode_of);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&sizes);
    return out;
}
