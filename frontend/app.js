// The Diagnose page: selectors, status, and which view the selection shows; each view and
// the gap panel are modules of their own (view_*.js, summary_card.js, gap_panel.js).
import { getJSON } from "./api.js";
import { h } from "./dom.js";
import { fullTitle, optionText } from "./format.js";
import { onHistory, readState } from "./state.js";
import { CompareHosts } from "./compare.js";
import { onTensorBoardReload } from "./tb_host.js";
import { CompareView } from "./view_compare.js";
import { PodView, ALL_HOSTS, POD_HOSTS } from "./view_pod.js";
import { HowToView } from "./view_howto.js";
import { DiagnoseView } from "./view_diagnose.js";
import { SummaryCard } from "./summary_card.js";
import { GapPanel } from "./gap_panel.js";
import { TrendView, trendCaptureCount } from "./view_trend.js";

const PROGRESS_DELAY_MS = 300, PROGRESS_POLL_MS = 400;
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
      params: (host) => ({ run: this.state.run, host, span: undefined, peak_tflops: this.state.peak || undefined }),
      spanLabel: (host, span) => this.spanLabel(this.state.run, host, span),
      onPick: (host) => {
        // from a pod's summary the host's page takes the screen; "Compare hosts" brings the table back
        if (this.compare.pinned) this.compare.close();
        this.state = { run: this.state.run, host }; this.buildSelectors(); this.show();
      },
    });
    // Back and Forward walk the selections (each one pushed to the history)
    onHistory((st) => {
      if (!this.runs.length || !st.run) return;
      this.state = st; this.buildSelectors(); this.show();
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

  /** Beside the title, only when it matters to the reader of the page: the server reads
   *  traces in pure Python (everything about 4× slower) and how to get the C reader.  The
   *  native reader is the normal case and goes unsaid (the CLI's `info` names it). */
  showReader(reader) {
    if (!reader) return;
    const slow = reader !== "native";
    if (!slow) { if (this.readerEl) this.readerEl.remove(); return; }
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
    if (!shown || this.state.view === "trend") { await this.show(); return; }   // a trend takes new captures in
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
      // another run keeps the Trend view (show() leaves it for a run of one capture)
      this.state = { run: v, ...this.baseOf(), ...(s.view === "trend" ? { view: "trend" } : {}) }; this.buildSelectors(); this.show();
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
    this.trendButton(s);
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

  /** "Trend (N captures)": the run's captures over time, for a run of several; in the Trend
   *  view the same button goes back to the capture selected. */
  trendButton(s) {
    const n = trendCaptureCount(this.runs, s.run);
    if (n < 2) return;
    const on = s.view === "trend";
    this.header.append(h("button", { class: "pd-button", id: "pd-trend", "aria-pressed": String(on),
      title: on ? "Back to the selected capture's diagnosis" : "Step time, duty cycle, MFU and idle by cause over the run's captures, and what changed between them",
      onclick: () => {
        this.state = on ? { run: s.run, host: s.host, span: s.span } : { run: s.run, host: s.host, span: s.span, view: "trend" };
        this.buildSelectors(); this.show();
      } }, on ? "← Back to the capture" : `Trend (${n} captures)`));
  }

  /** Which selection the answers are for: run, host, capture and the graph capture its
   *  replays are aligned with (the step filters within). */
  selectionKey(s = this.state) {
    return `${s.run}|${s.host}|${s.span || ""}|${s.capture || ""}`;
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
    if (this.state.view === "trend") {
      if (trendCaptureCount(this.runs, this.state.run) > 1) return this.showTrend();
      delete this.state.view; delete this.state.baseline;   // one capture: no trend to show
    }
    if (this.state.host === ALL_HOSTS) return this.showPod();
    return this.state.base_run ? this.showCompare() : this.loadDiagnosis();
  }

  /** The run being compared with, as state keys (empty when not comparing). */
  baseOf() {
    const s = this.state;
    return s.base_run ? { base_run: s.base_run, base_host: s.base_host, base_span: s.base_span } : {};
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
    return { run: s.run, host: s.host, span: s.span || undefined, capture: s.capture || undefined, peak_tflops: s.peak || undefined, ...(extra || {}) };
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
}

Object.assign(App.prototype, CompareView, PodView, HowToView, DiagnoseView, SummaryCard, GapPanel, TrendView);
