// The Diagnose page: selectors, summary, steps chart, gap list, gap detail, timeline.
import { getJSON, routeUrl, TB_ROOT } from "./api.js";
import { h, put } from "./dom.js";
import { causeColor, causeLabel, cut, findingCost, formatNs, formatPct, fullTitle, gapLabel, gapRefs, optionText, plural, squeeze, stepPlace } from "./format.js";
import { readState, writeState, urlWindow } from "./state.js";
import { barHoldsStep, renderStepsChart, stepStats } from "./steps_chart.js";
import { Timeline, poolOf } from "./timeline.js";
import { renderAnnotations } from "./annotations.js";
import { renderDeviceOps } from "./device_ops.js";
import { CompareHosts } from "./compare.js";
import { CompareRuns, renderPicker } from "./compare_runs.js";
import { onTensorBoardReload } from "./tb_host.js";
import { dutyWaitText, mergeStepWait, renderCollectives } from "./collectives.js";
import { headline } from "./headline.js";
import { renderDeviceRoofline, renderEfficiency } from "./efficiency.js";

const PAGE = 200;
/** Causes where the device had the work and waited (not the host's doing). */
const DEVICE_SIDE = ["device_wait", "collective_wait"];
/** What the host did during a share of a gap, for the panel's "In short". */
const HOST_DID = {
  untraced: "shows no op (idle or not profiled)", data_loading: "was loading input",
  host_compute: "was computing between launches", launch_overhead: "was launching work",
  compilation: "was compiling", h2d_transfer: "was copying data to the device",
  allocator: "was in the memory allocator", graph_capture: "was capturing a CUDA graph",
  runtime_call: "was in a runtime call", startup: "was still starting up",
};
/** Runs with this many hosts or more open on the per-host summary (a pod), not on one host. */
export const POD_HOSTS = 8;
/** The host selector's value for that summary. */
export const ALL_HOSTS = "*";
const PROGRESS_DELAY_MS = 300, PROGRESS_POLL_MS = 400;
/** How often the Collectives card asks again while the run's other hosts are analysed. */
const COLLECTIVES_POLL_MS = 1000;
/** The run list is listed again on TensorBoard's reload (button or auto-reload) and, as a
 *  fallback outside TensorBoard or with its auto-reload off, this often. */
const RUNS_POLL_MS = 60000;

export class App {
  constructor(root) {
    this.root = root;
    this.state = readState();
    this.runs = [];
    this.diag = null;
    this.gaps = [];
    this.token = 0;
    this.abort = null;             // the AbortController of the selection shown
    this.shownKey = null;          // run|host|span|device whose answers are drawn
    this.coll = null; this.collKey = null;
    this.runsVersion = 0;
    this.spanRule = "";
    this.profilePlugin = false;
    this.profileRuns = null;       // the Profile plugin's own run list (null: not asked yet)
  }

  async start() {
    this.root.textContent = "";
    this.header = h("div", { class: "pd-header" });
    this.statusEl = h("div", { class: "pd-status", role: "status", "aria-live": "polite" });
    this.body = h("div", { class: "pd-body" });
    this.compareEl = h("div", { class: "pd-compare-slot" });
    this.pickerEl = h("div", { class: "pd-picker-slot" });
    this.root.append(h("h1", { class: "pd-title" }, "Diagnose: why is the accelerator idle?"),
      this.header, this.pickerEl, this.statusEl, this.compareEl, this.body);
    this.compare = new CompareHosts(this.compareEl, {
      params: (host) => ({ run: this.state.run, host, span: undefined }),
      spanLabel: (host, span) => this.spanLabel(this.state.run, host, span),
      onPick: (host) => {
        // from a pod's summary the host's page takes the screen; "Compare hosts" brings the table back
        if (this.compare.pinned) this.compare.close();
        this.state = { run: this.state.run, host }; this.buildSelectors(); this.show();
      },
    });
    this.setStatus("Loading runs…", true);
    let r;
    try {
      r = await getJSON("runs");
    } catch (e) {
      this.showError({ error: `cannot reach the plugin: ${e}` });
      return;
    }
    this.setStatus("");
    if (!r.ok) { this.showError(r.body); return; }
    this.takeRuns(r.body);
    this.showReader(r.body.reader);
    this.watchRuns();
    if (this.runs.length === 0) { this.showHowTo(r.body.logdir, r.body.skipped); return; }
    await this.openFirst();
  }

  /** Which reader the server runs, beside the title: "native", or pure Python and how to
   *  get the native one (everything is then about 4× slower). */
  showReader(reader) {
    if (!reader) return;
    const slow = reader !== "native";
    this.readerEl = this.readerEl || h("span", { id: "pd-reader", class: "pd-small pd-muted pd-reader" });
    this.readerEl.classList.toggle("pd-reader-slow", slow);
    this.readerEl.textContent = `reader: ${reader}`;
    this.readerEl.title = slow ? reader : "the C extension reads the traces";
    const title = this.root.querySelector(".pd-title");
    if (title && !this.readerEl.parentNode) title.append(" ", this.readerEl);
  }

  takeRuns(body) {
    this.runs = body.runs || [];
    this.spanRule = body.span_rule || "";
    this.profilePlugin = !!body.profile_plugin;
    this.profileRuns = null;
    this.runsSig = JSON.stringify(this.runs);
    this.runsVersion++;
    this.root.dataset.runs = String(this.runsVersion);
  }

  /** New runs and spans show up in an open page: on TensorBoard's reload (its button and
   *  its auto-reload) and every RUNS_POLL_MS, keeping what is selected and shown. */
  watchRuns() {
    if (this.watching) return;
    this.watching = true;
    onTensorBoardReload(() => this.refreshRuns(true));
    const poll = () => {
      if (document.visibilityState !== "hidden") this.refreshRuns(false);
      this.pollTimer = setTimeout(poll, RUNS_POLL_MS);
    };
    this.pollTimer = setTimeout(poll, RUNS_POLL_MS);
  }

  async refreshRuns(refresh) {
    let r;
    try { r = await getJSON("runs", { refresh: refresh ? 1 : undefined }); } catch (e) { return; }
    if (!r.ok) return;
    this.root.dataset.runsChecked = String((+this.root.dataset.runsChecked || 0) + 1);
    if (JSON.stringify(r.body.runs || []) === this.runsSig) return;
    const wasEmpty = this.runs.length === 0;
    this.takeRuns(r.body);
    if (!this.runs.length) return;
    if (wasEmpty) { await this.openFirst(); return; }
    const shown = this.runs.some((x) => x.run === this.state.run);
    this.buildSelectors();      // the same selection, with the new runs/spans listed
    if (!shown) { await this.show(); return; }
    if (this.diag) this.renderDeviceSelect();
  }

  async openFirst() {
    const deepLinked = !!this.state.run && this.runs.some((x) => x.run === this.state.run);
    this.buildSelectors();
    if (deepLinked) { await this.show(); return; }
    // Default selection: the first run whose diagnosis succeeds (at most 3 tries), trying
    // runs named like a failure last, so the first screen is a working diagnosis.
    const bad = /(^|[^a-z])(broken|bad|fail(ed)?|error|corrupt)/i;
    const order = [...this.runs].sort((a, b) => Number(bad.test(a.run)) - Number(bad.test(b.run)));
    for (const cand of order.slice(0, 3)) {
      this.state = { run: cand.run };
      this.buildSelectors();
      if ((await this.show()) !== false) return;  // worked, or the user picked another
    }
  }

  /** The span the server analyses when none is named (discovery's span rule): the latest. */
  static defaultSpan(host) {
    return host.spans.find((x) => x.latest) || host.spans[host.spans.length - 1];
  }

  spanLabel(runName, hostName, spanName) {
    const run = this.runs.find((x) => x.run === runName);
    const host = run && run.hosts.find((x) => x.name === hostName);
    const span = host && host.spans.find((x) => x.name === spanName);
    return span ? span.label || span.name : spanName || "";
  }

