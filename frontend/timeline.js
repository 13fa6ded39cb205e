// Canvas timeline of one device: busy band with idle gaps coloured by cause.
// Wheel zooms around the cursor, drag pans, hover shows a tooltip, double-click resets.
import { causeColor, causeLabel, formatNs } from "./format.js";

/** Zoom `view` ({start,end} ns) by `factor` (<1 zooms in) around time `t`, inside `bounds`. */
export function zoomView(view, t, factor, bounds) {
  const span = Math.max(1000, (view.end - view.start) * factor);
  const frac = (t - view.start) / Math.max(1, view.end - view.start);
  let start = t - frac * span;
  return clampView({ start, end: start + span }, bounds);
}

export function panView(view, deltaNs, bounds) {
  return clampView({ start: view.start + deltaNs, end: view.end + deltaNs }, bounds);
}

export function clampView(view, bounds) {
  const span = Math.min(view.end - view.start, bounds.end - bounds.start);
  let start = Math.max(bounds.start, Math.min(view.start, bounds.end - span));
  return { start: Math.round(start), end: Math.round(start + span) };
}

export class Timeline {
  constructor(container, { onZoom } = {}) {
    this.container = container;
    this.onZoom = onZoom || (() => {});
    this.canvas = document.createElement("canvas");
    this.canvas.className = "timeline-canvas";
    this.canvas.setAttribute("role", "img");
    this.canvas.setAttribute("aria-label", "Device timeline: busy time and idle gaps by cause");
    this.tip = document.createElement("div");
    this.tip.className = "tooltip";
    this.tip.hidden = true;
    container.append(this.canvas, this.tip);
    this.gaps = []; this.steps = []; this.bounds = { start: 0, end: 1 }; this.view = this.bounds;
    this.active = { start: 0, end: 1 };
    this._bind();
  }

  setData({ gaps, steps, bounds, active, view }) {
    this.gaps = gaps || []; this.steps = steps || [];
    this.bounds = bounds; this.active = active || bounds;
    this.view = view ? clampView(view, bounds) : { ...bounds };
    this.draw();
  }

  _x(t, w) { return ((t - this.view.start) / Math.max(1, this.view.end - this.view.start)) * w; }
  _t(x, w) { return this.view.start + (x / w) * (this.view.end - this.view.start); }

  draw() {
    const c = this.canvas;
    const w = Math.max(300, this.container.clientWidth || 800), h = 90;
    const dpr = window.devicePixelRatio || 1;
    c.width = w * dpr; c.height = h * dpr; c.style.width = w + "px"; c.style.height = h + "px";
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const fg = getComputedStyle(this.container).color || "#333";
    const bandY = 22, bandH = 40;
    // Busy band over the device's active window, then gaps painted over it.
    const a0 = Math.max(0, this._x(this.active.start, w)), a1 = Math.min(w, this._x(this.active.end, w));
    ctx.fillStyle = causeColor("busy");
    if (a1 > a0) ctx.fillRect(a0, bandY, a1 - a0, bandH);
    for (const g of this.gaps) {
      const x0 = this._x(g.start_ns, w), x1 = this._x(g.end_ns, w);
      if (x1 < 0 || x0 > w) continue;
      ctx.fillStyle = causeColor(g.cause);
      ctx.fillRect(Math.max(0, x0), bandY, Math.max(1, Math.min(w, x1) - Math.max(0, x0)), bandH);
    }
    // Step boundaries.
    ctx.strokeStyle = fg; ctx.fillStyle = fg; ctx.globalAlpha = 0.7; ctx.font = "11px sans-serif";
    let lastLabel = -1e9;
    for (const s of this.steps) {
      const x = this._x(s.start_ns, w);
      if (x < -1 || x > w + 1) continue;
      ctx.beginPath(); ctx.moveTo(x + 0.5, 14); ctx.lineTo(x + 0.5, bandY + bandH + 4); ctx.stroke();
      if (x - lastLabel > 48) { ctx.fillText(`step ${s.id}`, x + 3, 12); lastLabel = x; }
    }
    ctx.globalAlpha = 1;
    ctx.fillText(formatNs(this.view.start), 2, h - 6);
    const endTxt = formatNs(this.view.end);
    ctx.fillText(endTxt, w - ctx.measureText(endTxt).width - 2, h - 6);
    const spanTxt = `window ${formatNs(this.view.end - this.view.start)}`;
    ctx.fillText(spanTxt, (w - ctx.measureText(spanTxt).width) / 2, h - 6);
  }

  _bind() {
    const c = this.canvas;
    let drag = null;
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = c.getBoundingClientRect();
      const t = this._t(e.clientX - r.left, r.width);
      this.view = zoomView(this.view, t, e.deltaY > 0 ? 1.25 : 0.8, this.bounds);
      this.draw(); this.onZoom(this.view);
    }, { passive: false });
    c.addEventListener("mousedown", (e) => { drag = { x: e.clientX, view: { ...this.view } }; });
    window.addEventListener("mouseup", () => {
      if (drag && drag.moved) this.onZoom(this.view);
      drag = null;
    });
    c.addEventListener("mousemove", (e) => {
      const r = c.getBoundingClientRect();
      if (drag) {
        const dx = e.clientX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        const dt = -(dx / r.width) * (drag.view.end - drag.view.start);
        this.view = panView(drag.view, dt, this.bounds);
        this.draw();
        return;
      }
      const t = this._t(e.clientX - r.left, r.width);
      const g = this.gaps.find((x) => x.start_ns <= t && t <= x.end_ns);
      if (!g) { this.tip.hidden = true; return; }
      this.tip.hidden = false;
      this.tip.textContent = `${causeLabel(g.cause)} · ${formatNs(g.duration_ns)} · step ${g.step}`;
      this.tip.style.left = `${e.clientX - r.left + 12}px`;
      this.tip.style.top = `${e.clientY - r.top + 12}px`;
    });
    c.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    c.addEventListener("dblclick", () => { this.view = { ...this.bounds }; this.draw(); this.onZoom(null); });
  }
}
