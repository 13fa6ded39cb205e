// "Compare with…": two runs (hosts, spans) side by side from the /compare route — what
// changed per device and typical step, the findings that are new/gone/grew/shrank, the ops
// and annotations whose count or device time changed, and the step chart of each run.
// The page keeps the other run in the URL (p.perfdiag.base_run/base_host/base_span), so a
// link reopens the comparison.
import { getJSON } from "./api.js";
import { h } from "./dom.js";
import { causeColor, causeLabel, formatNs, formatPct } from "./format.js";
import { renderStepsChart, stepSegments } from "./steps_chart.js";
import { waterfallCompare } from "./compare_waterfall.js";

/** Is a change good ("better"), bad ("worse") or neither ("")? Step time and idle: lower is
 * better; duty cycle: higher is better; busy time and counts: neither (more work is not bad). */
export function verdict(metric, delta) {
  if (delta === null || delta === undefined || delta === 0 || Number.isNaN(delta)) return "";
  if (metric === "duty") return delta > 0 ? "better" : "worse";
  if (metric === "step" || metric === "idle") return delta < 0 ? "better" : "worse";
  return "";
}

/** Signed time: +1.20 ms, −350 µs, 0. */
export function signedNs(ns) {
  if (ns === null || ns === undefined) return "–";
  if (ns === 0) return "0";
  return (ns > 0 ? "+" : "−") + formatNs(Math.abs(ns));
}

/** Signed percentage points of a fraction: +13.2 points. */
export function signedPoints(frac) {
  if (frac === null || frac === undefined) return "–";
  if (frac === 0) return "0";
  return `${frac > 0 ? "+" : "−"}${Math.abs(frac * 100).toFixed(1)} points`;
}

/** What makes two runs comparable before either is analysed: the layout (PyTorch or the
 *  Profile plugin's), the trace formats of their spans, and one host against several. */
export function runKind(run) {
  const formats = [...new Set((run.hosts || []).flatMap((x) => (x.spans || []).map((s) => s.format || "")))].sort();
  return `${run.layout || ""}|${formats.join(",")}|${(run.hosts || []).length > 1 ? "hosts" : "host"}`;
}

/** The default run to compare with: the nearest comparable run in the list (same layout,
 * formats and host count; the one before first at equal distance), on the same host name
 * when it has one; else the previous capture of the same host (the span before the one
 * shown); else another host of the same run; else the nearest other run. */
export function defaultBase(runs, state) {
  const i = runs.findIndex((r) => r.run === state.run);
  const cur = runs[i];
  const on = (r) => {
    const host = r.hosts.find((x) => x.name === state.host) || r.hosts[0];
    return { base_run: r.run, base_host: host ? host.name : "", base_span: "" };
  };
  if (!cur) return runs.length ? on(runs[0]) : { base_run: "", base_host: "", base_span: "" };
  const kind = runKind(cur);
  let best = -1;
  runs.forEach((r, j) => {
    if (j !== i && runKind(r) === kind && (best < 0 || Math.abs(j - i) < Math.abs(best - i))) best = j;
  });
  if (best >= 0) return on(runs[best]);
  const host = cur.hosts.find((x) => x.name === state.host) || cur.hosts[0];
  const spans = host ? host.spans || [] : [];
  if (spans.length > 1) {
    // spans are listed oldest first; the one shown is the chosen span, else the latest
    let k = spans.findIndex((x) => x.name === state.span);
    if (k < 0) k = Math.max(spans.findIndex((x) => x.latest), 0);
    const prev = spans[k > 0 ? k - 1 : 1];
    return { base_run: cur.run, base_host: host.name, base_span: prev.name };
  }
  const other = cur.hosts.find((x) => x.name !== (host && host.name));
  if (other) return { base_run: cur.run, base_host: other.name, base_span: "" };
  const near = runs.map((r, j) => [Math.abs(j - i) - (j < i ? 0.5 : 0), r]).filter(([, r]) => r !== cur)
    .sort((x, y) => x[0] - y[0]);
  return near.length ? on(near[0][1]) : on(cur);
}

