#!/usr/bin/env python3
"""Real TensorFlow-profiler (XSpace) captures: tf.data input pipelines, Keras and XLA on CPU.

Run with the generator venv (tensorflow-cpu 2.21.0), normally via make_captures.sh:

    python capture_tf.py --out testdata/captures/tf_cpu [--ground-truth gt.json]

Writes one TensorBoard log dir per capture, ``<out>/<capture>/plugins/profile/<run>/
cpuhost.xplane.pb`` (the profile-plugin layout; the file is renamed from the machine's
host name so that reruns give stable paths).  The Python tracer is off to keep the
files small.  Each capture is ``tf.profiler.experimental.start``/``stop`` around a few
steps after an untraced warm-up (so the first trace and XLA compile are outside the
capture, except where a capture is about compilation).

The captures and what is true of each by construction (also written to --ground-truth):

* ``input_bound``: ``range → map(decode) → batch``, no parallelism, no prefetch;
  ``decode`` is a Python function called through ``tf.numpy_function`` that sleeps
  DECODE_S per element (an I/O stand-in) and does a little numpy.  Each batch costs
  BATCH × DECODE_S of pipeline work on the step's own thread; the ``tf.function(
  jit_compile=True)`` train step takes a few ms.  The device (XLA:CPU) idles while
  the step waits for the next batch: the idle is data loading, slowest stage the
  map's ``PyFunc``.
* ``input_parallel_prefetch``: the same pipeline with ``num_parallel_calls=
  tf.data.AUTOTUNE`` and ``.prefetch(tf.data.AUTOTUNE)``: the decode runs on tf.data's
  thread pool ahead of the step; the idle per step shrinks (what is left is still
  the input pipeline, which cannot keep up with a fast step).
* ``input_tf_ops``: the pipeline is slow in TensorFlow ops, not Python: it
  ``interleave``s over TFRecord files the generator writes, parses each record,
  ``decode_png``s an image and resizes it (``tf.image.resize``, bicubic, large).  No
  step markers at all in this capture: the analysis has no step annotations to use.
  tf.data's automatic prefetch injection is turned off so that the pipeline stays
  synchronous (on a 2-core CPU an injected prefetch competes with XLA:CPU for cores).
* ``keras_fit`` / ``keras_fit_spe``: ``model.fit`` of a small Keras MLP on a
  ``tf.data`` pipeline with a slow ``numpy_function`` map (as in ``input_bound``),
  with ``steps_per_execution`` 1 and 4, profiled by ``keras.callbacks.TensorBoard(
  profile_batch=...)``, which marks each profiled ``train_function`` call as
  ``Profiled batch`` (``step_num``, no ``_r``).
* ``eager_loop``: an eager (no ``tf.function``) loop of many tiny ops per step, a
  small ``jit_compile=True`` function, and a ``float(loss)`` read every step; host
  bound.  In step RETRACE_STEP the jitted function is called with another batch
  size: tf.function retraces and XLA compiles again in that step (observed in
  process with ``experimental_get_tracing_count``).

``input_bound``, ``input_parallel_prefetch`` and ``eager_loop`` mark steps with
``tf.profiler.experimental.Trace('train', step_num=i, _r=1)``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

HOST_FILE = "cpuhost.xplane.pb"
NUM_STEPS = 8
WARMUP = 2
BATCH = 8
FEATURES = 256
CLASSES = 10
DECODE_S = 0.003               # per element: a batch is BATCH × DECODE_S = 24 ms of decode
HIDDEN = 512
IMG = 64                       # PNG side in the TFRecord files
RESIZE = 384                   # resized side (bicubic): the slow TF-op stage
N_FILES = 4
RECORDS_PER_FILE = 16
EAGER_TINY_OPS = 150
RETRACE_STEP = 5
KERAS_STEPS = 8                # batches profiled (steps_per_execution divides it)


def _options():
    return tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                    device_tracer_level=1)


def _decode(i):
    """The slow Python decode: an I/O stand-in (sleep) plus a little numpy."""
    time.sleep(DECODE_S)
    rng = np.random.default_rng(int(i))
    x = rng.standard_normal(FEATURES).astype(np.float32)
    return (x - x.mean()) / (x.std() + 1e-6), np.int32(int(i) % CLASSES)


def _tf_decode(i):
    x, y = tf.numpy_function(_decode, [i], (tf.float32, tf.int32), name="decode")
    x.set_shape((FEATURES,))
    y.set_shape(())
    return x, y


def python_pipeline(parallel: bool):
    ds = tf.data.Dataset.range(10_000)
    ds = ds.map(_tf_decode, num_parallel_calls=tf.data.AUTOTUNE if parallel else None,
                deterministic=True)
    ds = ds.batch(BATCH, drop_remainder=True)
    if parallel:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds


def _weights():
    g = tf.random.Generator.from_seed(0)
    return [tf.Variable(g.normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)),
            tf.Variable(tf.zeros((HIDDEN,))),
            tf.Variable(g.normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)),
            tf.Variable(g.normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN))]


def make_train_step(ws):
    @tf.function(jit_compile=True)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(x @ ws[0] + ws[1])
            for _ in range(4):
                h = tf.nn.relu(h @ ws[2])
            logits = h @ ws[3]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, ws)
        for w, g in zip(ws, grads):
            w.assign_sub(0.01 * g)
        return loss
    return train_step


def _profiled(out, body):
    """Run ``body()`` under the TF profiler writing into ``out``; return the run folder."""
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    tf.profiler.experimental.start(out, options=_options())
    try:
        body()
    finally:
        tf.profiler.experimental.stop()
    return _keep_xspace(out)


def _keep_xspace(out):
    """The one XSpace of the capture, renamed; the profiler's other files removed."""
    prof_root = os.path.join(out, "plugins", "profile")
    runs = os.listdir(prof_root)
    if len(runs) != 1:
        sys.exit(f"expected one profile run folder in {prof_root}, got {runs}")
    run_dir = os.path.join(prof_root, runs[0])
    xplanes = [f for f in os.listdir(run_dir) if f.endswith(".xplane.pb")]
    if len(xplanes) != 1:
        sys.exit(f"expected one .xplane.pb, got {os.listdir(run_dir)}")
    for f in os.listdir(run_dir):
        if not f.endswith(".xplane.pb"):
            os.remove(os.path.join(run_dir, f))
    if xplanes[0] != HOST_FILE:
        os.rename(os.path.join(run_dir, xplanes[0]), os.path.join(run_dir, HOST_FILE))
    return os.path.join("plugins", "profile", runs[0], HOST_FILE)


