// What the busy time achieves: MFU beside the duty cycle in the summary, and the MFU
// waterfall of the selected step (or of the device's steps window) as a stacked bar whose
// points add up to 100. Everything comes from the current diagnosis JSON
// (devices[].efficiency, steps[].devices[k]); nothing is kept between renders.
import { h } from "./dom.js";
import { causeColor, causeLabel, formatShare, formatSi, pageAdvice, peakSourceText, squeeze } from "./format.js";
import { renderRoofline } from "./roofline.js";

// the waterfall's parts beyond the idle causes: label and colour (a cause's are its own);
// the single run's card and the compare view's both read them through partLabel/partColor
const PART = {
  small_gaps: ["gaps under the threshold", "#bbbbbb"],
  peer_wait: ["peer wait at collectives", null],
  no_matmul_work: ["busy with no matmul work (elementwise, copies, collective transfer)", "#f0b27a"],
  matmul_below_peak: ["matmul-class ops below peak", "#85c1e9"],
  mfu: ["achieved MFU", "#1e8449"],
};

export function partLabel(k) {
  return PART[k] ? PART[k][0] : `idle: ${causeLabel(k)}`;
}

export function partColor(k) {
  return (PART[k] && PART[k][1]) || causeColor(k);
}

function pctOf(x) {
  return formatShare(x);
}

/** A waterfall part's points: one decimal, two significant digits under 0.05 (the MFU of
 *  a copy-bound TPU is 0.0005 points, not "0.0"). */
function pts(v) {
  return v <= 0 ? "0" : v >= 0.05 ? v.toFixed(1) : v >= 0.001 ? String(Number(v.toPrecision(2))) : "<0.001";
}

/** The waterfall shown: the selected step's on the device, else the device's own; where
 *  the run's collectives are joined (the /collectives answer ``coll``), the same window's
 *  waterfall with the peer wait the run's other files give (``run``: how many files). */
export function shownWaterfall(diag, deviceId, step, coll = null) {
  const dev = (diag.devices || []).find((x) => String(x.id) === String(deviceId)) || {};
  const e = dev.efficiency || null;
  const key = String(deviceId);
  const re = coll && coll.state === "joined" && coll.efficiency ? coll.efficiency : null;
  if (step !== null && step !== undefined && step !== "") {
    const s = (diag.steps || []).find((x) => String(x.id) === String(step));
    const sd = s && (s.devices || {})[key];
    const rs = re && (re.steps || {})[String(step)] && re.steps[String(step)][key];
    if (sd) return { where: `step ${step}`, waterfall: rs || sd.waterfall || null, mfu: sd.mfu ?? null, eff: e, dev, run: rs ? re.hosts : null };
  }
  const rd = re && (re.devices || {})[key];
  return { where: "its steps window", waterfall: rd ? rd.waterfall : e && e.waterfall, mfu: e && e.mfu, eff: e, dev, run: rd ? re.hosts : null };
}

/** Where the waterfall's peer wait comes from, in words (null: nothing to say). */
function peerSource(s, coll) {
  if (s.run) return `Peer wait from the collectives ${s.run === 1 ? "among this file's devices" : `of the run's ${s.run} files (ranks or hosts)`}: the wait for the last peer; the rest of the collectives is transfer, in no matmul work.`;
  const st = coll && coll.state;
  if (st === "pending") return "Peer wait: matching the collectives with the run's other files…";
  if (st === "alone") return "Peer wait unknown: no other file of the run shares these collectives, so their time counts as no matmul work.";
  return null;
}

function mfuStat(dev, def) {
  const e = dev.efficiency;
  if (!e) return null;
  const pk = e.peak_flops_per_s;
  const model = e.device_model ? ` (${e.device_model})` : "";
  const label = pk ? `${dev.name}${model} MFU (of ${formatSi(pk, "FLOP/s")} ${e.peak_dtype || ""}${e.peak_source ? `, ${peakSourceText(e.peak_source)}` : ""}${e.device_identified_by ? `, identified by ${e.device_identified_by}` : ""})`
    : e.achieved_flops_per_s ? `${dev.name}: ${formatSi(e.achieved_flops_per_s, "FLOP/s")} achieved, no peak known` : `${dev.name}: no FLOP figures`;
  return h("div", { class: "pd-stat pd-mfu-stat", "data-device": String(dev.id), title: [def, pageAdvice(e.missing)].filter(Boolean).join("\n") },
    h("span", { class: "pd-stat-value pd-mfu" }, e.mfu !== null && e.mfu !== undefined ? `${e.mfu_lower_bound && !pctOf(e.mfu).startsWith("<") ? "≥" : ""}${pctOf(e.mfu)}` : "–"),
    h("span", { class: "pd-stat-label" }, label + (e.mfu_lower_bound ? " — a lower bound: ops with no cost figure count none of their FLOPs" : "")),
    // memory-bound matmuls (decode): the bandwidth they reach is the figure that says
    e.matmul_memory_bound && e.bandwidth_utilisation != null ? h("span", { class: "pd-stat-label pd-bw" },
      `bandwidth ${pctOf(e.bandwidth_utilisation)} of ${formatSi(e.peak_bytes_per_s, "B/s")}: its matmuls are memory-bound`) : null);
}

