/*
 * native/common.c — the error context's unwinding, the Column type and the growable
 * vectors every scanner and pass of tb_perfdiag._native builds its results in (see
 * common.h).
 */
#include "common.h"

/* ---------------- error handling ----------------
 * Every scanner keeps its state in a heap context with a jmp_buf; failures longjmp back
 * to the entry point, which frees the context. */

NORETURN void fail_at(Fail *f, Py_ssize_t pos, const char *msg) {
    f->err = msg;
    f->err_pos = pos;
    longjmp(f->jb, 1);
}

NORETURN void fail_py(Fail *f) { /* a Python exception is set (so the GIL is held) */
    f->err = NULL;
    longjmp(f->jb, 1);
}

NORETURN void fail_oom(Fail *f) {
    gil_hold(f);
    PyErr_NoMemory();
    fail_py(f);
}

void raise_fail(Fail *f, const char *what) {
    if (f->err == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s: %s (at byte %zd)", what, f->err, f->err_pos);
}

/* ---------------- columns ---------------- */

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

PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tb_perfdiag._native.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_sequence = &column_sequence,
    .tp_as_buffer = &column_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of a scan: a writable buffer (np.frombuffer) that owns its memory.",
};

PyObject *new_column(Py_ssize_t n) {
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

void column_cut(PyObject *o, size_t n) {
    Column *c = (Column *)o;
    if (n < c->len) {
        c->len = n;
        pages_cut(c->data, n);
    }
}

/* ---------------- growable byte vector ---------------- */

void vec_grow(Fail *f, Vec *v, size_t extra) {
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

void vec_free(Vec *v) {
    if (v->col) Py_CLEAR(v->col);
    else if (v->data) pages_give(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

PyObject *vec_to_column(Vec *v) {
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

/* ---------------- a scanner's arguments and results ---------------- */

int dict_put(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int r = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return r;
}

int scan_args(PyObject *args, const char *fn, Py_buffer *view, Py_buffer *done,
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

void scan_args_release(Py_buffer *view, Py_buffer *done) {
    if (done->obj) PyBuffer_Release(done);
    PyBuffer_Release(view);
}


void buffers_release(Py_buffer **bufs) {
    for (; *bufs; bufs++) PyBuffer_Release(*bufs);
}