def capture_python_pipeline(out, parallel: bool):
    ws = _weights()
    step_fn = make_train_step(ws)
    it = iter(python_pipeline(parallel))
    for _ in range(WARMUP):               # trace + compile outside the capture
        x, y = next(it)
        float(step_fn(x, y))
    waits = []

    def body():
        for step in range(NUM_STEPS):
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                t0 = time.perf_counter()
                x, y = next(it)
                waits.append(time.perf_counter() - t0)
                loss = step_fn(x, y)
        float(loss)

    rel = _profiled(out, body)
    return rel, {
        "pipeline": ("range → map(numpy_function decode" +
                     (", num_parallel_calls=AUTOTUNE" if parallel else "") +
                     f") → batch({BATCH})" + (" → prefetch(AUTOTUNE)" if parallel else "")),
        "train_step": "tf.function(jit_compile=True), XLA:CPU",
        "num_steps": NUM_STEPS,
        "step_annotation": "tf.profiler.experimental.Trace('train', step_num=i, _r=1)",
        "decode_s_per_element": DECODE_S,
        "decode_s_per_batch": DECODE_S * BATCH,
        "slow_stage": "PyFunc (numpy_function decode) under the map",
        # with a parallel map and prefetch the decode runs during the step: not input bound
        "input_bound": not parallel,
        "gap_cause": None if parallel else "data_loading",
        "parallel_map": parallel,
        "prefetch": parallel,
        "observed_next_wait_s_median": round(float(np.median(waits)), 4),
        "compile_steps": [],
    }


