/*
 * native/search.c — searches of sorted time columns: np.searchsorted over a plain
 * column (trace.model.search) and over one held split in runs of 32-bit offsets
 * (tb_perfdiag.analysis.sortedtimes).
 */
#include "common.h"
#include "methods.h"
#include "search.h"

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


PyObject *sorted_search(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&ab, &vb);
    return out_b;
}

#undef SS_SEARCH

/* np.searchsorted over a sorted int64 column held split (tb_perfdiag.analysis.sortedtimes):
 * value i is v0 + (high[r] << 32) + low[i] for the run r holding i (runs start at at[r],
 * at[n_runs] = n).  Per key: the run of its high part by a binary search of the runs,
 * then its low part among that run's. */
PyObject *split_search(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&hb, &ab, &lb, &kb);
    return out_b;
}