  // ---------- selectors ----------
  buildSelectors() {
    const s = this.state;
    const run = this.runs.find((x) => x.run === s.run) || this.runs[0];
    s.run = run.run;
    const multi = run.hosts.length > 1;
    const pod = multi && (s.host === ALL_HOSTS || (!s.host && run.hosts.length >= POD_HOSTS));
    const host = pod ? null : run.hosts.find((x) => x.name === s.host) || run.hosts[0];
    s.host = pod ? ALL_HOSTS : host ? host.name : "";
    const span = host && (host.spans.find((x) => x.name === s.span) || App.defaultSpan(host));
    s.span = span ? span.name : "";
    const sel = (id, label, options, value, onchange) => {
      const el = h("select", { id, "aria-label": label, onchange: (e) => onchange(e.target.value) },
        options.map(([v, t]) => h("option", { value: v, selected: v === value, title: fullTitle(t, 120) }, optionText(t))));
      el.value = value;
      return h("label", { class: "pd-field" }, label + " ", el);
    };
    this.header.textContent = "";
    this.header.append(sel("pd-run", "Run", this.runs.map((x) => [x.run, x.run]), s.run, (v) => {
      this.state = { run: v, ...this.baseOf() }; this.buildSelectors(); this.show();
    }));
    const hostOptions = run.hosts.map((x) => [x.name, x.name]);
    if (multi) hostOptions.unshift([ALL_HOSTS, `All ${run.hosts.length} hosts (summary)`]);
    this.header.append(sel("pd-host", "Host", hostOptions, s.host, (v) => {
      this.state = { run: s.run, host: v, ...(v === ALL_HOSTS ? {} : this.baseOf()) }; this.buildSelectors(); this.show();
    }));
    if (host && host.spans.length > 1) {
      this.header.append(sel("pd-span", "Span", host.spans.map((x) => [x.name,
        `${x.label || x.name}${x.latest ? " (latest)" : ""}`]),
      s.span, (v) => { this.state = { run: s.run, host: s.host, span: v, ...this.baseOf() }; this.buildSelectors(); this.show(); }));
    }
    if (host && span && span.name) {
      const which = host.spans.length > 1 ? (span.latest ? `latest of ${host.spans.length} captures` :
        `capture ${host.spans.indexOf(span) + 1} of ${host.spans.length}; the latest is the default`) : "captured";
      this.header.append(h("span", { class: "pd-span-note pd-muted pd-small", id: "pd-span-note", title: this.spanRule },
        host.spans.length > 1 ? `${which}` : `captured ${span.label || span.name}`, " ",
        h("abbr", { class: "pd-help", title: this.spanRule }, "?")));
    }
    if (!pod) {
      this.header.append(h("button", { class: "pd-button", id: "pd-compare-with", "aria-expanded": String(!!this.pickerEl.firstChild),
        title: "Compare this run with another run, host or span: what changed per step, findings, ops",
        onclick: (e) => this.togglePicker(e.currentTarget) }, "Compare with…"));
    }
    this.deviceSlot = h("span", { class: "pd-device-slot" });
    this.header.append(this.deviceSlot);
    if (multi && !pod) {
      this.header.append(h("button", { class: "pd-button", id: "pd-compare", "aria-expanded": String(this.compare.open && this.compare.run === s.run),
        onclick: (e) => { const open = this.compare.toggle(s.run, run.hosts.map((x) => x.name), s.host); e.currentTarget.setAttribute("aria-expanded", String(open)); } },
      `Compare hosts (${run.hosts.length})`));
      this.compare.sync(s.run, s.host);
    } else if (!pod) {
      this.compare.close();
    }
  }

  /** Which selection the answers are for: run, host and capture (the step filters within). */
  selectionKey(s = this.state) {
    return `${s.run}|${s.host}|${s.span || ""}`;
  }

  /** A new selection starts: every answer still coming for the old one is cancelled (its
   *  fetches aborted, its token stale), and when the run, host, capture or device changed,
   *  everything derived from the old answers (diagnosis, collectives, gaps, timeline,
   *  the drawn cards) is dropped before anything of the new one is drawn, so no card can
   *  mix the two. Returns the new token. */
  beginSelection({ fresh = false } = {}) {
    const token = ++this.token;
    if (this.abort) this.abort.abort();
    this.abort = new AbortController();
    const key = `${this.selectionKey()}|${this.state.device || ""}`;
    if (fresh || key !== this.shownKey) {
      // a view of its own (a comparison, a pod's summary) draws no diagnosis: whatever
      // comes after it starts from a clean page
      this.shownKey = fresh ? null : key;
      this.diag = null; this.gaps = [];
      if (this.collKey !== this.selectionKey()) { this.coll = null; this.collKey = null; }
      if (this.timeline) { this.timeline.destroy(); this.timeline = null; }
      this.gapRange = null;
      if (this.deviceSlot) this.deviceSlot.textContent = "";
      if (this.pickerEl.firstChild) {   // the picker was for the old selection
        this.pickerEl.textContent = "";
        const b = this.header.querySelector("#pd-compare-with");
        if (b) b.setAttribute("aria-expanded", "false");
      }
      this.body.textContent = "";
      delete this.root.dataset.collectives;
    }
    return token;
  }

  /** getJSON for the current selection: aborted when the selection changes, and then
   *  answered {ok: false, aborted: true} rather than thrown (callers drop stale answers). */
  async fetchJSON(route, params) {
    const signal = this.abort ? this.abort.signal : undefined;
    try {
      return await getJSON(route, params, signal ? { signal } : undefined);
    } catch (e) {
      if (signal && signal.aborted) return { ok: false, aborted: true, status: 0, body: { error: "superseded" } };
      return { ok: false, status: 0, body: { error: String(e) } };
    }
  }

  /** The Collectives answer when it is this selection's (null otherwise: never another
   *  run's or host's figures on this page). */
  collectives() {
    return this.coll && this.collKey === this.selectionKey() ? this.coll : null;
  }

  /** The current selection: the per-host summary of a pod, a comparison with another run,
   * or one host's diagnosis. */
  show() {
    if (this.state.host === ALL_HOSTS) return this.showPod();
    return this.state.base_run ? this.showCompare() : this.loadDiagnosis();
  }

  /** The run being compared with, as state keys (empty when not comparing). */
  baseOf() {
    const s = this.state;
    return s.base_run ? { base_run: s.base_run, base_host: s.base_host, base_span: s.base_span } : {};
  }

  togglePicker(button) {
    if (this.pickerEl.firstChild) { this.pickerEl.textContent = ""; button.setAttribute("aria-expanded", "false"); return; }
    button.setAttribute("aria-expanded", "true");
    renderPicker(this.pickerEl, this.runs, this.state, {
      onCompare: (base) => {
        const s = this.state;
        this.pickerEl.textContent = "";
        this.state = { run: s.run, host: s.host, span: s.span, device: s.device, ...base };
        this.buildSelectors(); this.show();
      },
      onCancel: () => { this.pickerEl.textContent = ""; button.setAttribute("aria-expanded", "false"); },
    });
  }

  /** Before (base_*) → after (the selection), from /compare; the URL keeps both. */
  async showCompare() {
    const token = this.beginSelection({ fresh: true });   // the comparison draws its own body
    const s = this.state;
    delete s.step; delete s.gap; delete s.zoom;
    writeState(s);
    delete this.root.dataset.loaded;
    this.setStatus("");
    this.diag = null;
    this.deviceSlot.textContent = "";
    this.compare.close();
    this.body.textContent = "";
    const name = (r, host, span) => `${r} · ${host}${span ? " · " + span : ""}`;
    const before = h("span", { id: "pd-cmp-before" }, name(s.base_run, s.base_host, s.base_span));
    const after = h("span", { id: "pd-cmp-after" }, name(s.run, s.host, s.span));
    this.body.append(h("div", { class: "pd-cmp-bar", role: "group", "aria-label": "Comparison" },
      h("b", {}, "Before: "), before, h("span", { class: "pd-cmp-arrow", "aria-hidden": "true" }, " → "),
      h("b", {}, "After: "), after,
      h("button", { class: "pd-button", id: "pd-compare-swap", title: "Swap before and after", onclick: () => {
        this.state = { run: s.base_run, host: s.base_host, span: s.base_span, base_run: s.run, base_host: s.host, base_span: s.span };
        this.buildSelectors(); this.show();
      } }, "⇄ Swap"),
      h("button", { class: "pd-link-btn", id: "pd-compare-close", onclick: () => {
        this.state = { run: s.run, host: s.host, span: s.span, device: s.device };
        this.buildSelectors(); this.show();
      } }, "Close comparison")));
    const slot = h("div", { id: "pd-compare-view" });
    this.body.append(slot);
    this.compareRuns = new CompareRuns(slot, {
      onOpenStep: (x) => { this.state = { run: x.run, host: x.host, span: x.span, step: x.step }; this.buildSelectors(); this.show(); },
    });
    const ok = await this.compareRuns.show({ ...this.params(), base_run: s.base_run, base_host: s.base_host, base_span: s.base_span || undefined });
    if (ok === null || token !== this.token) return null;
    // the step charts draw on the next frame (after layout): the view is loaded once they have
    await new Promise((done) => requestAnimationFrame(() => done()));
    if (token !== this.token) return null;
    if (ok) {
      before.textContent = this.compareRuns.data.before.label;
      after.textContent = this.compareRuns.data.after.label;
    }
    this.root.dataset.loaded = `${s.run}|${s.host}||compare-${ok ? "ok" : "error"}`;
    return ok;
  }