def _write_records(folder):
    rng = np.random.default_rng(1)
    paths = []
    for f in range(N_FILES):
        path = os.path.join(folder, f"shard-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for r in range(RECORDS_PER_FILE):
                img = rng.integers(0, 255, (IMG, IMG, 3), dtype=np.uint8)
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[tf.io.encode_png(img).numpy()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[(f * RECORDS_PER_FILE + r) % CLASSES]))}))
                w.write(ex.SerializeToString())
        paths.append(path)
    return paths


def capture_tf_ops(out, tmp):
    paths = _write_records(tmp)
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(rec):
        ex = tf.io.parse_single_example(rec, spec)
        img = tf.image.decode_png(ex["image"], channels=3)
        img = tf.image.resize(tf.cast(img, tf.float32), (RESIZE, RESIZE), method="bicubic")
        img = tf.image.resize(img, (16, 16), method="area")
        x = tf.reshape(img, (-1,))[:FEATURES]
        return x, tf.cast(ex["label"], tf.int32)

    ds = (tf.data.Dataset.from_tensor_slices(paths)
          .interleave(tf.data.TFRecordDataset, cycle_length=2)
          .map(parse).batch(BATCH, drop_remainder=True).repeat())
    # tf.data would append a prefetch of its own (inject_prefetch): keep the pipeline
    # synchronous, so each batch is made while the step waits for it
    opts = tf.data.Options()
    opts.experimental_optimization.inject_prefetch = False
    ds = ds.with_options(opts)
    ws = _weights()
    step_fn = make_train_step(ws)
    it = iter(ds)
    for _ in range(WARMUP):
        x, y = next(it)
        float(step_fn(x, y))

    def body():
        for _ in range(NUM_STEPS):
            x, y = next(it)
            loss = step_fn(x, y)
        float(loss)

    rel = _profiled(out, body)
    return rel, {
        "pipeline": (f"list of {N_FILES} TFRecord files → interleave(TFRecordDataset, "
                     f"cycle_length=2) → map(parse_single_example, decode_png, "
                     f"resize {IMG}→{RESIZE} bicubic → 16 area) → batch({BATCH}) → repeat, "
                     f"inject_prefetch off"),
        "train_step": "tf.function(jit_compile=True), XLA:CPU",
        "num_steps": NUM_STEPS,
        "step_annotation": None,
        "slow_stage": "TF ops under the map (DecodePng, ResizeBicubic), no Python",
        "input_bound": True,
        "gap_cause": "data_loading",
        "compile_steps": [],
    }


def capture_keras(out, spe: int):
    """model.fit profiled the way Keras users do it: the TensorBoard callback with
    ``profile_batch`` writes ``<log_dir>/train/plugins/profile/<run>/`` and marks each
    profiled batch (one per ``train_function`` call) as ``Profiled batch`` with its
    ``step_num``."""
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=spe, jit_compile=True)
    ds = python_pipeline(parallel=False).repeat()
    calls = KERAS_STEPS // spe                 # train_function calls profiled
    first = WARMUP + 1                         # 1-based batch of the callback
    tb = keras.callbacks.TensorBoard(os.path.join(out, "_tb"), profile_batch=(first, first + calls - 1),
                                     write_graph=False, update_freq="epoch")
    if os.path.isdir(out):
        shutil.rmtree(out)
    model.fit(ds, epochs=1, steps_per_epoch=(first + calls + 1) * spe, verbose=0, callbacks=[tb])
    # keep only the XSpace, in the usual layout under <out>
    src = os.path.join(out, "_tb", "train", "plugins")
    shutil.move(src, os.path.join(out, "plugins"))
    shutil.rmtree(os.path.join(out, "_tb"))
    rel = _keep_xspace(out)
    return rel, {
        "program": (f"keras model.fit(steps_per_execution={spe}, jit_compile=True) on the "
                    f"input_bound pipeline, profiled by keras.callbacks.TensorBoard("
                    f"profile_batch=({first}, {first + calls - 1}))"),
        "keras_version": keras.__version__,
        "steps_per_execution": spe,
        "num_steps": calls,
        "batches_per_step": spe,
        "step_annotation": "Keras TensorBoard callback: Trace('Profiled batch', step_num=batch)",
        "decode_s_per_batch": DECODE_S * BATCH,
        "slow_stage": "PyFunc (numpy_function decode) under the map",
        "input_bound": True,
        "gap_cause": "data_loading",
        "compile_steps": [],
    }


