// The roofline chart: a device's op groups as points (log–log: FLOPs per byte against
// FLOP/s achieved, sized by device time), its roofs drawn (the memory slope up to the ridge
// point, the peak beyond). The page only renders the server's device_ops[].roofline; a
// point calls onPoint with its op group's name.
import { h } from "./dom.js";
import { cut, formatNs, formatPct, formatShare, formatSi } from "./format.js";

// a 10 px label's character, wide enough for its widest (digits, capitals)
const CHAR_PX = 6.2;

const SVG = "http://www.w3.org/2000/svg";
const W = 560, H = 300, L = 58, R = 12, T = 12, B = 36;

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function sig(x) {
  return Number(x).toPrecision(3).replace(/\.?0+e/, "e");
}

const RESOURCE_LABELS = { compute: "compute", hbm: "HBM", cmem_read: "CMEM-read", cmem_write: "CMEM-write",
  vmem_read: "VMEM-read", vmem_write: "VMEM-write" };

/** What bounds an op group, as xprof names it ("HBM", "VMEM-write", "compute"); the HBM roof
 *  of bytes not split by memory space is the device memory's ("memory"). */
export function boundLabel(r, memorySpace) {
  if (!r || !r.bound) return "";
  if (!r.bound_by) return r.bound;
  if (r.bound_by === "hbm" && (memorySpace || r.memory_space) !== "hbm") return "memory";
  return RESOURCE_LABELS[r.bound_by] || r.bound_by;
}

