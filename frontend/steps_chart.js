// Steps chart: one stacked bar per step (busy + idle by cause). Pure layout + SVG render.
import { causeColor, causeLabel, formatNs, formatPct, formatShare } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const LABEL_PX = 30;     // room a step number needs
const FLAG_PX = 60;      // bars narrower than this get a ▲ instead of the word

/** Aggregate one step for one device: [{cause, ns}] busy first, then causes by size. */
export function stepSegments(step, deviceKey, hostOnly) {
  if (hostOnly) return [{ cause: "host_step", ns: Math.max(0, step.end_ns - step.start_ns) }];
  const d = (step.devices || {})[String(deviceKey)];
  if (!d) return [];
  const segs = [];
  // peer wait is busy time (inside collectives), drawn as its own part of the busy bar
  const pw = Math.min(Math.max(d.peer_wait_ns || 0, 0), d.busy_ns || 0);
  if (d.busy_ns - pw > 0) segs.push({ cause: "busy", ns: d.busy_ns - pw });
  if (pw > 0) segs.push({ cause: "peer_wait", ns: pw });
  const causes = Object.entries(d.idle_by_cause_ns || {}).sort((a, b) => b[1] - a[1]);
  let named = 0;
  for (const [cause, ns] of causes) {
    if (ns > 0) { segs.push({ cause, ns }); named += ns; }
  }
  const rest = (d.idle_ns || 0) - named;
  if (rest > 0) segs.push({ cause: "other_idle", ns: rest });
  return segs;
}

export function isRecompile(step) {
  return !!(step.compile && step.compile.count > 0);
}

/** "recompiles" when a compile of the step compiled a function again, else "compiles". */
export function compileWord(step) {
  return step.compile && step.compile.recompiles > 0 ? "recompiles" : "compiles";
}

/**
 * Layout: bars of equal width; bar height ∝ sqrt(step duration / longest) so that short
 * steps stay visible next to compile steps; segments split the bar in proportion.
 */
export function layoutSteps(steps, deviceKey, width, height, opts = {}) {
  const top = opts.top ?? 18, bottom = opts.bottom ?? 18;
  const plotH = Math.max(1, height - top - bottom);
  const n = steps.length || 1;
  const slot = width / n;
  const gapPx = Math.min(6, slot * 0.2);
  const totals = steps.map((s) => stepSegments(s, deviceKey, opts.hostOnly).reduce((a, x) => a + x.ns, 0));
  const maxT = Math.max(1, opts.maxNs || 0, ...totals);   // maxNs: one scale for charts side by side
  // step numbers at least LABEL_PX apart: every k-th bar is labelled when bars are narrow
  const every = Math.max(1, Math.ceil(LABEL_PX / slot));
  return steps.map((s, i) => {
    const segsIn = stepSegments(s, deviceKey, opts.hostOnly);
    const total = totals[i];
    const h = total > 0 ? Math.max(3, Math.sqrt(total / maxT) * plotH) : 0;
    let y = top + plotH;
    const segments = segsIn.map((sg) => {
      const sh = total > 0 ? (sg.ns / total) * h : 0;
      y -= sh;
      return { cause: sg.cause, ns: sg.ns, y, h: sh };
    });
    const dev = (s.devices || {})[String(deviceKey)] || {};
    return {
      id: s.id, x: i * slot + gapPx / 2, w: Math.max(1, slot - gapPx), total_ns: total,
      barTop: top + plotH - h, busy_ns: dev.busy_ns || 0, duty_cycle: dev.duty_cycle, mfu: dev.mfu ?? null,
      recompile: isRecompile(s), compileWord: compileWord(s), outlier: !!s.outlier, segments,
      labelled: i % every === 0, narrow: slot < FLAG_PX,
    };
  });
}

/** A bin of consecutive steps (the first answer's step_bins above 500 steps) as a step the
 *  chart can draw: its mean step's split; a click picks its slowest step. */
export function binAsStep(b) {
  return { id: b.slowest, first: b.first, last: b.last, bin: b, start_ns: 0, end_ns: b.mean_ns,
    devices: b.devices, outlier: b.outliers > 0, compile: { count: b.compiling, recompiles: b.recompiling } };
}

/** Whether step id `step` is the bar `el` draws (a step, or a bin holding it). */
export function barHoldsStep(el, step) {
  if (step === null || step === undefined || step === "") return false;
  if (el.dataset.first !== undefined) return Number(el.dataset.first) <= Number(step) && Number(step) <= Number(el.dataset.last);
  return el.dataset.step === String(step);
}

/** Average step time and step count over the capture (from the bins when the answer has
 *  only some step rows). */