def capture_eager(out):
    ws = _weights()

    @tf.function(jit_compile=True)
    def head(h, y):
        logits = h @ ws[3]
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

    rng = np.random.default_rng(2)

    def step_body(step, batch):
        x = tf.constant(rng.standard_normal((batch, FEATURES)).astype(np.float32))
        y = tf.constant(rng.integers(0, CLASSES, batch).astype(np.int32))
        h = tf.nn.relu(x @ ws[0] + ws[1])
        for _ in range(EAGER_TINY_OPS):         # many tiny eager ops: host bound
            h = h * 0.999 + 0.0001
        h = tf.nn.relu(h @ ws[2])
        loss = head(h, y)
        return float(loss)                      # device→host read every step

    for s in range(WARMUP):
        step_body(-1, BATCH)
    traced = []

    def body():
        for step in range(NUM_STEPS):
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                before = head.experimental_get_tracing_count()
                step_body(step, BATCH // 2 if step == RETRACE_STEP else BATCH)
                if head.experimental_get_tracing_count() > before:
                    traced.append(step)

    rel = _profiled(out, body)
    if traced != [RETRACE_STEP]:
        sys.exit(f"eager_loop: tf.function traced in steps {traced}, expected {[RETRACE_STEP]}")
    return rel, {
        "program": (f"eager loop: {EAGER_TINY_OPS} tiny elementwise ops per step, then a "
                    f"tf.function(jit_compile=True) head, then float(loss)"),
        "num_steps": NUM_STEPS,
        "step_annotation": "tf.profiler.experimental.Trace('train', step_num=i, _r=1)",
        "eager_tiny_ops_per_step": EAGER_TINY_OPS,
        "host_bound": True,
        "input_bound": False,
        "d2h_read_steps": list(range(NUM_STEPS)),
        "d2h_read": "float(loss) every step",
        "batch_size_by_step": {str(RETRACE_STEP): BATCH // 2},
        "compile_steps": [RETRACE_STEP],
        "recompile_steps": [RETRACE_STEP],
        "observed_retrace_steps": traced,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder of the capture log dirs, (re)created")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    ap.add_argument("--only", nargs="*", help="capture names to make (default: all; "
                    "with --only the ground truth holds only those)")
    args = ap.parse_args(argv)
    tf.random.set_seed(0)
    if os.path.isdir(args.out) and not args.only:
        shutil.rmtree(args.out)
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, ".records")
    os.makedirs(tmp, exist_ok=True)
    makers = {
        "input_bound": lambda o: capture_python_pipeline(o, parallel=False),
        "input_parallel_prefetch": lambda o: capture_python_pipeline(o, parallel=True),
        "input_tf_ops": lambda o: capture_tf_ops(o, tmp),
        "keras_fit": lambda o: capture_keras(o, 1),
        "keras_fit_spe": lambda o: capture_keras(o, 4),
        "eager_loop": capture_eager,
    }
    files, captures = [], {}
    for name, make in makers.items():
        if args.only and name not in args.only:
            continue
        print(f"capturing {name}", flush=True)
        rel, gt = make(os.path.join(args.out, name))
        gt["file"] = f"{name}/{rel}"
        files.append(gt["file"])
        captures[name] = gt
    shutil.rmtree(tmp)
    if args.ground_truth:
        with open(args.ground_truth, "w") as f:
            json.dump({"tool": "tf.profiler.experimental.start/stop (XSpace), python tracer off",
                       "tensorflow_version": tf.__version__,
                       "captures": captures, "files": files}, f, indent=2)


if __name__ == "__main__":
    main()