/** The utilisations behind the bound: "VMEM-write 49.6 %, HBM 30.5 %, compute 10.9 %". */
export function utilisationText(r) {
  const u = (r && r.utilisation) || {};
  return Object.entries(u).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${RESOURCE_LABELS[k] || k} ${formatPct(v)}`).join(", ");
}

/** Where the chart's points lie: the groups with achieved FLOP/s and an intensity. */
export function rooflinePoints(roof) {
  return ((roof && roof.points) || []).filter((p) => p.intensity > 0 && p.flops_per_s > 0 &&
    Number.isFinite(p.intensity) && Number.isFinite(p.flops_per_s));
}

export function renderRoofline(container, roof, { deviceName = "", onPoint = null } = {}) {
  const pts = rooflinePoints(roof);
  const peak = roof && roof.peak_flops_per_s, bw = roof && roof.peak_bytes_per_s;
  const box = h("div", { class: "pd-roofline", id: "pd-roofline" },
    h("h3", {}, `Roofline${deviceName ? ` of ${deviceName}` : ""} `,
      h("span", { class: "pd-muted pd-small" }, "(op groups over the capture, sized by device time; click a point for its op)")));
  container.append(box);
  if (!pts.length || !(peak > 0)) {
    const memOnly = ((roof && roof.points) || []).length;
    box.append(h("p", { class: "pd-muted pd-small pd-roof-none" }, !(peak > 0) ? "No peak known for this device: no roofline (enter one in the Peak TFLOP/s field of “What the busy time achieves”)."
      // an op group is bound by one of two roofs: with no bandwidth none can be judged
      : !(bw > 0) && !memOnly ? "No memory bandwidth known for this device: no op group can be placed under a roofline."
      : memOnly ? `${memOnly} op group(s) move bytes but do no FLOPs: all memory-bound, nothing to plot on a log scale.` : "No op group has FLOP or byte figures."));
    return box;
  }
  const ridge = bw > 0 ? peak / bw : null;
  const xs = pts.map((p) => p.intensity).concat(ridge ? [ridge] : []);
  const ys = pts.map((p) => p.flops_per_s).concat([peak]);
  const x0 = Math.log10(Math.min(...xs)) - 0.5, x1 = Math.log10(Math.max(...xs)) + 0.5;
  const y0 = Math.log10(Math.min(...ys)) - 0.5, y1 = Math.log10(Math.max(...ys)) + 0.3;
  const X = (v) => L + (Math.log10(v) - x0) / (x1 - x0) * (W - L - R);
  const Y = (v) => T + (1 - (Math.log10(v) - y0) / (y1 - y0)) * (H - T - B);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", style: "max-width: 640px", role: "img", class: "pd-roofline-svg",
    "aria-label": `roofline: ${pts.length} op groups, peak ${sig(peak)} FLOP/s` + (ridge ? `, ridge ${sig(ridge)} FLOP/byte` : "") });
  svg.append(el("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#ccc" }));
  for (let e = Math.ceil(x0); e <= Math.floor(x1); e++) {
    svg.append(el("line", { x1: X(10 ** e), x2: X(10 ** e), y1: T, y2: H - B, stroke: "#eee" }));
    svg.append(el("text", { x: X(10 ** e), y: H - B + 14, "text-anchor": "middle", "font-size": 10 }, e >= -4 && e <= 5 ? String(Number((10 ** e).toPrecision(1))) : `1e${e}`));
  }
  for (let e = Math.ceil(y0); e <= Math.floor(y1); e++) {
    svg.append(el("line", { x1: L, x2: W - R, y1: Y(10 ** e), y2: Y(10 ** e), stroke: "#eee" }));
    svg.append(el("text", { x: L - 4, y: Y(10 ** e) + 3, "text-anchor": "end", "font-size": 10 }, formatSi(10 ** e, "").replace(/\.0+ /, " ").trim()));
  }
  svg.append(el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11 }, roof.memory_space === "hbm" ? "FLOPs per HBM byte" : "FLOPs per byte"));
  svg.append(el("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 11,
    transform: `rotate(-90 12 ${(T + H - B) / 2})` }, "FLOP/s"));
  // the roofs: bandwidth × intensity up to the ridge point, the peak beyond it
  const xa = 10 ** x0, xb = 10 ** x1;
  const peakText = `peak ${formatSi(peak, "FLOP/s")}${roof.dtype ? ` ${roof.dtype}` : ""}` + (bw > 0 ? `, ${formatSi(bw, "B/s")}` : "");
  if (ridge) {
    const xl = Math.max(xa, 10 ** y0 / bw);
    svg.append(el("polyline", { class: "pd-roof", fill: "none", stroke: "#c0392b", "stroke-width": 2,
      points: `${X(xl)},${Y(xl * bw)} ${X(ridge)},${Y(peak)} ${X(xb)},${Y(peak)}` }));
    // the ridge's label sits left of the ridge, above the roof, unless the peak's label
    // (right-aligned on the same line) would reach it: it then goes under the flat roof
    const ridgeText = `ridge ${sig(ridge)} FLOP/B`;
    const peakLeft = W - R - 4 - CHAR_PX * peakText.length;
    const clash = peakLeft < X(ridge) + 4;
    svg.append(el("text", { class: "pd-roof-ridge", x: clash ? X(ridge) + 4 : X(ridge) - 4, y: clash ? Y(peak) + 13 : Y(peak) - 4,
      "text-anchor": clash ? "start" : "end", "font-size": 10, fill: "#c0392b" }, ridgeText));
  } else {
    svg.append(el("line", { class: "pd-roof", x1: X(xa), x2: X(xb), y1: Y(peak), y2: Y(peak), stroke: "#c0392b", "stroke-width": 2 }));
  }
  // the flat roof says what it is: the peak and its dtype
  svg.append(el("text", { class: "pd-roof-peak", x: W - R - 4, y: Y(peak) - 4, "text-anchor": "end", "font-size": 10, fill: "#c0392b" }, peakText));
  const maxT = Math.max(1, ...pts.map((p) => p.total_ns));
  for (const p of [...pts].sort((a, b) => b.total_ns - a.total_ns)) {
    const c = el("circle", { class: "pd-roof-point", cx: X(p.intensity), cy: Y(p.flops_per_s),
      r: 3 + 9 * Math.sqrt(p.total_ns / maxT),
      // compute blue, HBM orange, an on-chip roof (CMEM, VMEM) purple
      fill: p.bound === "compute" ? "#2e86c1" : (p.bound_by && p.bound_by !== "hbm" ? "#8e44ad" : "#e67e22"),
      "fill-opacity": 0.6, stroke: "#333", "data-op": p.name, tabindex: 0 });
    c.append(el("title", {}, `${cut(p.name, 160)}\n${formatNs(p.total_ns)} (${formatPct(p.share_of_busy)} of busy), ` +
      `${formatSi(p.flops_per_s, "FLOP/s")}, ${sig(p.intensity)} FLOP/byte, ${boundLabel(p, roof.memory_space)}-bound, ` +
      `${p.efficiency === null ? "–" : formatShare(p.efficiency)} of roofline` +
      (utilisationText(p) ? `\nutilisation: ${utilisationText(p)}` : "")));
    if (onPoint) {
      c.addEventListener("click", () => onPoint(p.name));
      c.addEventListener("keydown", (e) => { if (e.key === "Enter") onPoint(p.name); });
    }
    svg.append(c);
  }
  box.append(svg);
  // the colours' key; on-chip roofs are not drawn (their intensity is per another byte count)
  const onchip = pts.some((p) => p.bound === "memory" && p.bound_by && p.bound_by !== "hbm");
  box.append(h("p", { class: "pd-small pd-muted", id: "pd-roofline-key" },
    `blue: compute-bound · orange: ${roof.memory_space === "hbm" ? "HBM" : "memory"}-bound` +
    (onchip ? " · purple: bound by an on-chip memory (CMEM or VMEM reads or writes; its roof is not drawn, see each point's utilisation)" : "")));
  // groups with bytes and no FLOPs (elementwise, copies) have no place on a log scale:
  // say how much of the busy time they are, so an empty-looking chart does not mislead
  const off = ((roof && roof.points) || []).filter((p) => !pts.includes(p));
  if (off.length) {
    const share = off.reduce((a, p) => a + (p.share_of_busy || 0), 0);
    box.append(h("p", { class: "pd-small pd-muted", id: "pd-roofline-off" },
      `${off.length} op group(s) move bytes but do no FLOPs (elementwise, normalisation, copies: ${formatPct(share)} of busy): ` +
      "not plotted on a log scale; their share of the bandwidth is in the op table's Roofline column."));
  }
  const above = pts.filter((p) => p.efficiency !== null && p.efficiency > 1);
  if (above.length) {
    box.append(h("p", { class: "pd-small pd-muted", id: "pd-roofline-above" },
      `${above.length} op group(s) above the roof: their model FLOPs exceed what the hardware did (Winograd or FFT ` +
      "convolutions multiply less than the definition counts), or the FLOPs of an op that launched several kernels are " +
      "not split as the kernels did them."));
  }
  return box;
}