  showPod() {
    this.beginSelection({ fresh: true });    // a diagnosis still loading must not replace this view
    const s = this.state;
    const run = this.runs.find((x) => x.run === s.run);
    writeState(s);
    this.setStatus("");
    this.diag = null;
    this.deviceSlot.textContent = "";
    this.body.textContent = "";
    this.body.append(h("p", { class: "pd-muted pd-pod-hint" },
      `${run.hosts.length} hosts. Stragglers are listed first; pick a host to see its steps, gaps and timeline.`));
    this.compare.show(s.run, run.hosts.map((x) => x.name), "", { pinned: true });
    this.root.dataset.loaded = `${s.run}|${ALL_HOSTS}||pod`;
    return true;
  }

  /** Polls /progress while a diagnosis is computed and shows it under the selectors. */
  watchProgress(token, label) {
    let stop = false, timer = null;
    const poll = async () => {
      if (stop || token !== this.token) return;
      let r;
      r = await this.fetchJSON("progress", this.params());
      if (stop || token !== this.token) return;
      if (r && r.ok && r.body.state === "running") this.setProgress(label, r.body);
      timer = setTimeout(poll, PROGRESS_POLL_MS);
    };
    timer = setTimeout(poll, PROGRESS_DELAY_MS);   // cached answers come back before this
    return () => { stop = true; clearTimeout(timer); };
  }

  setProgress(label, p) {
    this.statusEl.textContent = "";
    this.statusEl.hidden = false;
    // fraction null: the analysis runs elsewhere (a pod's Dask task), its bar has no value
    const known = p.fraction !== null && p.fraction !== undefined;
    const pct = Math.round(100 * (p.fraction || 0));
    this.statusEl.append(h("div", { class: "pd-progress", "data-phase": p.phase },
      h("span", { class: "pd-loading" }, `${label}: ${p.text}`),
      h("progress", { max: "100", value: known ? String(pct) : null, "aria-label": "Analysis progress" }),
      known ? h("span", { class: "pd-muted pd-small" }, `${pct} % · ${(p.elapsed_s || 0).toFixed(1)} s`) : null));
  }

  params(extra) {
    const s = this.state;
    return { run: s.run, host: s.host, span: s.span || undefined, ...(extra || {}) };
  }

  setStatus(text, busy) {
    this.statusEl.textContent = "";
    if (!text) { this.statusEl.hidden = true; return; }
    this.statusEl.hidden = false;
    if (busy) this.statusEl.append(h("span", { class: "spinner", "aria-hidden": "true" }));
    this.statusEl.append(h("span", { class: busy ? "pd-loading" : "" }, text));
  }

