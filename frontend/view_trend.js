// The Trend view of a run: its captures over time from /trend (the chart, the captures with
// their trust, the changes as sentences); a click on a capture opens it in the Diagnose view.
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { h } from "./dom.js";
import { causeColor, causeLabel, formatNs, formatPct, fullTitle, plural, squeeze } from "./format.js";
import { writeState } from "./state.js";
import { captureTime, drawn, LINE_COLORS, renderTrendChart, stepRange } from "./trend_chart.js";

/** The TensorBoard run an XSpace session's run belongs to ("." for sessions at the root):
 *  its captures are that run's sessions (run_captures.py reads the listing the same way). */
function group(name) {
  const i = name.lastIndexOf("/");
  return i < 0 ? "." : name.slice(0, i);
}

/** How many captures the trend of page run `name` has: a PyTorch worker's spans, or the
 *  sessions of the TensorBoard run holding an XSpace session (0: no such run). */
export function trendCaptureCount(runs, name) {
  const run = runs.find((x) => x.run === name);
  if (!run) return 0;
  if (run.layout === "profile") return runs.filter((x) => x.layout === "profile" && group(x.run) === group(name)).length;
  return Math.max(0, ...run.hosts.map((x) => x.spans.length));
}

/** The Diagnose selection {run, host, span} that shows capture `c` (index `i`) of the trend of
 *  page run `name`, keeping `host` when the capture has it; null when the listing lacks it. */
export function captureSelection(runs, name, host, c, i) {
  const run = runs.find((x) => x.run === name);
  if (!run) return null;
  const pick = (hosts) => hosts.find((x) => x.name === host) || hosts[0];
  if (run.layout === "profile") {
    const g = group(name);
    const target = runs.find((x) => x.layout === "profile" && group(x.run) === g && x.run.slice(x.run.lastIndexOf("/") + 1) === c.session);
    if (!target) return null;
    const hst = pick(target.hosts);
    return { run: target.run, host: hst.name, span: "" };
  }
  // a worker's own span of that capture: the one named like it, else its i-th
  const named = run.hosts.filter((x) => x.spans.some((s) => s.name === c.session));
  const hst = pick(named.length ? named : run.hosts);
  const span = hst.spans.find((s) => s.name === c.session) || hst.spans[i];
  return span ? { run: run.run, host: hst.name, span: span.name } : null;
}

/** Whether the captures span several UTC days (their times then carry the date). */
function days(doc) {
  return new Set((doc.captures || []).map((c) => String(c.start_time).slice(0, 10))).size > 1;
}

/** The largest idle causes of a capture, as "data loading 80%". */
function idleText(c) {
  const top = Object.entries(c.idle_by_cause || {}).filter(([, v]) => v >= 0.005).sort((a, b) => b[1] - a[1]).slice(0, 2);
  return top.map(([k, v]) => h("span", { class: "pd-trend-idle", "data-cause": k },
    h("span", { class: "chip", style: { background: causeColor(k) } }), `${causeLabel(k).split(" (")[0].toLowerCase()} ${formatPct(v)}`));
}

