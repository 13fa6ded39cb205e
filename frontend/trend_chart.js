// The Trend view's chart: a run's captures left to right in time order, three panels on one
// x axis (typical step time; duty cycle and MFU; idle by cause as a share of the step), a
// flagged (untrusted) capture a grey column with its reason, its figures left out of the
// lines. Pure layout (layoutTrend) + SVG render; a click on a capture calls onOpen.
import { causeColor, causeLabel, formatNs, formatPct } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const L = 70, R = 20, T = 8;
/** Each panel's top and height, and the room the time and step labels take below. */
const PANELS = { step: [T + 14, 150], util: [T + 14 + 150 + 30, 90], idle: [T + 14 + 150 + 30 + 90 + 30, 90] };
const AXIS_H = 40;
export const CHART_H = PANELS.idle[0] + PANELS.idle[1] + AXIS_H;
export const LINE_COLORS = { step: "#e65100", duty: causeColor("busy"), mfu: "#5254a3" };

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** "00:53" (UTC) of an ISO time; with the date when the captures span several days. */
export function captureTime(iso, withDate) {
  if (!iso) return "?";
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})/.exec(iso);
  if (!m) return String(iso);
  return withDate ? `${m[2]}-${m[3]} ${m[4]}:${m[5]}` : `${m[4]}:${m[5]}:${m[6]}`;
}

/** "steps 1–6", "step 4", "" (no step numbers). */
export function stepRange(c) {
  if (c.first_step === null || c.first_step === undefined || !c.steps) return "";
  return c.steps > 1 ? `steps ${c.first_step}–${c.first_step + c.steps - 1}` : `step ${c.first_step}`;
}

/** Whether a capture's figures are drawn (trusted, with a step time). */
export function drawn(c) {
  return !!(c.trust && c.trust.ok) && c.step_time_ns !== null && c.step_time_ns !== undefined;
}

/** Columns of the captures (x centre, width) and each panel's y of every drawn figure. */
export function layoutTrend(doc, width) {
  const caps = doc.captures || [];
  const slot = Math.max(1, (width - L - R) / Math.max(1, caps.length));
  const maxStep = Math.max(1, ...caps.filter(drawn).map((c) => c.step_time_ns));
  const top = niceCeil(maxStep);
  const y = (panel, frac) => PANELS[panel][0] + PANELS[panel][1] * (1 - Math.max(0, Math.min(1, frac)));
  const days = new Set(caps.map((c) => String(c.start_time || "").slice(0, 10)));
  return { slot, stepTop: top, withDate: days.size > 1, cols: caps.map((c, i) => {
    const ok = drawn(c);
    let acc = 0;
    const bands = ok ? Object.entries(c.idle_by_cause || {}).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1])
      .map(([cause, share]) => { const y1 = y("idle", acc); acc += share; return { cause, share, y0: y("idle", acc), y1 }; }) : [];
    return { c, i, ok, x: L + slot * (i + 0.5),
      step: ok ? y("step", c.step_time_ns / top) : null,
      duty: ok && c.duty_cycle != null ? y("util", c.duty_cycle) : null,
      mfu: ok && c.mfu != null ? y("util", c.mfu) : null, bands };
  }) };
}

function cutTo(s, n) {
  return s.length <= n ? s : s.slice(0, Math.max(1, n - 1)) + "…";
}

/** The smallest of 1, 2, 2.5, 5 × 10^k at or above x (an axis' top). */
function niceCeil(x) {
  const p = 10 ** Math.floor(Math.log10(x));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((v) => v >= x);
}

function axes(svg, lay, width) {
  const right = width - R;
  const grid = (panel, fracs, label) => {
    const [t, hgt] = PANELS[panel];
    for (const f of fracs) {
      const yy = t + hgt * (1 - f);
      svg.append(el("line", { x1: L, x2: right, y1: yy, y2: yy, class: f === 0 ? "trend-axis" : "trend-grid" }),
        el("text", { x: L - 6, y: yy + 4, "text-anchor": "end", class: "trend-tick" }, label(f)));
    }
  };
  grid("step", [0, 0.5, 1], (f) => (f ? formatNs(f * lay.stepTop) : "0"));
  grid("util", [0, 0.5, 1], (f) => `${f * 100}%`);
  grid("idle", [0, 0.5, 1], (f) => `${f * 100}%`);
  const title = (panel, text) => svg.append(el("text", { x: L, y: PANELS[panel][0] - 5, class: "trend-panel-title" }, text));
  title("step", "Typical step time");
  title("util", lay.cols.some((k) => k.mfu !== null) ? "Duty cycle · MFU" : "Duty cycle (no MFU for these captures)");
  title("idle", "Idle by cause (share of the step)");
}