  showError(body) {
    this.body.textContent = "";
    this.body.append(h("div", { class: "pd-error", role: "alert" },
      h("strong", {}, "This run cannot be analysed"),
      h("p", { class: "pd-error-msg" }, body.error || "unknown error"),
      body.file ? h("p", {}, "File: ", h("code", { class: "pd-error-file" }, body.file)) : null,
      h("p", { class: "pd-muted" }, "Other runs are unaffected: pick one above.")));
  }

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
  }

  // ---------- diagnosis ----------
  async loadDiagnosis() {
    const token = this.beginSelection();
    const s = this.state;
    delete this.root.dataset.loaded;
    if (!this.body.firstChild) {
      this.body.append(h("p", { class: "pd-loading pd-body-loading" }, h("span", { class: "spinner", "aria-hidden": "true" }),
        ` Loading ${s.run} / ${s.host}…`));
    }
    writeState(s);
    this.setStatus(`Analysing ${s.run} / ${s.host}…`, true);
    this.body.setAttribute("aria-busy", "true");
    const stopProgress = this.watchProgress(token, `Analysing ${s.host}`);
    // the gaps (and step figures) of the device shown: the largest gaps of a capture can all
    // lie on other devices. Without a device in the URL the first answer names the devices
    // and, when several have gaps, the default one's own are asked for.
    const ask = (device) => this.fetchJSON("diagnosis", this.params({ step: s.step, device, gaps_limit: PAGE }));
    let r;
    try {
      r = await ask(s.device);
      if (token === this.token && !r.ok && r.status === 400 && s.device) {
        s.device = "";          // a URL's device this capture does not have: its default
        r = await ask();
      }
      if (token === this.token && r.ok && (s.device === undefined || s.device === "")) {
        const devs = r.body.devices || [];
        const pick = devs.find((x) => x.ops > 0) || devs[0];
        if (pick) s.device = String(pick.id);
        if (pick && devs.some((x) => x.gaps > 0 && x.id !== pick.id)) r = await ask(s.device);
      }
    } catch (e) {
      r = { ok: false, body: { error: String(e) } };
    } finally {
      stopProgress();
    }
    if (token !== this.token) return null;  // superseded by a newer selection
    this.setStatus("");
    this.body.removeAttribute("aria-busy");
    this.root.dataset.loaded = `${s.run}|${s.host}|${s.step || ""}|${r.ok ? "ok" : "error"}`;
    if (!r.ok) { this.diag = null; this.showError(r.body); return false; }
    this.diag = r.body;
    this.gaps = r.body.gaps;
    const devs = this.diag.devices || [];
    if (!devs.some((d) => String(d.id) === String(s.device))) s.device = devs.length ? String(devs[0].id) : "0";
    writeState(s);
    this.renderAll();
    if (s.gap) this.selectGap(s.gap, { keepZoom: true });
    return true;
  }

  renderDeviceSelect() {
    const d = this.diag;
    this.deviceSlot.textContent = "";
    if (d.devices.length > 1) {
      const el = h("select", { id: "pd-device", "aria-label": "Device", onchange: (e) => {
        // its own gaps and step figures: asked for again
        this.state.device = e.target.value; this.state.gap = ""; this.state.zoom = ""; this.loadDiagnosis();
      } }, d.devices.map((x) => h("option", { value: String(x.id) }, x.name)));
      el.value = this.state.device;
      this.deviceSlot.append(h("label", { class: "pd-field" }, "Device ", el));
    }
  }

  /** Whether any device of the diagnosis ran anything (a CPU-only trace has none). */
  hasDeviceActivity() {
    return (this.diag.devices || []).some((x) => x.ops > 0);
  }

  renderAll() {
    const d = this.diag;
    this.body.textContent = "";
    this.renderDeviceSelect();
    this.summaryEl = h("section", { class: "pd-card pd-summary", "aria-label": "Summary" });
    this.collBody = h("div", { id: "pd-collectives-body" });
    this.collEl = h("section", { class: "pd-card", id: "pd-collectives", "aria-label": "Collectives", hidden: true },
      h("h2", {}, "Collectives: waiting for peers ", h("span", { class: "pd-muted pd-small" },
        "(this host's collective ops matched with the other participants of the run)")), this.collBody);
    this.stepsEl = h("div", { id: "pd-steps", class: "pd-steps" });
    this.timelineEl = h("div", { id: "pd-timeline", class: "pd-timeline" });
    this.listEl = h("div", { id: "pd-gaps", class: "pd-gaps", role: "list" });
    this.detailEl = h("section", { id: "pd-detail", class: "pd-card pd-detail", "aria-label": "Gap detail" },
      h("p", { class: "pd-muted" }, "Select a gap to see what the host was doing."));
    const overlayHref = routeUrl("overlay", this.params()).href;
    this.annEl = h("div", { id: "pd-annotations", class: "pd-annotations" });
    this.opsEl = h("div", { id: "pd-device-ops", class: "pd-device-ops" });
    this.exportEventsEl = h("a", { class: "pd-link", id: "pd-export-events", href: overlayHref,
      download: `perfdiag-overlay-events-${this.state.host}.json`,
      title: "Chrome trace JSON: the diagnosis overlay plus the trace's own events in the timeline's visible window" }, "Export with events");
    this.gapsTitle = h("h2", {});
    this.legendEl = h("div", {});
    this.body.append(
      this.summaryEl,
      this.collEl,
      h("section", { class: "pd-card" },
        h("h2", {}, "Steps ", h("span", { class: "pd-muted pd-small" }, "(bar height ∝ √step time; click a step to filter gaps)")),
        this.legendEl, this.stepsEl),
      h("div", { class: "pd-columns", hidden: !this.hasDeviceActivity() },
        h("section", { class: "pd-card pd-gaps-card" },
          h("div", { class: "pd-row" }, this.gapsTitle,
            h("a", { class: "pd-link", id: "pd-export", href: overlayHref,
              download: `perfdiag-overlay-${this.state.host}.json` }, "Export overlay"),
            this.exportEventsEl),
          this.listEl),
        this.detailEl),
      h("section", { class: "pd-card" },
        h("h2", {}, "Timeline ", h("span", { class: "pd-muted pd-small" }, "(wheel or +/−: zoom, drag or ←/→: pan, 0 or double-click: reset" +
          (this.hasDeviceActivity() ? ", click a gap to select it; host threads show their innermost ops first, a ▸ pool opens on a click)" : "; host threads show their innermost ops first, a ▸ pool opens on a click)"))),
        this.timelineEl),
      h("section", { class: "pd-card", "aria-label": "Annotations", hidden: !this.hasDeviceActivity() },
        h("h2", {}, "Device time by annotation", h("span", { class: "pd-muted pd-small" },
          this.state.step ? ` (step ${this.state.step}; whole trace in brackets)` : " (whole trace; select a step to see it alone)")),
        this.annEl),
      h("section", { class: "pd-card", "aria-label": "Device time by op", id: "pd-device-ops-card", hidden: !this.hasDeviceActivity() },
        h("h2", {}, "Device time by op ", h("span", { class: "pd-muted pd-small" },
          this.state.step ? `(ops launched by step ${this.state.step}; click an op for its longest instance in the trace viewer) ` :
            "(whole trace; select a step to see the ops it launched; click an op for its longest instance in the trace viewer) "),
        h("abbr", { title: ((d.device_ops || {}).definition) || "", class: "pd-help" }, "?")),
        this.opsEl));
    this.renderSummary();
    this.renderLegend();
    this.renderSteps();
    this.renderGapList();
    renderAnnotations(this.annEl, d.annotations || [], { step: this.state.step });
    const annLeft = (d.annotations_total || 0) - (d.annotations || []).length;
    if (annLeft > 0) {
      this.annEl.append(h("p", { class: "pd-muted pd-small", id: "pd-ann-more" },
        `${annLeft} annotation(s) with less device time not listed (tb-perfdiag diagnose --json --full lists every one).`));
    }
    this.renderDeviceOps();
    if (this.timeline) this.timeline.destroy();
    this.timeline = new Timeline(this.timelineEl, {
      devices: d.devices,
      onZoom: (v) => {
        this.state.zoom = v ? `${v.start}_${v.end}` : ""; writeState(this.state);
        this.updateExportEvents(v || this.timeline.view);
      },
      onSelectGap: (id) => this.selectGap(id, { keepZoom: true }),
      fetchLanes: (start, end, width) => this.fetchJSON("timeline", this.params({ start_ns: start, end_ns: end, width })),
    });
    this.renderTimeline();
    this.updateExportEvents(this.timeline.view);
    this.loadCollectives();
  }

  /** The Collectives card: asked once per host and capture (again while the run's other
   *  hosts are being analysed); once matched, its peer wait joins the step bars, the duty
   *  cycle and the collective rows of "Device time by op". */
  async loadCollectives() {
    const token = this.token, s = this.state;
    const key = this.selectionKey(s);
    if (this.coll && this.collKey === key && this.coll.state !== "pending") { this.showCollectives(); return; }
    this.coll = null; this.collKey = key;
    this.root.dataset.collectives = "loading";
    for (;;) {
      const r = await this.fetchJSON("collectives", this.params());
      if (token !== this.token || this.collKey !== key) return;
      this.coll = r.ok ? r.body : { state: "error", error: r.body.error || `HTTP ${r.status}` };
      this.showCollectives();
      if (this.coll.state !== "pending") return;
      await new Promise((done) => setTimeout(done, COLLECTIVES_POLL_MS));
      if (token !== this.token) return;
    }
  }

  showCollectives() {
    const c = this.collectives();
    if (!c || !this.diag) return;
    this.root.dataset.collectives = c.state;
    this.collEl.hidden = c.state === "none";
    renderCollectives(this.collBody, c, {
      onHost: (host) => { this.state = { run: this.state.run, host }; this.buildSelectors(); this.show(); },
      onStep: (step) => {
        this.state.step = String(step); this.state.gap = ""; this.state.zoom = ""; this.loadDiagnosis();
      },
    });
    this.renderDeviceOps();     // its collective rows say wait/transfer, or why not
    // whatever the answer, the cards that read it are drawn again from it (a card drawn
    // before it came must not keep a figure it no longer backs)
    mergeStepWait(this.diag.steps, c);
    this.renderDerived();
  }

  /** The cards that combine the diagnosis with the Collectives answer. */
  renderDerived() {
    this.summaryEl.textContent = "";
    this.renderSummary();
    this.renderLegend();
    this.renderSteps();
    this.renderGapList();
  }

  updateExportEvents(v) {
    if (!this.exportEventsEl || !v) return;
    const us = (ns) => (ns / 1000).toFixed(3);
    this.exportEventsEl.href = routeUrl("overlay", this.params({ with_events: 1, start_us: us(v.start), end_us: us(v.end) })).href;
  }

  renderLegend() {
    // only what the chart shows: busy, peer wait when joined, the causes this device has,
    // other idle where a step has some
    const key = String(this.device().id ?? 0);
    const rest = (this.diag.steps || []).some((st) => {
      const x = (st.devices || {})[key];
      return x && (x.idle_ns || 0) > Object.values(x.idle_by_cause_ns || {}).reduce((a, v) => a + v, 0);
    });
    const coll = this.collectives();
    const wait = coll && coll.state === "joined" ? ["peer_wait"] : [];
    const causes = this.hasDeviceActivity() ? ["busy", ...wait, ...Object.entries(this.device().idle_by_cause_ns || {})
      .filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]).map(([c]) => c), ...(rest ? ["other_idle"] : [])] : ["host_step"];
    this.legendEl.textContent = "";
    this.legendEl.append(h("div", { class: "pd-legend" }, causes.map((c) =>
      h("span", { class: "pd-legend-item", "data-cause": c }, h("span", { class: "chip", style: { background: causeColor(c) } }), causeLabel(c)))));
  }

  device() {
    return this.diag.devices.find((x) => String(x.id) === String(this.state.device)) || this.diag.devices[0] || {};
  }

  renderSummary() {
    const d = this.diag, el = this.summaryEl;
    const dutyDef = (d.definitions || {}).duty_cycle || "";
    const { count: nSteps, avg } = stepStats(d);
    if (!this.hasDeviceActivity()) {
      el.append(h("div", { class: "pd-no-device", id: "pd-no-device", role: "note" },
        h("b", {}, "No device activity in this trace."),
        ` It holds host work only (${(d.devices || []).length ? "the device was not profiled" : "a CPU-only run, or the device was not profiled"}), so there is no duty cycle and no idle gap to explain. `,
        "The host timeline below shows what each thread did; to diagnose the accelerator, profile with its activity on (",
        h("code", {}, "ProfilerActivity.CUDA"), " in PyTorch; a TPU/GPU backend for XLA)."));
    }
    // the duty cycle over the window its idle by cause adds up over (the steps, or the
    // capture): the figure compare and the CLI show; the device's own active span beside it
    // over the steps the steady state leaves start-up out (paid once per run)
    const steadyDuty = (w) => (w.steady_duty_cycle != null ? w.steady_duty_cycle : w.duty_cycle);
    const overSteps = (x) => x.steps_window && x.steps_window.duty_cycle != null && x.steps_window.window_ns !== x.window_ns;
    const devRows = d.devices.filter((x) => x.ops > 0).map((x) => {
      const wait = dutyWaitText(this.collectives(), x.id);
      return h("div", { class: "pd-stat", title: dutyDef },
        h("span", { class: "pd-stat-value pd-duty" }, formatPct(overSteps(x) ? steadyDuty(x.steps_window) : x.duty_cycle)),
        h("span", { class: "pd-stat-label" }, overSteps(x)
          ? `${x.name} duty cycle over ${d.step_source === "whole_trace" ? "the capture" : x.steps_window.past_steps ? "the steps and its work outside them" : "the steps"}${x.steps_window.startup_ns ? ` leaving out ${formatNs(x.steps_window.startup_ns)} of start-up` : ""} (${formatPct(x.duty_cycle)} over its active span) `
          : `${x.name} duty cycle (its active span) `, h("abbr", { title: dutyDef, class: "pd-help" }, "?")),
        wait ? h("span", { class: "pd-stat-label pd-duty-wait", "data-device": String(x.id),
          style: { color: causeColor("peer_wait") } }, `— ${wait}`) : null);
    });
    const idle = Object.entries(this.device().idle_by_cause_ns || {}).sort((a, b) => b[1] - a[1]);
    const findings = [...(d.findings || [])].sort((a, b) => (b.time_lost_ns_per_step || 0) - (a.time_lost_ns_per_step || 0));
    // the largest loss leads: peer wait, start-up or any one cause, whichever costs most
    const dev = this.device(), coll = this.collectives();
    const hl = headline(dev, coll, nSteps, { duty: overSteps(dev) ? dev.steps_window.duty_cycle : dev.duty_cycle });
    const peer = hl && (hl.loss && hl.loss.kind === "peer_wait" ? hl.loss : null);
    const top = findings.filter((f) => f.top !== false).slice(0, 6).map((f) => this.findingItem(f));
    if (peer) {   // busy time, so no finding of the server's: listed where its size ranks it
      const at = findings.filter((f) => f.top !== false).slice(0, 6).findIndex((f) => (f.time_lost_ns_per_step || 0) < peer.per_step_ns);
      top.splice(at < 0 ? top.length : at, 0, this.peerWaitItem(peer, coll));
    }
    // start-up costs no step but is what such a capture mostly holds: shown after them
    top.push(...findings.filter((f) => f.kind === "startup").slice(0, 2).map((f) => this.findingItem(f)));
    put(el,
      hl ? h("p", { class: "pd-headline", id: "pd-headline", "data-loss": hl.loss ? hl.loss.kind : "" },
        h("b", {}, `${dev.name}: `), hl.text) : null,
      h("div", { class: "pd-stats" }, devRows,
        // the one step time of every face (definitions.typical_step): the CLI, check,
        // compare and MCP say the same figure; the steady state leaves the steps that hold
        // start-up out (paid once per run)
        h("div", { class: "pd-stat", title: (d.definitions || {}).typical_step || "" },
          h("span", { class: "pd-stat-value pd-typical-step" }, formatNs(d.typical_step_ns ?? d.steady_step_ns ?? avg)),
          h("span", { class: "pd-stat-label", title: [(d.definitions || {}).typical_step, d.step_marker ? `each step marked by ${d.step_marker}` : ((d.definitions || {}).steps || "")].filter(Boolean).join("\n") },
            `typical step time (${plural(nSteps, "step")}, from ${d.step_source || "?"}${d.steady_step_ns != null
              ? `; leaving out start-up in step ${(d.startup_steps || []).join(", ")}, ${formatNs(avg)} with it` : ""}) `,
            h("abbr", { title: (d.definitions || {}).typical_step || "", class: "pd-help" }, "?")))),
      h("h3", {}, "Idle time by cause ", h("abbr", { title: (d.definitions || {}).causes || "", class: "pd-help" }, "?")),
      h("ul", { class: "pd-idle" }, idle.length ? idle.map(([c, ns]) => h("li", {},
        h("span", { class: "chip", style: { background: causeColor(c) } }), `${causeLabel(c)}: `, h("b", {}, formatNs(ns)))) :
        h("li", { class: "pd-muted" }, this.hasDeviceActivity() ? "No idle gaps above the threshold." : "None: no device activity.")),
      h("h3", {}, "Top findings"),
      h("ol", { class: "pd-findings" }, top),
      h("div", { class: "pd-small pd-muted" }, findings.some((f) => f.top === false && f.kind !== "startup") ?
        `${findings.filter((f) => f.top === false && f.kind !== "startup").length} more finding(s) under 1 % of a step not shown.` : ""));
    renderEfficiency(el, d, { deviceId: this.device().id ?? 0, step: this.state.step, coll: this.collectives() });
    const warnings = (d.warnings || []).filter((w) => this.hasDeviceActivity() || !String(w).startsWith("no device activity"));
    if (warnings.length) el.append(h("ul", { class: "pd-warnings" }, warnings.map((w) => h("li", {}, squeeze(w, 80, 500)))));
  }

  findingItem(f) {
    const d = this.diag;
    return h("li", { class: "pd-finding", "data-finding": String((d.findings || []).indexOf(f)) },
      h("div", {}, h("b", { title: fullTitle(f.title, 300) }, squeeze(f.title, 80, 300)), " ", h("span", { class: "pd-badge" }, findingCost(f)),
        f.confidence ? h("span", { class: "pd-muted pd-small" }, ` · ${f.confidence} confidence`) : null),
      h("div", { class: "pd-small" }, squeeze(f.detail)),
      f.fix ? h("div", { class: "pd-fix" }, h("b", {}, "Fix: "), squeeze(f.fix)) : null,
      (f.evidence && f.evidence.gaps || []).length ? h("div", { class: "pd-small" }, "Gaps: ",
        gapRefs(f.evidence).slice(0, 5).map((g, i) => [i ? ", " : "", h("a", { href: "#", class: "pd-gap-link", "data-gap": g.id,
          title: `gap ${g.id}`, onclick: (ev) => { ev.preventDefault(); this.selectGap(g.id); } },
          gapLabel(g, (d.devices || []).filter((x) => x.ops > 0).length > 1))]),
        f.evidence.gaps.length > 5 ? ` and ${f.evidence.gaps.length - 5} more` : "") : null,
      (f.chain || []).length ? h("details", { class: "pd-small" }, h("summary", {}, "Call chain"),
        squeeze(f.chain.join(" › "))) : null);
  }

  /** Peer wait as a finding: busy time inside collectives waiting for the last participant;
   *  what to change is the straggler's own loss. */
  peerWaitItem(loss, coll) {
    const st = ((coll && coll.stragglers) || [])[0];
    const who = loss.who || (st && st.host) || null;
    const open = (host) => h("button", { class: "pd-link-btn", "data-host": host, title: `Open ${host}`, onclick: () => {
      this.state = { run: this.state.run, host }; this.buildSelectors(); this.show();
    } }, host);
    const why = st && st.host === who && st.cause ? ` (late because of ${causeLabel(st.cause).toLowerCase()}${st.culprit ? `, ${squeeze(st.culprit, 80, 200)}` : ""})` : "";
    return h("li", { class: "pd-finding pd-finding-peer", id: "pd-finding-peer-wait" },
      h("div", {}, h("b", {}, `Waiting for ${who || "peers"}${loss.where ? ` at ${loss.where}` : ""}: busy time spent until the last participant arrives`), " ",
        h("span", { class: "pd-badge" }, `≈ ${formatNs(loss.per_step_ns)} lost per step`)),
      h("div", { class: "pd-small" }, `${formatNs(loss.ns)} over the capture inside collectives; see Collectives below.`),
      h("div", { class: "pd-fix" }, h("b", {}, "Fix: "), who && who !== this.state.host
        ? ["make ", open(who), ` arrive on time${why}: open it and fix its largest loss; this host then gains about that much per step.`]
        : `balance the work between the participants, or overlap the collective with compute${why}.`));
  }

  renderSteps() {
    renderStepsChart(this.stepsEl, this.diag, {
      deviceKey: this.device().id ?? 0, selectedStep: this.state.step, hostOnly: !this.hasDeviceActivity(),
      onSelect: (id) => {
        this.state.step = id === null ? "" : String(id);
        this.state.gap = ""; this.state.zoom = "";
        this.loadDiagnosis();
      },
    });
  }

  renderGapList() {
    const s = this.state, d = this.diag;
    const dev = this.device();
    const gaps = this.gaps.filter((g) => String(g.device) === String(dev.id))
      .sort((a, b) => b.duration_ns - a.duration_ns);
    this.gapsTitle.textContent = `Idle gaps${s.step ? ` in step ${s.step}` : ""} (${d.gaps_total} total, largest first)`;
    this.listEl.textContent = "";
    if (s.step) {
      this.listEl.append(h("button", { class: "pd-link-btn", id: "pd-clear-step", onclick: () => {
        this.state.step = ""; this.state.gap = ""; this.state.zoom = ""; this.loadDiagnosis();
      } }, "Show all steps"));
    }
    const wait = this.peerWaitNote(dev, s.step);
    if (wait) this.listEl.append(wait);
    if (!gaps.length) this.listEl.append(h("p", { class: "pd-muted" }, "No gaps above the threshold here."));
    for (const g of gaps) {
      const chain = g.waited_for ? squeeze(g.waited_for.chain.join(" › "), 80, 400) : "";
      this.listEl.append(h("button", {
        class: "gap-row" + (g.id === s.gap ? " selected" : ""), "data-gap": g.id, role: "listitem",
        title: cut(g.evidence, 2000), onclick: () => this.selectGap(g.id),
      },
      h("span", { class: "chip", style: { background: causeColor(g.cause) } }),
      h("span", { class: "gap-dur" }, formatNs(g.duration_ns)),
      h("span", { class: "gap-cause" }, g.cause_label || causeLabel(g.cause)),
      h("span", { class: "gap-step" }, g.step === null || g.step === undefined ? (g.outside === "after_last_step" ? "after the last step" : "before the first step") : `step ${g.step}`),
      h("span", { class: "gap-chain" }, chain ? `waited for ${chain}` : "")));
    }
    if (d.gaps_total > this.gaps.length) {
      this.listEl.append(h("button", { class: "pd-link-btn", id: "pd-more", onclick: async () => {
        const token = this.token;
        const r = await this.fetchJSON("diagnosis", this.params({ step: s.step, device: d.gaps_device ?? undefined, gaps_offset: this.gaps.length, gaps_limit: PAGE }));
        if (token === this.token && r.ok) { this.gaps = this.gaps.concat(r.body.gaps); this.renderGapList(); this.renderTimeline(); }
      } }, `Load more (${d.gaps_total - this.gaps.length} left)`));
    }
  }

  /** Above the gaps: the device's peer wait (busy inside collectives, so no gap) in the
   *  step shown or the whole capture, with whom it waited for. */
  peerWaitNote(dev, step) {
    const c = this.collectives();
    if (!c || c.state !== "joined") return null;
    const d = (c.devices || []).find((x) => String(x.id) === String(dev.id));
    const ns = step ? ((c.step_peer_wait_ns || {})[String(step)] || {})[String(dev.id)] || 0 : d ? d.wait_ns : 0;
    if (!ns) return null;
    return h("p", { class: "pd-small pd-gap-peer-wait", id: "pd-gap-peer-wait" },
      h("span", { class: "chip", style: { background: causeColor("peer_wait") } }),
      `Also lost, but not idle: ${formatNs(ns)} of busy time ${step ? `in step ${step}` : "over the capture"} waiting for peers inside collectives` +
      (d && d.waited_for ? ` (mostly for ${d.waited_for}${d.waited_at ? ` at ${d.waited_at}` : ""})` : "") + " — see Collectives above.");
  }

  /** The window the timeline spans: the one the figures use (each device's steps window,
   *  lead-in and tail gaps included), the listed gaps and the selected gap; with a step
   *  selected, that step. */
  timelineBounds() {
    const dev = this.device();
    const step = this.state.step !== undefined && this.state.step !== "" ?
      (this.diag.steps || []).find((x) => String(x.id) === String(this.state.step)) : null;
    const sel = this.gapRange && this.gapRange.id === this.state.gap ? [this.gapRange] : [];
    const span = (xs) => {
      xs = xs.filter((x) => x && Number.isFinite(x.start) && Number.isFinite(x.end) && x.end > x.start);
      return xs.length ? { start: Math.min(...xs.map((x) => x.start)), end: Math.max(...xs.map((x) => x.end)) } : null;
    };
    if (step) {
      const sd = (step.devices || {})[String(dev.id)] || step;
      return span([{ start: step.start_ns, end: step.end_ns }, { start: sd.start_ns, end: sd.end_ns }, ...sel]);
    }
    const devs = (this.diag.devices || []).filter((x) => x.ops > 0 && x.start_ns !== null && x.end_ns !== null);
    const steps = this.diag.steps || [];
    const parts = [...sel];
    if (devs.length) {
      for (const x of devs) {
        const w = x.steps_window || {};
        parts.push({ start: x.start_ns, end: x.end_ns }, { start: w.start_ns, end: w.end_ns });
      }
      if (steps.length) parts.push({ start: steps[0].start_ns, end: steps[steps.length - 1].end_ns });
      for (const g of this.gaps || []) parts.push({ start: g.start_ns, end: g.end_ns });
    } else {               // host work only: the whole trace
      const sp = (this.diag.source || {}).span_ns;
      if (sp) parts.push({ start: sp[0], end: sp[1] });
      if (!parts.length && steps.length) parts.push({ start: steps[0].start_ns, end: steps[steps.length - 1].end_ns });
    }
    return span(parts) || { start: 0, end: 1000 };
  }

  /** Gap `g` ({id, start_ns, end_ns, duration_ns}) drawn in the timeline's view: the view
   *  moves to it unless `keepZoom` and it is in view already. */
  bringGapIntoView(g, keepZoom) {
    if (!this.timeline || !g || !Number.isFinite(g.start_ns) || !Number.isFinite(g.end_ns)) return;
    this.gapRange = { id: g.id, start: g.start_ns, end: g.end_ns };
    const v = this.timeline.view, b = this.timeline.bounds;
    const inView = g.start_ns >= v.start && g.end_ns <= v.end;
    const inBounds = g.start_ns >= b.start && g.end_ns <= b.end;
    if (keepZoom && inView && inBounds) return;
    const pad = Math.max((g.end_ns - g.start_ns) * 0.5, 1000);
    this.state.zoom = `${Math.round(g.start_ns - pad)}_${Math.round(g.end_ns + pad)}`;
    writeState(this.state);
    this.renderTimeline();
  }

  renderTimeline() {
    const bounds = this.timelineBounds();
    let view = null;
    if (this.state.zoom) {
      const [a, b] = this.state.zoom.split("_").map(Number);
      if (Number.isFinite(a) && Number.isFinite(b) && b > a) view = { start: a, end: b };
    }
    this.timeline.setData({
      gaps: this.gaps, devices: this.diag.devices, selectedGap: this.state.gap,
      steps: this.diag.steps || [], bounds, view,
    });
    this.updateExportEvents(this.timeline.view);
  }

  // ---------- gap detail ----------
  async selectGap(id, { keepZoom } = {}) {
    // a gap of another device (a finding's evidence, a pasted URL): that device's list
    const dev = String(id).split("-")[0];
    if (this.diag && dev !== String(this.state.device) && (this.diag.devices || []).some((x) => String(x.id) === dev)) {
      this.state.device = dev; this.state.gap = id; this.state.zoom = "";
      return this.loadDiagnosis();
    }
    this.state.gap = id;
    writeState(this.state);
    for (const b of this.listEl.querySelectorAll(".gap-row")) {
      b.classList.toggle("selected", b.dataset.gap === id);
      if (b.dataset.gap === id) {  // bring it into the list's own view, without scrolling the page
        const l = this.listEl, top = b.offsetTop - l.offsetTop;
        if (top < l.scrollTop || top + b.offsetHeight > l.scrollTop + l.clientHeight) l.scrollTop = Math.max(0, top - 8);
      }
    }
    if (this.timeline) { this.timeline.selectedGap = id; this.timeline.draw(); }
    const listed = this.gaps.find((x) => x.id === id);
    if (listed) { this.markGapStep(listed.step); this.bringGapIntoView(listed, keepZoom); }
    this.detailEl.textContent = "";
    this.detailEl.append(h("p", { class: "pd-loading" }, "Loading gap…"));
    const token = this.token;
    const r = await this.fetchJSON("gap", this.params({ id }));
    if (token !== this.token || this.state.gap !== id) return;
    this.detailEl.textContent = "";
    if (!r.ok) {
      this.detailEl.append(h("p", { class: "pd-error", role: "alert" }, r.body.error || `HTTP ${r.status}`));
      return;
    }
    this.markGapStep(r.body.step);
    this.renderDetail(r.body);
    if (!listed) this.bringGapIntoView(r.body, keepZoom);
  }

  /** The step of the selected gap, marked in the step chart (the step filter stays as it is). */
  markGapStep(step) {
    for (const b of this.stepsEl.querySelectorAll(".step-bar")) {
      b.classList.toggle("gap-marked", barHoldsStep(b, step));
    }
  }

  /** "3.29 ms idle in step 44 on GPU 0": a gap as a person names it (its id stays in the URL). */
  gapTitle(g) {
    const dev = (this.diag && this.diag.devices || []).find((x) => String(x.id) === String(g.device));
    const where = stepPlace(g);
    return `${formatNs(g.duration_ns)} idle ${where}${dev ? ` on ${dev.name}` : ""}`;
  }

  renderDeviceOps() {
    renderDeviceOps(this.opsEl, this.diag.device_ops, {
      deviceId: this.device().id ?? 0,
      collectives: this.collectives(),
      opHref: (o) => this.opViewerUrl(o),
      onFinding: (i) => {
        const li = this.summaryEl.querySelector(`.pd-finding[data-finding="${i}"]`);
        (li || this.summaryEl).scrollIntoView({ block: "center" });
        if (li) { li.classList.add("pd-flash"); setTimeout(() => li.classList.remove("pd-flash"), 1500); }
      },
    });
    renderDeviceRoofline(this.opsEl, this.diag.device_ops, this.device().id ?? 0);
  }

  /** An op's longest instance: the trace viewer on the overlay with the real events around
   *  it (as for a gap), or, without the Profile plugin, that Chrome trace JSON itself. */
  opViewerUrl(o) {
    const v = o.viewer;
    const overlay = routeUrl("overlay", this.params({ with_events: 1, start_us: v.window_us[0].toFixed(3), end_us: v.window_us[1].toFixed(3) }));
    if (!this.profilePlugin) return overlay.href;
    const u = new URL("data/plugin/profile/trace_viewer_index.html", TB_ROOT);
    u.search = `is_streaming=false&is_oss=true&trace_data_url=${encodeURIComponent(overlay.pathname + overlay.search)}` +
      `&view_start=${v.view_ms[0].toFixed(6)}&view_end=${v.view_ms[1].toFixed(6)}`;
    return u.href;
  }

  /** The overlay around gap `g` (diagnosis tracks over the real events of its window). */
  overlayUrl(g) {
    return routeUrl("overlay", this.params({ gap: g.id }));
  }

  /** The Profile plugin's trace viewer on our overlay of gap `g`, opened at the gap. */
  traceViewerUrl(g) {
    const overlay = this.overlayUrl(g);
    const v = (g.viewer || {}).view_ms || [(g.start_ns - 10000) / 1e6, (g.end_ns + 10000) / 1e6];
    const u = new URL("data/plugin/profile/trace_viewer_index.html", TB_ROOT);
    u.search = `is_streaming=false&is_oss=true&trace_data_url=${encodeURIComponent(overlay.pathname + overlay.search)}` +
      `&view_start=${v[0].toFixed(6)}&view_end=${v[1].toFixed(6)}`;
    return u.href;
  }

  /** The Profile plugin's own (streaming) trace viewer of this XSpace session, at gap `g`. */
  profileViewerUrl(g) {
    const data = new URL("data/plugin/profile/data", TB_ROOT);
    data.search = `run=${encodeURIComponent(this.state.run)}&tag=${encodeURIComponent("trace_viewer@")}&host=${encodeURIComponent(this.state.host)}`;
    const v = g.viewer.profile_view_ms;
    const u = new URL("data/plugin/profile/trace_viewer_index.html", TB_ROOT);
    u.search = `is_streaming=true&is_oss=true&trace_data_url=${encodeURIComponent(data.pathname + data.search)}` +
      `&view_start=${v[0].toFixed(6)}&view_end=${v[1].toFixed(6)}`;
    return u.href;
  }

  profileTabUrl() {
    const u = new URL(TB_ROOT.href);
    u.search = `run=${encodeURIComponent(this.state.run)}&tag=trace_viewer@&host=${encodeURIComponent(this.state.host)}`;
    u.hash = "profile";
    return u.href;
  }

  /** Whether the Profile plugin is loaded and shows this run itself (an XSpace session it
   *  lists under the same name); asked once per run list. It never lists PyTorch runs and
   *  would fall back to another run, so those get no Profile-tab hand-off. */
  async profileShowsRun() {
    const run = this.runs.find((x) => x.run === this.state.run);
    if (!this.profilePlugin || !run || run.layout !== "profile") return false;
    if (this.profileRuns === null) {
      this.profileRuns = (async () => {
        try {
          const res = await fetch(new URL("data/plugin/profile/runs", TB_ROOT));
          const body = res.ok ? await res.json() : [];
          return new Set(Array.isArray(body) ? body.map(String) : []);
        } catch (e) { return new Set(); }
      })();
    }
    return (await this.profileRuns).has(this.state.run);
  }

  /** The hand-offs of a gap: the trace viewer on the overlay (or a download of it when the
   *  Profile plugin is not installed), and for an XSpace session the Profile plugin's own. */
  renderActions(g) {
    const el = h("div", { class: "pd-actions", id: "pd-actions" });
    if (this.profilePlugin) {
      el.append(h("a", { class: "pd-button", id: "pd-open-trace", href: this.traceViewerUrl(g), target: "_blank", rel: "noopener",
        title: "The trace viewer on this gap: the real events around it with the diagnosis overlaid (gaps by cause, steps, syncs, the waited-for launch → device op arrow)" },
      "Open in trace viewer"));
    }
    el.append(h("a", { class: this.profilePlugin ? "pd-link" : "pd-button", id: "pd-download-trace", href: this.overlayUrl(g).href,
      download: `perfdiag-gap-${g.id}.json`, title: "Chrome trace JSON of the same window: opens in Perfetto (ui.perfetto.dev) and chrome://tracing" },
    this.profilePlugin ? "Download (Perfetto)" : "Download trace around the gap (Perfetto, chrome://tracing)"));
    const slot = h("span", { class: "pd-profile-slot" });
    el.append(slot);
    const token = this.token, id = g.id;
    this.profileShowsRun().then((ok) => {
      if (token !== this.token || this.state.gap !== id) return;
      ok = ok && !!(g.viewer && g.viewer.profile_view_ms);
      el.dataset.profile = ok ? "shown" : "none";     // settled: tests and screen readers
      if (!ok) return;
      slot.append(
        h("a", { class: "pd-button", id: "pd-open-profile-viewer", href: this.profileViewerUrl(g), target: "_blank", rel: "noopener",
          title: "The Profile plugin's own trace viewer of this session, at the gap's time range (no overlay)" }, "Open session at the gap"),
        h("button", { class: "pd-button", id: "pd-open-profile", title: "The Profile tab on this run and host", onclick: () => {
          urlWindow().location.href = this.profileTabUrl();
        } }, "Open in Profile tab"));
    });
    return el;
  }

  /** The gap split into what would close it: one stacked bar, one line per share (its one
   *  figure, what the evidence says of it), and "In short" from the same shares. */
  renderShares(g) {
    const shares = Object.entries(g.shares_ns || {}).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
    if (!shares.length) return null;
    const total = Math.max(1, shares.reduce((s, [, v]) => s + v, 0));
    const tl = g.tracelens || {};
    const axes = { sync_drain: "a sync drained the device's queue", starved: "the host did not give the device work in time",
      device_side: "the device had the work and waited on itself" };
    const chain = (e, n = 2) => squeeze(e.chain && e.chain.length ? e.chain.slice(-n).join(" › ") : e.name, 80, 300);
    const note = (c) => {
      if (c === "host_sync" && g.blocking) return ` · exposed by ${chain(g.blocking, 3)} on ${squeeze(g.blocking.thread, 80, 120)}`;
      if (DEVICE_SIDE.includes(c) && g.next_op) {
        return ` · ${c === "collective_wait" ? "waiting for peers at" : "before"} ${squeeze(g.next_op.label || g.next_op.name, 80, 200)}` +
          (g.waited_for ? `, issued by ${chain(g.waited_for)}` : "");
      }
      if (c === g.cause && g.culprit) return ` · ${chain(g.culprit, 3)}`;
      return "";
    };
    // what the host did: the largest share the host side explains, in the list's own figure
    const hostShare = shares.find(([c]) => !DEVICE_SIDE.includes(c));
    const did = (c) => {
      if (c === "host_sync") return g.blocking ? `was blocked in ${chain(g.blocking)}` : "was blocked waiting for the device";
      const base = HOST_DID[c] || `was busy with ${causeLabel(c).toLowerCase()}`;
      return c === g.cause && g.culprit && c !== "untraced" ? `${base} (${chain(g.culprit)})` : base;
    };
    const short = [tl.idle_type ? axes[tl.idle_type] || tl.idle_type : null,
      hostShare ? `the host ${did(hostShare[0])} for ${formatNs(hostShare[1])} of it` : null].filter(Boolean).join("; ");
    return h("div", { class: "pd-shares", id: "pd-shares" },
      h("div", { class: "pd-shares-bar" }, shares.map(([c, v]) => h("span", {
        class: "pd-share", title: `${causeLabel(c)}: ${formatNs(v)}`,
        style: { width: `${100 * v / total}%`, background: causeColor(c) } }))),
      h("ul", { class: "pd-shares-list" }, shares.map(([c, v]) => h("li", { "data-cause": c },
        h("span", { class: "chip", style: { background: causeColor(c) } }),
        `${formatNs(v)} ${causeLabel(c).toLowerCase()}`,
        note(c) ? h("span", { class: "pd-muted pd-small" }, note(c)) : null))),
      short ? h("div", { class: "pd-small pd-muted" },
        h("span", { id: "pd-idle-kind" }, `In short: ${short}. `),
        h("abbr", { class: "pd-help", title: "How the device queue ran dry (a sync drained it, the host starved it, or the device waited on itself; TraceLens' first axis) and what the host did meanwhile, from the shares listed above" }, "?"),
        g.followed_thread ? ` Idle time of the issuing thread followed to ${squeeze(g.followed_thread, 80, 120)}.` : "") : null);
  }

  /** The fix for gap `g`: its finding's (the one citing it, or about its cause), with a
   *  link to that finding. */
  renderGapFix(g) {
    const f = g.fix;
    if (!f || !f.text) return null;
    const li = () => f.finding !== null && f.finding !== undefined ?
      this.summaryEl.querySelector(`.pd-finding[data-finding="${f.finding}"]`) : null;
    return h("div", { class: "pd-fix", id: "pd-gap-fix" }, h("b", {}, "Fix: "), squeeze(f.text), " ",
      h("span", { class: "pd-muted pd-small" }, f.via === "gap" ? "(its finding: " : "(the finding about its cause: ",
        li() ? h("a", { href: "#", class: "pd-link pd-inline-link", id: "pd-gap-finding", title: fullTitle(f.title, 0), onclick: (e) => {
          e.preventDefault();
          const el = li();
          if (el) { el.scrollIntoView({ block: "center" }); el.classList.add("pd-flash"); setTimeout(() => el.classList.remove("pd-flash"), 1500); }
        } }, squeeze(f.title, 60, 120)) : squeeze(f.title, 60, 120), ")"));
  }

  /** Host ops during a gap, by thread: the issuing thread and the one its idle time was
   *  followed to open first, then the busiest; the rest folded by thread pool. */
  renderHostOps(g, byThread, maxSelf) {
    const OPEN_THREADS = 3, OPS_SHOWN = 6;
    const top = (ops) => Math.max(0, ...ops.map((o) => o.self_ns || 0));
    const order = [...byThread.keys()].sort((a, b) =>
      (b === g.analysed_thread) - (a === g.analysed_thread) || (b === g.followed_thread) - (a === g.followed_thread) ||
      top(byThread.get(b)) - top(byThread.get(a)));
    const opRow = (o) => h("div", { class: "pd-hostop", title: cut(o.chain.join(" › "), 2000) },
      h("div", { class: "pd-hostop-bar", style: { width: `${Math.max(1, 100 * (o.self_ns || 0) / maxSelf)}%` } }),
      h("div", { class: "pd-hostop-text" }, h("b", {}, squeeze(o.name, 80, 200)), ` self ${formatNs(o.self_ns)} of ${formatNs(o.duration_ns)}`,
        o.kind ? h("span", { class: "pd-badge" }, o.kind) : null),
      h("div", { class: "pd-small pd-muted pd-hostop-chain" }, squeeze(o.chain.join(" › "), 80, 600)));
    const thread = (name) => {
      const ops = byThread.get(name);
      return h("div", { class: "pd-thread", "data-thread": cut(name, 200) },
        h("div", { class: "pd-thread-name", title: fullTitle(name, 120) }, squeeze(name, 80, 120)),
        ops.slice(0, OPS_SHOWN).map(opRow),
        ops.length > OPS_SHOWN ? h("details", { class: "pd-more-ops" },
          h("summary", { class: "pd-small pd-muted" }, `${ops.length - OPS_SHOWN} more op(s)`),
          ops.slice(OPS_SHOWN).map(opRow)) : null);
    };
    const pools = new Map();
    for (const name of order.slice(OPEN_THREADS)) {
      const k = poolOf(name);
      if (!pools.has(k)) pools.set(k, []);
      pools.get(k).push(name);
    }
    return h("div", { class: "pd-hostops" }, order.slice(0, OPEN_THREADS).map(thread),
      [...pools.entries()].map(([pool, names]) => h("details", { class: "pd-pool", "data-pool": cut(pool, 200) },
        h("summary", { class: "pd-thread-name", title: fullTitle(pool, 100) },
          `${squeeze(pool, 80, 100)} · ${names.length} thread${names.length > 1 ? "s" : ""} `,
          h("span", { class: "pd-muted pd-small" }, `(up to ${formatNs(Math.max(...names.map((n) => top(byThread.get(n)))))} self time)`)),
        names.map(thread))));
  }

  renderDetail(g) {
    const el = this.detailEl;
    const op = (label, o) => o ? h("div", { class: "pd-neighbour-op" }, h("b", {}, label + ": "),
      h("span", { class: "pd-op-name", title: fullTitle(o.name, 0) }, squeeze(o.label || o.name, 80, 200)), ` (${formatNs(o.duration_ns)})`,
      o.annotation ? h("span", { class: "pd-muted" }, ` · ${squeeze(o.annotation, 80, 200)}`) : null) : h("div", {}, h("b", {}, label + ": "), "none");
    const byThread = new Map();
    for (const o of g.host_ops || []) {
      if (!byThread.has(o.thread)) byThread.set(o.thread, []);
      byThread.get(o.thread).push(o);
    }
    const maxSelf = Math.max(1, ...(g.host_ops || []).map((o) => o.self_ns || 0));
    put(el,
      h("h2", { id: "pd-detail-title", title: `gap ${g.id}` }, this.gapTitle(g)),
      h("div", { class: "pd-detail-head" },
        h("span", { class: "chip", style: { background: causeColor(g.cause) } }),
        h("b", { class: "pd-detail-cause" }, g.cause_label || causeLabel(g.cause)),
        g.shares_ns && Object.keys(g.shares_ns).length > 1 ? " · the largest of its causes" : ""),
      // the shares say what the evidence says, one figure each; the sentence only without them
      this.renderShares(g) || h("p", { class: "pd-evidence" }, squeeze(g.evidence, 80, 1500)),
      this.renderGapFix(g),
      this.renderActions(g),
      h("h3", {}, "Waited for"),
      g.waited_for ? h("div", { class: "pd-chain", title: fullTitle(g.waited_for.chain.join(" › "), 600) }, squeeze(g.waited_for.chain.join(" › "), 80, 600),
        h("div", { class: "pd-muted pd-small" }, `on ${squeeze(g.waited_for.thread, 80, 120)} · ${formatNs(g.waited_for.duration_ns)} · found via ${g.waited_for.found_via}`))
        : h("p", { class: "pd-muted" }, "Nothing identified."),
      h("h3", {}, "Host ops during the gap", g.analysed_thread ? h("span", { class: "pd-muted pd-small", title: fullTitle(g.analysed_thread, 120) },
        ` (cause from the issuing thread, ${squeeze(g.analysed_thread, 80, 120)})`) : null),
      byThread.size ? this.renderHostOps(g, byThread, maxSelf) :
        h("p", { class: "pd-muted" }, "No host ops recorded."),
      h("h3", {}, "Syncs"),
      (g.syncs || []).length ? h("ul", { class: "pd-syncs" }, g.syncs.map((x) => h("li", {}, `${squeeze(x.name, 80, 200)} on ${squeeze(x.thread, 80, 120)}` +
        (x.duration_ns !== undefined ? ` (${formatNs(x.duration_ns)})` : "")))) : h("p", { class: "pd-muted" }, "None."),
      h("h3", {}, "Neighbouring device ops"),
      op("Previous", g.prev_op), op("Next", g.next_op));
  }
}
