/*
 * tb_perfdiag._native — C versions of the two reference scanners and of the analysis'
 * hot passes.
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
 *
 * Where each part lives: see common.h.
 */
#include "common.h"
#include "methods.h"

static PyMethodDef methods[] = {
    {"scan_xspace", scan_xspace, METH_VARARGS,
     "scan_xspace(buf, done, wanted) -> dict of raw columns, the stats named in wanted (a "
     "tuple of str) split by stat; see tb_perfdiag.trace.native_scan"},
    {"scan_xspace_mapped", scan_xspace_mapped, METH_VARARGS,
     "scan_xspace_mapped(mmap, done, wanted) -> scan_xspace over a file mapping, SIGBUS-guarded"},
    {"scan_kineto", scan_kineto, METH_VARARGS,
     "scan_kineto(buf[, done]) -> dict of raw columns; see tb_perfdiag.trace.native_scan"},
    {"hlo_instructions", hlo_instructions, METH_VARARGS,
     "hlo_instructions(hlo_proto, element_sizes) -> dict of per-instruction columns (bytes: "
     "comp, pos, etype int32; id, called, elements, nbytes, op_off, op_ids, comp_id int64) and "
     "names, opcodes (lists of str); see analysis.efficiency.hlo_costs"},
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
    {"pages_heap_pad", pages_heap_pad, METH_VARARGS,
     "pages_heap_pad(n) -> the old pad: malloc keeps n bytes free at each heap's top (and "
     "its mmap line at 32 MB) while a read makes and drops blocks by the thousand"},
    {"pages_huge", pages_huge, METH_VARARGS,
     "pages_huge([flag]) -> the old flag: whether large blocks mapped from now on ask for "
     "transparent huge pages (without flag: only asked)"},
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