function waterfallBar(w, where, dev) {
  const parts = Object.entries(w).filter(([, v]) => Number.isFinite(v) && v > 0);
  const total = parts.reduce((a, [, v]) => a + v, 0);
  return h("div", { class: "pd-waterfall", id: "pd-waterfall", "data-total": total.toFixed(2) },
    h("div", { class: "pd-small" }, `MFU waterfall of ${dev.name} over ${where}: the time at peak, in points adding up to ${total.toFixed(1)}`),
    h("div", { class: "dop-stack pd-wf-stack", role: "img", "aria-label": parts.map(([k, v]) => `${partLabel(k)} ${pts(v)}`).join(", ") },
      parts.map(([k, v]) => h("span", { class: "dop-part pd-wf-part", "data-part": k,
        style: { width: `${v}%`, background: partColor(k) }, title: `${partLabel(k)}: ${v.toFixed(2)} points` }))),
    // the largest eight parts, and the achieved MFU always (it is the point of the chart,
    // however small)
    h("ul", { class: "pd-idle pd-wf-legend" }, parts.sort((a, b) => b[1] - a[1])
      .filter(([k], i) => i < 8 || k === "mfu").map(([k, v]) => h("li", {},
        h("span", { class: "chip", style: { background: partColor(k) } }), `${partLabel(k)}: `, h("b", {}, `${pts(v)} pts`)))));
}

/** The summary's efficiency parts: an MFU stat per device beside the duty cycles (in the
 *  summary's .pd-stats) and the waterfall of the selected step on the selected device. */
export function renderEfficiency(summaryEl, diag, { deviceId = 0, step = null, coll = null, onCapture = null, peak = "", onPeak = null } = {}) {
  const def = (diag.definitions || {}).mfu || "";
  const stats = summaryEl.querySelector(".pd-stats");
  const devs = (diag.devices || []).filter((x) => x.ops > 0 && x.efficiency);
  if (!devs.length) return;
  const statEls = devs.map((x) => mfuStat(x, def)).filter(Boolean);
  if (stats) stats.append(...statEls);
  const s = shownWaterfall(diag, deviceId, step, coll);
  const box = h("div", { class: "pd-efficiency", id: "pd-efficiency", "data-peer-from": s.run ? String(s.run) : "" },
    h("h3", {}, "What the busy time achieves ", h("abbr", { title: def, class: "pd-help" }, "?")));
  if (s.waterfall) {
    box.append(waterfallBar(s.waterfall, s.where, s.dev));
    const said = peerSource(s, coll);
    if (said) box.append(h("p", { class: "pd-small pd-muted pd-wf-peer" }, said));
  }
  else box.append(h("p", { class: "pd-muted pd-small" }, `No MFU waterfall for ${s.dev.name || "this device"} over ${s.where}` +
    (s.eff && s.eff.missing ? `: ${pageAdvice(s.eff.missing)}` : ": no FLOP figures or no peak.")));
  const ctl = peakControl(s.eff, peak, onPeak);
  if (ctl) box.append(ctl);
  const g = graphNote(s.eff, diag.graph_captures, onCapture);
  if (g) box.append(g);
  const stepsHead = summaryEl.querySelector("h3");
  summaryEl.insertBefore(box, stepsHead || null);
}

/** The peak override: a field for the peak TFLOP/s MFU, its waterfall and the roofline
 *  are taken against (the route's peak_tflops, the CLI's --peak-tflops), shown where FLOPs
 *  are counted; ``onPeak("")`` goes back to the device's own.  null: nothing to offer. */