/** The picker: run, host and span of the run to compare with. `onCompare(base)`. */
export function renderPicker(container, runs, state, { onCompare, onCancel }) {
  container.textContent = "";
  const start = state.base_run ? { base_run: state.base_run, base_host: state.base_host, base_span: state.base_span || "" }
    : defaultBase(runs, state);
  let pick = { ...start };
  const row = h("div", { class: "pd-picker-row" });
  const draw = () => {
    row.textContent = "";
    const run = runs.find((r) => r.run === pick.base_run) || runs[0];
    pick.base_run = run.run;
    const host = run.hosts.find((x) => x.name === pick.base_host) || run.hosts[0];
    pick.base_host = host ? host.name : "";
    const spans = host ? host.spans : [];
    // a concrete span, the one the tab opens for that host (the server's default is the newest)
    if (!spans.some((x) => x.name === pick.base_span)) {
      pick.base_span = spans.length ? (spans.find((x) => x.latest) || spans[spans.length - 1]).name : "";
    }
    const sel = (id, label, options, value, on) => {
      const el = h("select", { id, "aria-label": label, onchange: (e) => { on(e.target.value); draw(); } },
        options.map(([v, t]) => h("option", { value: v, selected: v === value }, t)));
      el.value = value;
      return h("label", { class: "pd-field" }, label + " ", el);
    };
    // a run with one span has no span picker: nothing is appended (append(null) would
    // write the text "null")
    row.append(...[
      h("span", { class: "pd-muted" }, "Compare with (before): "),
      sel("pd-base-run", "Run", runs.map((r) => [r.run, r.run]), pick.base_run, (v) => { pick = { base_run: v, base_host: "", base_span: "" }; }),
      sel("pd-base-host", "Host", run.hosts.map((x) => [x.name, x.name]), pick.base_host, (v) => { pick.base_host = v; pick.base_span = ""; }),
      spans.length > 1 ? sel("pd-base-span", "Span", spans.map((x) => [x.name, `${x.label || x.name}${x.latest ? " (latest)" : ""}`]),
        pick.base_span, (v) => { pick.base_span = v; }) : null,
      h("button", { class: "pd-button", id: "pd-compare-go", onclick: () => onCompare({ ...pick }) }, "Compare"),
      h("button", { class: "pd-link-btn", onclick: onCancel }, "Cancel")].filter(Boolean));
  };
  draw();
  container.append(h("div", { class: "pd-card pd-picker", id: "pd-compare-picker", role: "group",
    "aria-label": "Run to compare with" }, row));
}

const SHOWN = 8;     // highlights listed before "N more"
const item = (x) => h("li", { "data-what": x.what },
  x.what === "idle_cause" || x.what === "peer_wait" ? h("span", { class: "chip", style: { background: causeColor(x.what === "peer_wait" ? "peer_wait" : x.subject) } }) : null, x.text);
const deltaCell = (text, metric, delta) => h("td", { class: `pd-num pd-delta ${verdict(metric, delta) ? "pd-" + verdict(metric, delta) : ""}` }, text);

