/*
 * native/passes.c — the passes over built columns that numpy did in many: the nesting
 * of events, busy unions and gaps, correlation links, the walks down and up the parents,
 * the event order, a host thread's segments, op counts and cells, the top self ops of a
 * window, overlap unions, the order by step and each event's step.  Each takes and
 * returns plain buffers and runs without the GIL.
 */
#include "common.h"
#include "methods.h"
#include "search.h"

/* Nesting of events sorted by (track, ts, -dur), as one pass per track: an event's
 * parent is the deepest event still open at its start (end > ts), i.e. the latest
 * earlier event of the track that is still open — what a stack walk sees, also when
 * an annotation starts inside a frame and outlives it.  The stack is the ancestor
 * chain of the previous event; ended events are popped from its top.  depth =
 * depth(parent) + 1. */

PyObject *nest_sorted(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&tb, &sb, &db);
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

PyObject *busy_union(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&tsb, &durb, &evb, &rb);
    return out;
}

/* Launch -> device-activity links by correlation id (tb_perfdiag.trace.build
 * .correlation_links) where the host side's ids are small and dense, as a counter's are:
 * one table over the ids, the first host call of an id wins (what the sort of the
 * general case gives).  Returns None where the ids are not dense (the caller sorts).
 * Three passes over the id rows and no mask or gather the size of the events: the numpy
 * version made ten (2.9 s on a 40 M-event XSpace). */
PyObject *corr_links(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&kdb, &odb, &ixb, &vlb);
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

PyObject *parent_down_index(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&pb, &vb);
    return out;
}

PyObject *parent_down_bucket(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&pb, &bb, &sb, &ib);
    return out;
}

/* From each host event, the host event whose flow entered the work it belongs to
 * (tb_perfdiag.analysis.attribution.entry_of): the flow into its nearest
 * ancestor-or-self, else -2 - (its outermost ancestor) for the caller to look up the
 * thread region that ancestor ran in; -1 past max_depth ancestors.  A walk up the
 * parents per event, with no temporary: the numpy version deduplicated the parents level
 * by level (1.9 s on a 40 M-event trace). */
PyObject *entry_walk(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&evb, &lkb, &pab);
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

PyObject *event_order_c(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&trb, &tsb, &drb);
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
PyObject *host_segments(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&tsb, &durb, &parb, &bkb, &kdb);
    return out;
}

/* Count and time of every op name (tb_perfdiag.analysis.ops.op_table), host ops and
 * device ops apart, each in three cells: outside every step, in a step that is not
 * typical, in a typical step.  Two passes over the events (which names occur, then the
 * sums), exact int64 times, and no temporary the size of the events: the numpy version
 * made a dozen per chunk and a bincount as long as all names per chunk. */
PyObject *op_counts(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&nmb, &kdb, &trb, &drb, &stb, &tyb, &odb, &dkb, &nob);
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

PyObject *op_cells(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&lb, &sb, &vb, &db, &fb, &tb);
    return out;
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

PyObject *top_self_ops(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&sb, &ib, &ab, &bb);
    return out;
}
#undef TSO_BEFORE

/* A device's busy union per key (a step) and its split by op class
 * (tb_perfdiag.analysis.device_ops._overlap_rows): the union length of all ops, of
 * compute, copies, collectives, compute with copies and compute with collectives, in
 * one pass over the ops sorted by start (keys laid end to end, so that no key's
 * intervals reach the next key's).  Each op adds what reaches past the same set's ops
 * before it.  numpy made a pass and three temporaries per union: 0.7 of the overlap. */
PyObject *overlap_unions(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&sb, &eb, &cb, &kb);
    return out_b;
}

/* Ops ordered by their step (-1: none, first), stable, by counting: numpy's stable
 * argsort of 20 M steps held an int64 order and as much again of its own scratch
 * (tb_perfdiag.analysis.steps.launched_busy).  Returns (order int32 bytes, int64 where
 * the ops are 2**31 or more; bounds int64 bytes, n_steps + 1: where the ops of no step,
 * then of each step, end in the order). */
PyObject *order_by_step(PyObject *self, PyObject *args) {
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

PyObject *steps_of_events(PyObject *self, PyObject *args) {
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
    RELEASE_BUFFERS(&tb, &wb, &ob, &hb);
    return out_b;
}
#undef SOE_PASS