export function stepStats(diag) {
  const bins = diag.step_bins, steps = diag.steps || [];
  if (bins && bins.length) {
    const n = bins.reduce((a, b) => a + b.steps, 0);
    return { count: diag.steps_total ?? n, avg: n ? bins.reduce((a, b) => a + b.mean_ns * b.steps, 0) / n : null };
  }
  return { count: steps.length, avg: steps.length ? steps.reduce((a, s) => a + (s.end_ns - s.start_ns), 0) / steps.length : null };
}

export function renderStepsChart(container, diag, { deviceKey, selectedStep, onSelect, maxNs, hostOnly }) {
  container.textContent = "";
  const width = Math.max(320, container.clientWidth || 800);
  const height = 200;
  const binned = !!(diag.step_bins && diag.step_bins.length);
  const shown = binned ? diag.step_bins.map(binAsStep) : diag.steps || [];
  const bars = layoutSteps(shown, deviceKey, width, height, { maxNs, hostOnly });
  bars.forEach((b, i) => { b.bin = shown[i].bin; });
  const isSel = (b) => b.bin ? b.bin.first <= Number(selectedStep) && Number(selectedStep) <= b.bin.last && selectedStep !== "" && selectedStep != null
    : String(selectedStep) === String(b.id);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("class", "steps-svg");
  svg.setAttribute("role", "group");
  svg.setAttribute("aria-label", "Steps: busy vs idle time by cause");
  for (const b of bars) {
    const g = document.createElementNS(SVG, "g");
    g.setAttribute("class", "step-bar" + (b.recompile ? " recompile" : "") +
      (b.outlier ? " outlier" : "") + (isSel(b) ? " selected" : "") + (b.bin ? " step-bin" : ""));
    g.setAttribute("data-step", String(b.id));
    if (b.bin) { g.setAttribute("data-first", String(b.bin.first)); g.setAttribute("data-last", String(b.bin.last)); }
    if (b.recompile) g.setAttribute("data-recompile", "1");
    g.setAttribute("tabindex", "0");
    g.setAttribute("role", "button");
    const title = document.createElementNS(SVG, "title");
    const pw = b.segments.find((x) => x.cause === "peer_wait");
    const bn = b.bin;
    title.textContent = (bn ? `Steps ${bn.first}–${bn.last} (${bn.steps}): median ${formatNs(bn.median_ns)}, ` +
      `${formatNs(bn.min_ns)} to ${formatNs(bn.max_ns)}; click for the slowest, step ${bn.slowest}\nMean step: ${formatNs(b.total_ns)}`
      : `Step ${b.id}: ${formatNs(b.total_ns)}`) + (hostOnly ? " (host only: no device activity)" : `, duty cycle ${formatPct(b.duty_cycle)}`) +
      (b.mfu !== null && b.mfu !== undefined ? `, MFU ${formatShare(b.mfu)}` : "") +
      (pw && b.total_ns > 0 ? ` — ${(100 * pw.ns / b.total_ns).toFixed(0)} points of it waiting for peers at collectives` : "") +
      (b.recompile ? ` — ${b.compileWord}` : "") + (b.outlier ? " — outlier" : "") +
      b.segments.map((s) => `\n${causeLabel(s.cause)}: ${formatNs(s.ns)}`).join("");
    g.appendChild(title);
    const hit = document.createElementNS(SVG, "rect");
    hit.setAttribute("x", String(b.x)); hit.setAttribute("y", "0");
    hit.setAttribute("width", String(b.w)); hit.setAttribute("height", String(height - 18));
    hit.setAttribute("class", "step-hit");
    g.appendChild(hit);
    for (const s of b.segments) {
      const r = document.createElementNS(SVG, "rect");
      r.setAttribute("x", String(b.x)); r.setAttribute("y", String(s.y));
      r.setAttribute("width", String(b.w)); r.setAttribute("height", String(Math.max(0, s.h)));
      r.setAttribute("fill", causeColor(s.cause));
      g.appendChild(r);
    }
    if (b.recompile || b.outlier) {
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("x", String(b.x + b.w / 2)); t.setAttribute("y", String(Math.max(10, b.barTop - 4)));
      t.setAttribute("class", "step-flag");
      t.setAttribute("text-anchor", "middle");
      t.textContent = b.narrow ? "▲" : b.recompile ? b.compileWord : "outlier";
      g.appendChild(t);
    }
    const lbl = document.createElementNS(SVG, "text");
    lbl.setAttribute("x", String(b.x + b.w / 2)); lbl.setAttribute("y", String(height - 4));
    lbl.setAttribute("text-anchor", "middle"); lbl.setAttribute("class", "step-label");
    const selected = isSel(b);
    lbl.textContent = bn ? String(selected ? selectedStep : bn.first) : String(b.id);
    if (b.labelled || selected) g.appendChild(lbl);
    const pick = () => onSelect(selected ? null : b.id);
    g.addEventListener("click", pick);
    g.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); }
    });
    svg.appendChild(g);
  }
  container.appendChild(svg);
}
