// The page of an empty logdir: how to capture a profile that Diagnose reads.
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { h } from "./dom.js";
import { squeeze } from "./format.js";

export const HowToView = {
  showHowTo(logdir, skipped) {
    this.body.textContent = "";
    const code = (t) => h("pre", { class: "pd-code" }, t);
    this.body.append(h("div", { class: "pd-howto" },
      h("h2", {}, "No profiles found" + (logdir ? ` in ${logdir}` : "")),
      (skipped || []).length ? h("div", { id: "pd-skipped", role: "note" }, h("p", {}, "Found, but not read:"),
        h("ul", {}, skipped.slice(0, 20).map((x) => h("li", {}, h("code", {}, squeeze(x.path, 80, 200)), ": ", squeeze(x.reason, 80, 400))))) : null,
      h("p", {}, "Capture a profile into the logdir; it appears here on TensorBoard's reload. Diagnose reads PyTorch (Kineto) traces and XLA/JAX XPlane profiles."),
      h("p", { class: "pd-muted pd-small" }, "What is read: ", h("code", {}, "<run>/plugins/profile/<session>/<host>.xplane.pb"),
        " (XSpace), and any ", h("code", {}, ".json"), " or ", h("code", {}, ".json.gz"),
        " whose top-level object has a ", h("code", {}, "traceEvents"), " key near its start — ",
        h("code", {}, "*.pt.trace.json.gz"), " from tensorboard_trace_handler, ", h("code", {}, "rank-0.json.gz"),
        ", the output of ", h("code", {}, "prof.export_chrome_trace(path)"), ". Other JSON files are skipped."),
      h("h3", {}, "PyTorch"),
      code(`import torch.profiler as tp\nwith tp.profile(schedule=tp.schedule(wait=1, warmup=1, active=3),\n                on_trace_ready=tp.tensorboard_trace_handler("LOGDIR/run1")) as prof:\n    for batch in loader:\n        train_step(batch)\n        prof.step()`),
      h("h3", {}, "PyTorch/XLA"),
      code(`import torch_xla.debug.profiler as xp\nserver = xp.start_server(9012)\nxp.start_trace("LOGDIR/run1")\nfor step, batch in enumerate(loader):\n    with xp.StepTrace("train_step", step_num=step):\n        train_step(batch)\nxp.stop_trace()`),
      h("h3", {}, "JAX"),
      code(`import jax\nwith jax.profiler.trace("LOGDIR/run1"):\n    for step in range(10):\n        with jax.profiler.StepTraceAnnotation("train", step_num=step):\n            state = train_step(state, batch)\n    jax.block_until_ready(state)`)));
  },
};