/** One device pair's table: step window, duty cycle, busy, idle by cause, short gaps. */
export function deviceRows(set) {
  const a = set.before, b = set.after;
  if (!a || !b) return [];
  const rows = [
    // the device's window of a step (from when it could start the step's work), not the host's step
    { key: "window", label: "Device step window", metric: "step", before: a.window_ns, after: b.window_ns, unit: "ns" },
    { key: "duty", label: "Duty cycle", metric: "duty", before: a.duty_cycle, after: b.duty_cycle, unit: "frac" },
    ...((a.peer_wait_ns || b.peer_wait_ns) && a.work_duty_cycle !== null && b.work_duty_cycle !== null &&
        a.work_duty_cycle !== undefined && b.work_duty_cycle !== undefined
      ? [{ key: "work_duty", label: "Duty cycle, peer wait left out", metric: "duty", before: a.work_duty_cycle,
        after: b.work_duty_cycle, unit: "frac" }] : []),
    { key: "busy", label: "Busy", metric: "busy", before: a.busy_ns, after: b.busy_ns, unit: "ns" },
    // what the busy time achieves: higher is better, like the duty cycle
    ...((a.mfu ?? null) !== null || (b.mfu ?? null) !== null
      ? [{ key: "mfu", label: "MFU", metric: "duty", before: a.mfu ?? null, after: b.mfu ?? null, unit: "frac" }] : []),
  ];
  // with peer wait in it, the duty cycle is judged without it (its own row): the raw one is neutral
  if (rows.some((r) => r.key === "work_duty")) rows[1].metric = "";
  // busy time waiting for peers at collectives (null: the run's collectives were not matched)
  const pa = a.peer_wait_ns, pb = b.peer_wait_ns;
  if ((pa !== null && pa !== undefined) || (pb !== null && pb !== undefined)) {
    rows.push({ key: "peer_wait", label: "of it: peer wait at collectives", metric: "idle", before: pa ?? null, after: pb ?? null,
      unit: "ns", cause: "peer_wait", shareBefore: pa !== null && a.window_ns ? pa / a.window_ns : null,
      shareAfter: pb !== null && b.window_ns ? pb / b.window_ns : null });
  }
  for (const c of set.causes || []) {
    rows.push({ key: c.cause, label: causeLabel(c.cause), metric: "idle", before: c.before_ns, after: c.after_ns, unit: "ns",
      shareBefore: c.before_share, shareAfter: c.after_share, cause: c.cause });
  }
  rows.push({ key: "short", label: "Gaps under the threshold", metric: "idle", before: a.short_gaps_ns, after: b.short_gaps_ns, unit: "ns" });
  return rows;
}

export class CompareRuns {
  constructor(slot, { onOpenStep }) {
    this.slot = slot; this.onOpenStep = onOpenStep; this.token = 0; this.basis = "typical_step";
  }

  async show(params) {
    const token = ++this.token;
    this.slot.textContent = "";
    this.slot.append(h("p", { class: "pd-loading" }, h("span", { class: "spinner", "aria-hidden": "true" }),
      ` Comparing ${params.base_run} / ${params.base_host} with ${params.run} / ${params.host}…`));
    let r;
    try { r = await getJSON("compare", params); } catch (e) { r = { ok: false, body: { error: String(e) } }; }
    if (token !== this.token) return null;
    this.slot.textContent = "";
    if (!r.ok) {
      this.slot.append(h("div", { class: "pd-error", role: "alert" }, h("strong", {}, "These runs cannot be compared"),
        h("p", { class: "pd-error-msg" }, r.body.error || `HTTP ${r.status}`),
        r.body.file ? h("p", {}, "File: ", h("code", { class: "pd-error-file" }, r.body.file)) : null));
      return false;
    }
    this.data = r.body;
    this.render();
    return true;
  }