export const TrendView = {
  /** The Trend view: the URL keeps it (view=trend); a run of one capture has none. */
  async showTrend() {
    const token = this.beginSelection({ fresh: true });
    const s = this.state;
    delete s.step; delete s.gap; delete s.zoom; delete s.base_run; delete s.base_host; delete s.base_span;
    writeState(s);
    delete this.root.dataset.loaded;
    this.diag = null;
    this.deviceSlot.textContent = "";
    this.compare.close();
    this.body.textContent = "";
    this.setStatus(`Reading the captures of ${s.run}…`, true);
    let r = await this.fetchJSON("trend", { run: s.run, baseline: s.baseline || undefined, peak_tflops: s.peak || undefined });
    if (token !== this.token) return null;
    if (!r.ok && s.baseline && (r.status === 400 || r.status === 404)) {
      // a URL's baseline the run no longer has (or no longer trusts): against the one before
      delete s.baseline; writeState(s);
      r = await this.fetchJSON("trend", { run: s.run, peak_tflops: s.peak || undefined });
      if (token !== this.token) return null;
    }
    this.setStatus("");
    if (!r.ok) { this.showError(r.body); this.root.dataset.loaded = `${s.run}|${s.host}||trend-error`; return false; }
    this.trend = r.body;
    this.renderTrend(r.body);
    this.root.dataset.loaded = `${s.run}|${s.host}||trend-ok`;
    return true;
  },

  renderTrend(doc) {
    const caps = doc.captures || [];
    const flagged = caps.filter((c) => !(c.trust && c.trust.ok)).length;
    const lvm = doc.latest_vs_median;
    const chartEl = h("div", { id: "pd-trend-chart", class: "pd-trend-chart" });
    const legend = [["step", "typical step time"], ["duty", "duty cycle"], ...(caps.some((c) => drawn(c) && c.mfu != null) ? [["mfu", "MFU"]] : [])];
    const causes = [...new Set(caps.filter(drawn).flatMap((c) => Object.entries(c.idle_by_cause || {}).filter(([, v]) => v > 0).map(([k]) => k)))];
    this.body.append(
      h("section", { class: "pd-card", id: "pd-trend", "aria-label": "Trend" },
        h("h2", {}, `Trend of ${doc.run === "." ? "the logdir's sessions" : doc.run} `,
          h("span", { class: "pd-muted pd-small" }, `(${plural(caps.length, "capture")} in time order${flagged ? `, ${flagged} flagged and left out of the lines and changes` : ""}; click a capture to open it)`)),
        lvm && lvm.ratio != null ? h("p", { class: "pd-trend-latest", id: "pd-trend-latest" },
          `Latest trusted capture (${captureTime(this.captureOf(lvm.session)?.start_time, days(doc))}): step time ${lvm.ratio.toFixed(2)}× the run's median.`) : null,
        h("div", { class: "pd-legend" },
          legend.map(([k, t]) => h("span", { class: "pd-legend-item" }, h("span", { class: "pd-line-chip", style: { background: LINE_COLORS[k] } }), t)),
          causes.map((c) => h("span", { class: "pd-legend-item", "data-cause": c }, h("span", { class: "chip", style: { background: causeColor(c) } }), causeLabel(c))),
          flagged ? h("span", { class: "pd-legend-item" }, h("span", { class: "chip pd-flag-chip" }), "flagged (not trusted)") : null),
        chartEl),
      this.renderChanges(doc),
      this.renderCaptureTable(doc));
    // the chart takes the card's width: drawn once the card is laid out
    renderTrendChart(chartEl, doc, { onOpen: (c) => this.openCapture(c) });
  },

  captureOf(session) {
    return ((this.trend && this.trend.captures) || []).find((c) => c.session === session);
  },

  /** The changes beyond the run's own noise, one sentence each. */
  renderChanges(doc) {
    const changes = doc.changes || [], noise = doc.noise || {};
    const at = (session) => { const c = this.captureOf(session); return c ? captureTime(c.start_time, days(doc)) : session; };
    const link = (session) => h("button", { class: "pd-link-btn pd-inline-link", "data-session": session,
      onclick: () => { const c = this.captureOf(session); if (c) this.openCapture(c); } }, at(session));
    return h("section", { class: "pd-card", id: "pd-trend-changes-card", "aria-label": "Changes" },
      h("h2", {}, doc.baseline ? `Changes against ${at(doc.baseline)} ` : "What changed between captures ",
        h("span", { class: "pd-muted pd-small" }, noise.step_time_ratio ? `(beyond the run's own spread: step time ×${noise.step_time_ratio.toFixed(2)}) ` : ""),
        noise.definition ? h("abbr", { class: "pd-help", title: noise.definition }, "?") : null),
      this.baselineSelect(doc),
      changes.length ? h("ul", { class: "pd-trend-changes", id: "pd-trend-changes" }, changes.map((ch) => h("li", {
        class: ch.step_time_ratio > 1 ? "slower" : "faster", "data-from": ch.from, "data-to": ch.to },
      h("span", { class: "pd-trend-change-text" }, ch.summary), " ",
      h("span", { class: "pd-muted pd-small" }, "(", link(ch.from), " → ", link(ch.to), ")"))))
        : h("p", { class: "pd-muted", id: "pd-trend-no-change" }, "No change beyond the run's own capture-to-capture spread."));
  },

  /** Each capture against the one before it (default) or against one trusted capture. */
  baselineSelect(doc) {
    const caps = (doc.captures || []).filter(drawn);
    if (caps.length < 2) return null;
    const sel = h("select", { id: "pd-trend-baseline", "aria-label": "Compare each capture with", onchange: (e) => {
      this.state = { ...this.state, baseline: e.target.value }; this.showTrend();
    } }, h("option", { value: "" }, "the capture before it"),
    caps.map((c) => h("option", { value: c.session, title: c.session }, captureTime(c.start_time, days(doc)))));
    sel.value = doc.baseline || "";
    return h("label", { class: "pd-field pd-small" }, "Compare each capture with ", sel);
  },

  renderCaptureTable(doc) {
    const caps = doc.captures || [], withDate = days(doc);
    const pod = caps.some((c) => c.straggler), mfu = caps.some((c) => c.mfu != null);
    const row = (c) => {
      const ok = !!(c.trust && c.trust.ok), problems = (c.trust && c.trust.problems) || [];
      const f = c.top_finding;
      return h("tr", { class: "pd-trend-row" + (ok ? "" : " pd-trend-flagged"), "data-session": c.session },
        h("td", {}, h("button", { class: "pd-link-btn pd-trend-open", title: `Open this capture (${c.session}) in Diagnose`,
          onclick: () => this.openCapture(c) }, captureTime(c.start_time, withDate)),
        c.session === doc.baseline ? h("span", { class: "pd-badge", id: "pd-trend-baseline-mark" }, "baseline") : null),
        h("td", {}, stepRange(c) || "–"),
        h("td", { class: "pd-num" }, formatNs(c.step_time_ns)),
        h("td", { class: "pd-num" }, formatPct(c.duty_cycle)),
        mfu ? h("td", { class: "pd-num" }, c.mfu != null ? formatPct(c.mfu) : "–") : null,
        ok ? h("td", {}, idleText(c)) : h("td", { colspan: pod ? 3 : 2, class: "pd-trend-problem" },
          h("b", {}, "⚠ Not trusted: "), problems.map((p) => squeeze(p, 120, 400)).join("; ") || "no figures"),
        ok ? h("td", { title: f ? fullTitle(f.title, 300) : "" }, f ? squeeze(f.title, 90, 300) : h("span", { class: "pd-muted" }, "none")) : null,
        ok && pod ? h("td", {}, c.straggler || "–") : null);
    };
    return h("section", { class: "pd-card", "aria-label": "Captures" },
      h("h2", {}, "Captures ", h("span", { class: "pd-muted pd-small" }, "(UTC; each is its own diagnosis: open it for its steps, gaps and timeline)")),
      h("table", { class: "pd-table pd-trend-table", id: "pd-trend-captures" },
        h("thead", {}, h("tr", {}, [["Captured"], ["Steps"], ["Typical step", "pd-num"], ["Duty cycle", "pd-num"], ...(mfu ? [["MFU", "pd-num"]] : []),
          ["Idle (largest causes)"], ["Top finding"], ...(pod ? [["Straggler"]] : [])].map(([t, cls]) => h("th", { class: cls }, t)))),
        h("tbody", {}, caps.map(row))));
  },

  /** Capture `c` in the Diagnose view (its run, host and span). */
  openCapture(c) {
    const i = ((this.trend && this.trend.captures) || []).indexOf(c);
    const sel = captureSelection(this.runs, this.state.run, this.state.host, c, i);
    if (!sel) { this.setStatus(`Capture ${c.session} is not in the run list (any more): reload.`); return; }
    this.state = sel;
    this.buildSelectors(); this.show();
  },
};