function peakControl(e, peak, onPeak) {
  if (!onPeak || !e || !(e.flops > 0 || e.achieved_flops_per_s > 0 || peak)) return null;
  const own = e.peak_flops_per_s && e.peak_source !== "option" ? e.peak_flops_per_s / 1e12 : null;
  const input = h("input", { type: "number", id: "pd-peak", class: "pd-peak-input", min: "0.001", max: "1000000", step: "any",
    "aria-label": "Peak TFLOP/s", placeholder: own ? String(Number(own.toPrecision(4))) : "e.g. 312", value: peak || undefined });
  const apply = (ev) => {
    ev.preventDefault();
    const v = Number(input.value);
    if (!input.value || !(v >= 0.001 && v <= 1e6)) {
      input.setCustomValidity("a peak from 0.001 to 1,000,000 TFLOP/s");
      input.reportValidity();
      return;
    }
    onPeak(String(v));
  };
  input.addEventListener("input", () => input.setCustomValidity(""));
  const said = peak ? "Your peak:" : e.peak_flops_per_s ? "Another peak:" : "No peak known for this device: enter one,";
  return h("form", { class: "pd-peak-form pd-small", id: "pd-peak-form", "data-peak": peak || "", onsubmit: apply },
    h("label", {}, `${said} `, input, " TFLOP/s "),
    h("button", { type: "submit", class: "pd-button", id: "pd-peak-apply" }, "Use this peak"),
    peak ? h("button", { type: "button", class: "pd-button", id: "pd-peak-reset", onclick: () => onPeak("") },
      own || e.peak_source === "option" ? "The device's own" : "Clear") : null,
    h("span", { class: "pd-muted" }, " MFU, its waterfall and the roofline are taken against it (the CLI's --peak-tflops)."));
}

/** A device's graph replays where some of their kernels have no captured op, or the
 *  replays left captured launches unrecorded, with the capture files they may be aligned
 *  with (`caps`: the answer's graph_captures; `onCapture(path)`: align with that one, ""
 *  with those beside the trace) (null: nothing to say). */
function graphNote(e, caps, onCapture) {
  if (!e || !e.graph_kernels_total) return null;
  const m = e.graph_kernels_matched || 0, t = e.graph_kernels_total, u = e.graph_launches_unrecorded || 0;
  const choices = (caps && caps.choices) || [];
  const chosen = (caps && caps.chosen) || "";
  if (m >= t && !u && !chosen) return null;
  const said = [];
  if (m < t) said.push(`${m} of ${t} kernels replayed from CUDA/HIP graphs matched the ops that captured them` +
    (m ? "; the rest carry no cost figure" : chosen ? ": the capture named matched none" : ": no capture was read (capture_traces/ beside the trace)"));
  else said.push(`${m} of ${t} kernels replayed from CUDA/HIP graphs matched the ops that captured them`);
  if (u) said.push(`${u} captured launches were not recorded in the replays: the duty cycle and MFU are lower bounds`);
  const p = h("p", { class: "pd-small pd-muted pd-graphs", "data-matched": String(m), "data-total": String(t) }, said.join(". ") + ".");
  if (onCapture && (choices.length || chosen)) {
    const opts = [["", "capture_traces/ beside the trace"], ...choices.map((c) => [c, c])];
    if (chosen && !choices.includes(chosen)) opts.push([chosen, chosen]);
    const sel = h("select", { id: "pd-capture", "aria-label": "Align graph replays with capture",
      onchange: (ev) => onCapture(ev.target.value) },
      opts.map(([v, label]) => h("option", { value: v, selected: v === chosen, title: label }, squeeze(label, 60, 200))));
    sel.value = chosen;
    p.append(" ", h("label", { class: "pd-field pd-capture" }, "Align with capture: ", sel));
  }
  return p;
}

/** The roofline chart of the selected device under the op table; a point flashes its op's
 *  row and opens its longest instance in the trace viewer where the row links one. */
export function renderDeviceRoofline(opsEl, deviceOps, deviceId) {
  const dev = ((deviceOps && deviceOps.devices) || []).find((x) => String(x.device) === String(deviceId));
  if (!dev || !dev.roofline) return;
  renderRoofline(opsEl, dev.roofline, {
    deviceName: dev.name,
    onPoint: (name) => {
      const row = [...opsEl.querySelectorAll(".dop-row")].find((r) => r.getAttribute("data-op") === name);
      if (!row) return;
      row.scrollIntoView({ block: "center" });
      row.classList.add("pd-flash");
      setTimeout(() => row.classList.remove("pd-flash"), 1500);
      const a = row.querySelector("a.dop-open");
      if (a) window.open(a.href, "_blank", "noopener");
    },
  });
}