  render() {
    const d = this.data, el = this.slot;
    el.textContent = "";
    const st = d.step_time;
    const pct = st.delta_pct === null ? "" : ` (${st.delta_pct > 0 ? "+" : "−"}${Math.abs(st.delta_pct * 100).toFixed(1)}%)`;
    el.append(h("section", { class: "pd-card pd-cmp-summary", id: "pd-cmp-summary", "aria-label": "What changed" },
      h("div", { class: "pd-stats" },
        h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value" }, `${formatNs(st.before_ns)} → ${formatNs(st.after_ns)}`),
          h("span", { class: `pd-stat-label pd-${verdict("step", st.delta_ns) || "same"}`, id: "pd-cmp-step" },
            `typical step ${signedNs(st.delta_ns)}${pct}`)),
        d.devices.filter((p) => p.typical_step.before && p.typical_step.after).map((p) => {
          const a = p.typical_step.before, b = p.typical_step.after;
          // busy time waiting for peers is no work: judged without it when it is known
          const work = (a.peer_wait_ns || b.peer_wait_ns) && a.work_duty_cycle !== null && b.work_duty_cycle !== null &&
            a.work_duty_cycle !== undefined && b.work_duty_cycle !== undefined;
          const dv = work ? b.work_duty_cycle - a.work_duty_cycle : p.typical_step.delta.duty_cycle;
          return h("div", { class: "pd-stat" },
            h("span", { class: "pd-stat-value" }, `${formatPct(a.duty_cycle)} → ${formatPct(b.duty_cycle)}`),
            h("span", { class: `pd-stat-label pd-${verdict("duty", dv) || "same"}`, "data-device": p.name },
              `${p.name} duty cycle per typical step ${signedPoints(p.typical_step.delta.duty_cycle)}`,
              work ? `; peer wait left out ${formatPct(a.work_duty_cycle)} → ${formatPct(b.work_duty_cycle)} (${signedPoints(dv)})` : ""));
        })),
      h("h3", {}, "What changed ", h("abbr", { class: "pd-help", title: (d.definitions || {}).typical_step || "" }, "?")),
      d.highlights.length ? h("ul", { class: "pd-cmp-highlights", id: "pd-cmp-highlights" }, d.highlights.slice(0, SHOWN).map(item))
        : h("p", { class: "pd-muted" }, "Nothing changed by more than 1 % of a step."),
      d.highlights.length > SHOWN ? h("details", { class: "pd-small" }, h("summary", {}, `${d.highlights.length - SHOWN} more`),
        h("ul", { class: "pd-cmp-highlights" }, d.highlights.slice(SHOWN).map(item))) : null,
      (d.warnings || []).length ? h("ul", { class: "pd-warnings" }, d.warnings.map((w) => h("li", {}, w))) : null));

