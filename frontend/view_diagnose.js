// One capture's diagnosis: its cards (summary, collectives, steps, gap list, timeline,
// annotations, device ops), drawn from /diagnosis and joined with /collectives.
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { routeUrl, TB_ROOT } from "./api.js";
import { h } from "./dom.js";
import { causeColor, causeLabel, cut, formatNs, squeeze } from "./format.js";
import { writeState } from "./state.js";
import { renderStepsChart } from "./steps_chart.js";
import { Timeline } from "./timeline.js";
import { renderAnnotations } from "./annotations.js";
import { renderDeviceOps } from "./device_ops.js";
import { mergeStepWait, renderCollectives } from "./collectives.js";
import { renderDeviceRoofline } from "./efficiency.js";

const PAGE = 200;
/** How often the Collectives card asks again while the run's other hosts are analysed. */
const COLLECTIVES_POLL_MS = 1000;

export const DiagnoseView = {
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
        // the server's choice: a device that computes and loses most (not a copy-only GPU)
        const pick = devs.find((x) => x.id === r.body.primary_device) || devs.find((x) => x.ops > 0) || devs[0];
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
  },

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
  },

  /** Whether any device of the diagnosis ran anything (a CPU-only trace has none). */
  hasDeviceActivity() {
    return (this.diag.devices || []).some((x) => x.ops > 0);
  },

  device() {
    return this.diag.devices.find((x) => String(x.id) === String(this.state.device)) || this.diag.devices[0] || {};
  },

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
  },

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
  },

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
  },

  /** The cards that combine the diagnosis with the Collectives answer. */
  renderDerived() {
    this.summaryEl.textContent = "";
    this.renderSummary();
    this.renderLegend();
    this.renderSteps();
    this.renderGapList();
  },

  updateExportEvents(v) {
    if (!this.exportEventsEl || !v) return;
    const us = (ns) => (ns / 1000).toFixed(3);
    this.exportEventsEl.href = routeUrl("overlay", this.params({ with_events: 1, start_us: us(v.start), end_us: us(v.end) })).href;
  },

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
  },

  renderSteps() {
    renderStepsChart(this.stepsEl, this.diag, {
      deviceKey: this.device().id ?? 0, selectedStep: this.state.step, hostOnly: !this.hasDeviceActivity(),
      onSelect: (id) => {
        this.state.step = id === null ? "" : String(id);
        this.state.gap = ""; this.state.zoom = "";
        this.loadDiagnosis();
      },
    });
  },

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
  },

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
  },

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
  },

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
  },

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
  },

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
  },

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
  },
};
