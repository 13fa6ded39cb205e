/* native/methods.h — the module's functions, by the file that holds them (their
   documentation is the method table's, in module.c) */
#ifndef TB_PERFDIAG_METHODS_H
#define TB_PERFDIAG_METHODS_H
#include <Python.h>

/* xspace.c */
PyObject *scan_xspace(PyObject *self, PyObject *args);
PyObject *scan_xspace_mapped(PyObject *self, PyObject *args);

/* kineto.c */
PyObject *scan_kineto(PyObject *self, PyObject *args);
PyObject *kineto_stream(PyObject *self, PyObject *args);
PyObject *kineto_feed(PyObject *self, PyObject *args);
PyObject *kineto_part(PyObject *self, PyObject *args);
PyObject *kineto_absorb(PyObject *self, PyObject *args);

/* passes.c */
PyObject *nest_sorted(PyObject *self, PyObject *args);
PyObject *busy_union(PyObject *self, PyObject *args);
PyObject *corr_links(PyObject *self, PyObject *args);
PyObject *parent_down_index(PyObject *self, PyObject *args);
PyObject *parent_down_bucket(PyObject *self, PyObject *args);
PyObject *entry_walk(PyObject *self, PyObject *args);
PyObject *event_order_c(PyObject *self, PyObject *args);
PyObject *host_segments(PyObject *self, PyObject *args);
PyObject *op_counts(PyObject *self, PyObject *args);
PyObject *op_cells(PyObject *self, PyObject *args);
PyObject *top_self_ops(PyObject *self, PyObject *args);
PyObject *overlap_unions(PyObject *self, PyObject *args);
PyObject *order_by_step(PyObject *self, PyObject *args);
PyObject *steps_of_events(PyObject *self, PyObject *args);

/* hlo.c */
PyObject *hlo_instructions(PyObject *self, PyObject *args);

/* search.c */
PyObject *sorted_search(PyObject *self, PyObject *args);
PyObject *split_search(PyObject *self, PyObject *args);

#endif