    const basisSel = h("select", { id: "pd-cmp-basis", "aria-label": "Averaged over", onchange: (e) => { this.basis = e.target.value; this.render(); } },
      h("option", { value: "typical_step", selected: this.basis === "typical_step" }, "typical step"),
      h("option", { value: "per_step", selected: this.basis === "per_step" }, "all steps"));
    basisSel.value = this.basis;
    for (const p of d.devices) {
      const set = p[this.basis];
      const rows = deviceRows(set);
      const fmt = (v, unit) => unit === "frac" ? formatPct(v) : formatNs(v);
      el.append(h("section", { class: "pd-card pd-cmp-device", "data-device": p.name, "aria-label": `${p.name}: before and after` },
        h("div", { class: "pd-row" }, h("h2", {}, `${p.name} `, h("span", { class: "pd-muted pd-small" },
          p.paired_by === "order" ? "(paired by order: no device of the same name)" : "")),
        h("label", { class: "pd-field pd-small" }, "Per ", basisSel)),
        rows.length ? h("table", { class: "pd-cmp-table" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), h("th", { scope: "col" }, "Before"), h("th", { scope: "col" }, "After"),
            h("th", { scope: "col" }, "Change"), h("th", { scope: "col" }, "Share of the step"))),
          h("tbody", {}, rows.map((r) => h("tr", { "data-row": r.key },
            h("th", { scope: "row" }, r.cause ? h("span", { class: "chip", style: { background: causeColor(r.cause) } }) : null, r.label),
            h("td", { class: "pd-num" }, r.before === null ? "unknown" : fmt(r.before, r.unit)),
            h("td", { class: "pd-num" }, r.after === null ? "unknown" : fmt(r.after, r.unit)),
            r.before === null || r.after === null ? h("td", { class: "pd-num pd-muted" }, "–")
              : r.unit === "frac" ? deltaCell(signedPoints(r.after - r.before), r.metric, r.after - r.before)
                : deltaCell(signedNs(r.after - r.before), r.metric, r.after - r.before),
            h("td", { class: "pd-num pd-muted" }, r.shareBefore !== undefined && r.shareBefore !== null && r.shareAfter !== null ? `${formatPct(r.shareBefore)} → ${formatPct(r.shareAfter)}` : "")))))
          : h("p", { class: "pd-muted" }, `Active in the ${set.before ? "before" : "after"} run only.`),
        (set.before && set.after && (set.before.waterfall || set.after.waterfall || set.before.mfu != null || set.after.mfu != null ||
          set.before.missing || set.after.missing))
          ? waterfallCompare(set, p.name, { where: this.basis === "per_step" ? "steps" : "typical steps", definition: (d.definitions || {}).mfu || "",
            labels: { before: d.before.label, after: d.after.label } })
          : null));
    }

    // the step chart of each run, side by side (click a step: open that run at that step)
    const charts = h("div", { class: "pd-columns pd-cmp-charts" });
    el.append(h("section", { class: "pd-card" }, h("h2", {}, "Steps ", h("span", { class: "pd-muted pd-small" },
      "(before left, after right; click a step to open it)")), charts));
    const sides = [[d.before, "before"], [d.after, "after"]].map(([side, name]) => {
      const pair = d.devices.find((p) => p[name]);
      return [side, name, pair ? (side.devices || []).find((x) => x.name === pair[name]) : null];
    });
    // one scale for both: a bar's height means the same time on either side
    const maxNs = Math.max(1, ...sides.flatMap(([side, , dev]) => (side.step_chart || []).map((s) =>
      stepSegments(s, dev ? dev.id : 0).reduce((a, x) => a + x.ns, 0))));
    for (const [side, name, dev] of sides) {
      const box = h("div", { class: "pd-cmp-chart", id: `pd-cmp-chart-${name}` });
      charts.append(h("div", {}, h("h3", {}, `${name === "before" ? "Before" : "After"}: ${side.label}`), box));
      const draw = () => renderStepsChart(box, { steps: side.step_chart || [] }, {
        deviceKey: dev ? dev.id : 0, selectedStep: null, maxNs,
        onSelect: (id) => this.onOpenStep({ run: side.run, host: side.host, span: side.span || "", step: id === null ? "" : String(id) }),
      });
      requestAnimationFrame(draw);   // after layout: the chart sizes itself to its column
    }

    el.append(this.findingsCard(d), this.opsCard(d), this.annotationsCard(d));
  }

  findingsCard(d) {
    // a one-time cost (start-up, one step's) is its total, never a rate per step
    const cost = (x, perStep) => (x && x.one_time ? `${formatNs(x.total_ns)} once` : formatNs(perStep));
    const changed = d.findings.filter((f) => f.change !== "same");
    const label = { new: "new", gone: "gone", grew: "grew", shrank: "shrank" };
    return h("section", { class: "pd-card", id: "pd-cmp-findings", "aria-label": "Findings that changed" },
      h("h2", {}, "Findings ", h("span", { class: "pd-muted pd-small" }, `(${changed.length} changed of ${d.findings.length}; matched by kind and culprit: one culprit is one row)`)),
      changed.length ? h("table", { class: "pd-cmp-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Change"), h("th", { scope: "col" }, "Before /step"),
          h("th", { scope: "col" }, "After /step"), h("th", { scope: "col" }, "Finding"))),
        h("tbody", {}, changed.slice(0, 20).map((f) => h("tr", { "data-change": f.change },
          h("td", {}, h("span", { class: `pd-badge pd-change-${f.change}` }, label[f.change])),
          h("td", { class: "pd-num" }, cost(f.before, f.per_step_before_ns)), h("td", { class: "pd-num" }, cost(f.after, f.per_step_after_ns)),
          h("td", {}, (f.after || f.before).title)))))
        : h("p", { class: "pd-muted" }, "No finding changed."));
  }

  opsCard(d) {
    const num = (x) => (Math.abs(x) >= 10 || Number.isInteger(x) ? x.toFixed(0) : x.toFixed(1));
    const table = (rows, byTime, label) => h("table", { class: "pd-cmp-table pd-cmp-ops" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Op"), h("th", { scope: "col" }, label || (byTime ? "Device time before" : "Calls before")),
        h("th", { scope: "col" }, "after"), h("th", { scope: "col" }, "Change"))),
      h("tbody", {}, rows.map((o) => h("tr", { "data-op": o.name },
        h("td", { class: "pd-op-name", title: o.name }, o.label || o.name, h("span", { class: "pd-muted pd-small" }, ` ${o.where} · ${o.kind}`)),
        h("td", { class: "pd-num" }, byTime ? formatNs(o.time_before_ns) : num(o.count_before)),
        h("td", { class: "pd-num" }, byTime ? formatNs(o.time_after_ns) : num(o.count_after)),
        h("td", { class: "pd-num" }, byTime ? signedNs(o.time_delta_ns) : `${o.count_delta > 0 ? "+" : "−"}${num(Math.abs(o.count_delta))}`)))));
    // device time by op group (kernels folded as the diagnosis' device-op table folds them):
    // three instantiations of one templated kernel are one row, not three cut alike
    const groups = (d.device_ops || {}).by_device_time || [];
    const groupTable = (rows) => h("table", { class: "pd-cmp-table pd-cmp-ops", id: "pd-cmp-op-groups" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Op"), h("th", { scope: "col" }, "Device time before"),
        h("th", { scope: "col" }, "after"), h("th", { scope: "col" }, "Change"))),
      h("tbody", {}, rows.map((o) => h("tr", { "data-op": o.name },
        h("td", { class: "pd-op-name", title: o.name }, o.name, h("span", { class: "pd-muted pd-small" },
          ` ${o.class} · ${num(o.calls_before)} → ${num(o.calls_after)} calls`)),
        h("td", { class: "pd-num" }, formatNs(o.before_ns)), h("td", { class: "pd-num" }, formatNs(o.after_ns)),
        h("td", { class: "pd-num" }, signedNs(o.delta_ns))))));
    return h("section", { class: "pd-card", id: "pd-cmp-ops", "aria-label": "Ops that changed" },
      h("h2", {}, "Ops ", h("span", { class: "pd-muted pd-small" }, "(per typical step)")),
      h("div", { class: "pd-columns" },
        h("div", {}, h("h3", {}, "Calls"), d.ops.by_count.length ? table(d.ops.by_count, false) : h("p", { class: "pd-muted" }, "No count changed.")),
        h("div", {}, h("h3", {}, "Device time ", h("span", { class: "pd-muted pd-small" }, "(grouped as in Device time by op)")),
          groups.length ? groupTable(groups) : d.ops.by_device_time.length ? table(d.ops.by_device_time, true) : h("p", { class: "pd-muted" }, "No device time changed."),
          h("h3", {}, "Host time ", h("span", { class: "pd-muted pd-small" }, "(inclusive: a sync point blocking longer shows here)")),
          (d.ops.by_host_time || []).length ? table(d.ops.by_host_time, true, "Host time before") : h("p", { class: "pd-muted" }, "No host time changed."))));
  }

  annotationsCard(d) {
    return h("section", { class: "pd-card", id: "pd-cmp-annotations", "aria-label": "Annotations that changed" },
      h("h2", {}, "Device time by annotation ", h("span", { class: "pd-muted pd-small" }, "(per typical step)")),
      d.annotations.length ? h("table", { class: "pd-cmp-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Annotation"), h("th", { scope: "col" }, "Before"),
          h("th", { scope: "col" }, "After"), h("th", { scope: "col" }, "Change"))),
        h("tbody", {}, d.annotations.map((a) => h("tr", {},
          h("td", { title: a.path.join(" › ") }, a.path.join(" › ")),
          h("td", { class: "pd-num" }, formatNs(a.before_ns)), h("td", { class: "pd-num" }, formatNs(a.after_ns)),
          h("td", { class: "pd-num" }, signedNs(a.delta_ns))))))
        : h("p", { class: "pd-muted" }, "No annotation's device time changed."));
  }
}