/** A figure's line over the drawn captures; across a flagged one dashed (no figure there). */
function line(svg, cols, key, color, cls) {
  const pts = cols.filter((k) => k[key] !== null);
  for (let j = 1; j < pts.length; j++) {
    const a = pts[j - 1], b = pts[j];
    svg.append(el("line", { x1: a.x, y1: a[key], x2: b.x, y2: b[key], stroke: color, "stroke-width": 2,
      "stroke-dasharray": b.i - a.i > 1 ? "4 4" : null, class: cls }));
  }
  for (const k of pts) svg.append(el("circle", { cx: k.x, cy: k[key], r: 3.5, fill: color, class: `${cls}-dot` }));
}

/** One capture's column: the hit area (hover, click, keyboard), a flagged capture's grey
 *  band and mark, its idle bands, its time and steps under the axis. */
function column(lay, k, onOpen, changed) {
  const c = k.c, w = lay.slot, x0 = k.x - w / 2, bottom = PANELS.idle[0] + PANELS.idle[1];
  const g = el("g", { class: "trend-capture" + (k.ok ? "" : " flagged"), "data-session": c.session,
    tabindex: 0, role: "button" });
  const problems = (c.trust && c.trust.problems) || [];
  g.append(el("title", {}, [`${captureTime(c.start_time, true)} UTC · ${c.session}${stepRange(c) ? ` · ${stepRange(c)}` : ""}`,
    k.ok ? `step ${formatNs(c.step_time_ns)}, duty cycle ${formatPct(c.duty_cycle)}${c.mfu != null ? `, MFU ${formatPct(c.mfu)}` : ""}`
      : `flagged, left out of the lines: ${problems.join("; ") || "no figures"}`,
    ...k.bands.map((b) => `${causeLabel(b.cause)}: ${formatPct(b.share)} of the step`),
    changed ? changed.summary : null, "Click to open it in Diagnose"].filter(Boolean).join("\n")));
  g.append(el("rect", { x: x0 + 1, y: T, width: Math.max(1, w - 2), height: bottom - T, class: k.ok ? "trend-hit" : "trend-hit trend-flag-band" }));
  if (!k.ok) {
    g.append(el("text", { x: k.x, y: PANELS.step[0] + PANELS.step[1] / 2, "text-anchor": "middle", class: "trend-flag-mark" }, "⚠"),
      el("text", { x: k.x, y: PANELS.step[0] + PANELS.step[1] / 2 + 16, "text-anchor": "middle", class: "trend-flag-text" },
        w >= 70 ? "not trusted" : ""),
      // the reason's head ("empty file (0 bytes)"), as much as the column holds
      el("text", { x: k.x, y: PANELS.step[0] + PANELS.step[1] / 2 + 30, "text-anchor": "middle", class: "trend-flag-text trend-flag-reason" },
        w >= 70 && problems.length ? cutTo(problems[0].split(":")[0], Math.floor(w / 6.5)) : ""));
  }
  const bw = Math.min(36, w * 0.5);
  for (const b of k.bands) {
    g.append(el("rect", { x: k.x - bw / 2, y: b.y0, width: bw, height: Math.max(0.5, b.y1 - b.y0), fill: causeColor(b.cause), class: "trend-band" }));
  }
  g.append(el("text", { x: k.x, y: bottom + 16, "text-anchor": "middle", class: "trend-tick trend-time" }, captureTime(c.start_time, lay.withDate)),
    el("text", { x: k.x, y: bottom + 30, "text-anchor": "middle", class: "trend-tick" }, w >= 64 ? stepRange(c) : ""));
  const open = () => onOpen(c);
  g.addEventListener("click", open);
  g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } });
  return g;
}

/** The step-time ratio of each change, at the capture it leads into (▲ slower, ▼ faster). */
function changeMarks(svg, lay, changes) {
  for (const ch of changes) {
    const k = lay.cols.find((x) => x.c.session === ch.to);
    if (!k || k.step === null || ch.step_time_ratio == null) continue;
    const up = ch.step_time_ratio > 1;
    svg.append(el("text", { x: k.x, y: Math.max(PANELS.step[0] + 10, k.step - 9), "text-anchor": "middle",
      class: `trend-change ${up ? "slower" : "faster"}` }, `${up ? "▲" : "▼"} ×${ch.step_time_ratio.toFixed(2)}`));
  }
}

export function renderTrendChart(container, doc, { onOpen }) {
  container.textContent = "";
  const width = Math.max(480, container.clientWidth || 900);
  const lay = layoutTrend(doc, width);
  const svg = el("svg", { width, height: CHART_H, class: "trend-svg", role: "group",
    "aria-label": "Trend: step time, duty cycle, MFU and idle by cause over the captures" });
  axes(svg, lay, width);
  const into = new Map((doc.changes || []).map((ch) => [ch.to, ch]));
  for (const k of lay.cols) svg.append(column(lay, k, onOpen, into.get(k.c.session)));
  line(svg, lay.cols, "step", LINE_COLORS.step, "trend-step");
  line(svg, lay.cols, "duty", LINE_COLORS.duty, "trend-duty");
  line(svg, lay.cols, "mfu", LINE_COLORS.mfu, "trend-mfu");
  changeMarks(svg, lay, doc.changes || []);
  container.append(svg);
  return lay;
}
