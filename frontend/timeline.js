// Canvas timeline of every track, fed by `/timeline` for the visible window.
// Device lanes show busy time (events or per-pixel bins) with the diagnosis' gaps drawn on
// top, coloured by cause; host lanes show their ops stacked by depth; annotation lanes show
// which user annotation the device was running. Wheel / +,- zoom, drag / arrows pan,
// 0 or double-click resets, hover shows a tooltip, clicking a gap selects it.
import { causeColor, causeLabel, cut, formatNs, laneText } from "./format.js";

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

const GUTTER = 190, AXIS = 22, ROW = 14, DEV_ROW = 18, GAP_ROW = 16, BIN_ROW = 16, PAD = 3;
const MAX_DEPTH_ROWS = 5;

/** Stable pastel colour for an op/annotation name. */
export function nameColor(name, kind) {
  let hsh = 0;
  for (let i = 0; i < name.length; i++) hsh = (hsh * 31 + name.charCodeAt(i)) | 0;
  const hue = Math.abs(hsh) % 360;
  if (kind === "device") return `hsl(${110 + (Math.abs(hsh) % 40)}, 45%, ${38 + (Math.abs(hsh >> 8) % 12)}%)`;
  if (kind === "annotation") return `hsl(${hue}, 55%, 62%)`;
  return `hsl(${200 + (hue % 80)}, 40%, ${58 + (Math.abs(hsh >> 4) % 14)}%)`;
}

/**
 * Lane layout: one gap strip per device, then the device's lanes, host lanes, annotation
 * lanes (annotations placed right after their device's lanes). Pure: returns rows with y/h.
 */
/** The thread pool a host lane belongs to: its label without thread ids and numbers. */
export function poolOf(label) {
  return String(label || "").replace(/[\s/_#:-]*\d+/g, "").replace(/\s+/g, " ").trim() || String(label);
}

export function layoutLanes(data, devices, gapsByDevice, expanded) {
  const rows = [];
  let y = AXIS;
  const lanes = (data && data.lanes) || [];
  const devIds = [...new Set([...(devices || []).map((d) => d.id), ...lanes.filter((l) => l.kind !== "host").map((l) => l.device)])];
  const push = (row) => { row.y = y; y += row.h + PAD; rows.push(row); };
  for (const d of devIds) {
    const dev = (devices || []).find((x) => String(x.id) === String(d));
    push({ kind: "gaps", device: d, label: `${dev ? dev.name : "device " + d} · idle gaps`, h: GAP_ROW,
      gaps: (gapsByDevice && gapsByDevice[String(d)]) || [] });
    for (const l of lanes.filter((x) => x.kind === "device" && x.device === d)) {
      push({ kind: "device", lane: l, device: d, label: l.label, h: l.bins ? BIN_ROW : DEV_ROW });
    }
    for (const l of lanes.filter((x) => x.kind === "annotation" && x.device === d)) {
      push({ kind: "annotation", lane: l, device: d, label: l.label, h: DEV_ROW });
    }
  }
  const hostLane = (l) => {
    const depth = l.events ? Math.min(MAX_DEPTH_ROWS, 1 + Math.max(0, ...l.events.map((e) => e[3]))) : 1;
    push({ kind: "host", lane: l, label: l.label, h: l.bins ? BIN_ROW : depth * ROW, depthRows: depth });
  };
  // threads of one pool (3 or more) fold into one row, opened by a click on it
  const pools = new Map();
  for (const l of lanes.filter((x) => x.kind === "host")) {
    const k = poolOf(l.label);
    if (!pools.has(k)) pools.set(k, []);
    pools.get(k).push(l);
  }
  for (const [key, members] of pools) {
    if (members.length < 3) { members.forEach(hostLane); continue; }
    const open = !!(expanded && expanded.has(key));
    const events = [];
    for (const l of members) for (const e of (l.events || [])) if (e[3] === 0) events.push(e);
    push({ kind: "hostgroup", key, label: `${open ? "▾" : "▸"} ${key} · ${members.length} threads`,
      lane: { events, label: key }, h: ROW + 2 });
    if (open) members.forEach(hostLane);
  }
  return { rows, height: y + 18 };
}

export class Timeline {
  constructor(container, { onZoom, onSelectGap, fetchLanes, devices } = {}) {
    this.container = container;
    this.expanded = new Set();        // thread pools shown thread by thread
    this.onZoom = onZoom || (() => {});
    this.onSelectGap = onSelectGap || (() => {});
    this.fetchLanes = fetchLanes || null;
    this.devices = devices || [];
    this.canvas = document.createElement("canvas");
    this.canvas.className = "timeline-canvas";
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute("role", "application");
    this.canvas.setAttribute("aria-roledescription", "timeline");
    this.canvas.setAttribute("aria-label",
      "Timeline of device, host and annotation lanes. Plus and minus zoom, left and right arrows pan, 0 resets, Enter selects the gap under the centre.");
    this.tip = document.createElement("div");
    this.tip.className = "tooltip";
    this.tip.hidden = true;
    this.note = document.createElement("div");
    this.note.className = "pd-muted pd-small timeline-note";
    container.append(this.canvas, this.tip, this.note);
    this.gaps = []; this.steps = []; this.bounds = { start: 0, end: 1 }; this.view = this.bounds;
    this.data = null; this.rows = []; this.fetches = 0; this.selectedGap = "";
    this._timer = null; this._req = 0;
    this._bind();
    this._theme = new MutationObserver(() => this.draw());
    this._theme.observe(document.body, { attributes: true, attributeFilter: ["class"] });
  }

  destroy() {
    this._theme.disconnect(); clearTimeout(this._timer); this._req++;
    window.removeEventListener("mouseup", this._onUp);
  }

  setData({ gaps, steps, bounds, view, devices, selectedGap }) {
    this.gaps = gaps || []; this.steps = steps || [];
    if (devices) this.devices = devices;
    this.selectedGap = selectedGap || "";
    this.bounds = bounds;
    this.view = view ? clampView(view, bounds) : { ...bounds };
    this.gapsByDevice = {};
    for (const g of this.gaps) (this.gapsByDevice[String(g.device)] ||= []).push(g);
    this.draw();
    this._refetch(0);
  }

  /** Everything a test (or a screen reader summary) needs about what is drawn. */
  model() {
    return {
      view: { ...this.view }, bounds: { ...this.bounds }, fetches: this.fetches,
      fetched: this.data ? { start: this.data.start_ns, end: this.data.end_ns } : null,
      gutter: GUTTER, plotWidth: this._plotW(),
      // what the last draw put on screen: the step markers, the selected gap's box (px)
      markers: [...(this.drawnMarkers || [])], selected: this.drawnSelected ? { ...this.drawnSelected } : null,
      lanes: this.rows.map((r) => ({ kind: r.kind, label: r.label, device: r.device ?? null, y: r.y, h: r.h,
        mode: r.lane ? (r.lane.bins ? "bins" : "events") : "gaps",
        n: r.lane ? (r.lane.events ? r.lane.events.length : r.lane.bins.share.length) : r.gaps.length })),
    };
  }

  _refetch(delay) {
    if (!this.fetchLanes) return;
    clearTimeout(this._timer);
    this._timer = setTimeout(async () => {
      const req = ++this._req;
      const v = { ...this.view };
      const width = Math.max(16, Math.round(this._plotW()));
      let r;
      try { r = await this.fetchLanes(v.start, v.end, width); } catch (e) { r = null; }
      if (req !== this._req || (r && r.aborted)) return;   // a newer view or selection asked
      if (!r || !r.ok) {
        this.note.textContent = `Could not load the lanes: ${(r && r.body && r.body.error) || "network error"}`;
        return;
      }
      this.fetches++;
      this.note.textContent = "";
      this.data = r.body;
      this.draw();
    }, delay);
  }

  _plotW() { return Math.max(200, (this.container.clientWidth || 900) - GUTTER); }
  _x(t, w) { return GUTTER + ((t - this.view.start) / Math.max(1, this.view.end - this.view.start)) * w; }
  _t(x, w) { return this.view.start + ((x - GUTTER) / w) * (this.view.end - this.view.start); }

  draw() {
    const c = this.canvas;
    const layout = layoutLanes(this.data, this.devices, this.gapsByDevice, this.expanded);
    this.drawnSelected = null;
    this.rows = layout.rows;
    const W = Math.max(400, this.container.clientWidth || 900), H = layout.height, w = W - GUTTER;
    const dpr = window.devicePixelRatio || 1;
    c.width = W * dpr; c.height = H * dpr; c.style.width = W + "px"; c.style.height = H + "px";
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const cs = getComputedStyle(this.container);
    const fg = cs.color || "#333";
    const muted = cs.getPropertyValue("--pd-muted").trim() || "#777";
    const laneBg = cs.getPropertyValue("--pd-border").trim() || "#ddd";
    ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
    const names = (this.data && this.data.names) || [];
    const dStart = this.data ? this.data.start_ns : 0, dEnd = this.data ? this.data.end_ns : 1;
    for (const row of this.rows) {
      // lane background + label
      ctx.globalAlpha = 0.35; ctx.fillStyle = laneBg; ctx.fillRect(GUTTER, row.y, w, row.h); ctx.globalAlpha = 1;
      ctx.save();
      ctx.beginPath(); ctx.rect(GUTTER, row.y, w, row.h); ctx.clip();
      if (row.kind === "gaps") this._drawGaps(ctx, row, w, true);
      else if (row.lane.bins) this._drawBins(ctx, row, w, names, dStart, dEnd);
      else this._drawEvents(ctx, row, w, names);
      if (row.kind === "device") this._drawGaps(ctx, row, w, false);
      ctx.restore();
      ctx.fillStyle = row.kind === "host" || row.kind === "hostgroup" ? muted : fg;
      ctx.save(); ctx.beginPath(); ctx.rect(0, row.y, GUTTER - 6, row.h); ctx.clip();
      ctx.fillText(cut(row.kind === "hostgroup" ? row.label : laneText(row.label), 80), 4, row.y + Math.min(row.h, DEV_ROW) / 2);
      ctx.restore();
    }
    // Step boundaries + axis.
    ctx.strokeStyle = fg; ctx.fillStyle = fg; ctx.globalAlpha = 0.6;
    let lastLabel = -1e9;
    this.drawnMarkers = [];
    for (const s of this.steps) {
      const x = this._x(s.start_ns, w);
      if (x < GUTTER - 1 || x > W + 1) continue;
      this.drawnMarkers.push(s.id);
      ctx.beginPath(); ctx.moveTo(x + 0.5, 12); ctx.lineTo(x + 0.5, H - 16); ctx.stroke();
      if (x - lastLabel > 48) { ctx.fillText(`step ${s.id}`, x + 3, 9); lastLabel = x; }
    }
    ctx.globalAlpha = 1;
    ctx.fillText(formatNs(this.view.start), GUTTER + 2, H - 8);
    const endTxt = formatNs(this.view.end);
    ctx.fillText(endTxt, W - ctx.measureText(endTxt).width - 2, H - 8);
    const spanTxt = `window ${formatNs(this.view.end - this.view.start)}`;
    ctx.fillText(spanTxt, GUTTER + (w - ctx.measureText(spanTxt).width) / 2, H - 8);
    this.container.dataset.lanes = JSON.stringify(this.model().lanes.map((l) => `${l.kind}:${l.label}`));
    this.container.dataset.view = `${this.view.start}_${this.view.end}`;
    this.container.dataset.fetches = String(this.fetches);
  }

  _drawGaps(ctx, row, w, strip) {
    const gaps = (this.gapsByDevice && this.gapsByDevice[String(row.device)]) || [];
    if (strip) {
      const dev = this.devices.find((d) => String(d.id) === String(row.device));
      if (dev) {
        const a0 = Math.max(GUTTER, this._x(dev.start_ns, w)), a1 = Math.min(GUTTER + w, this._x(dev.end_ns, w));
        ctx.fillStyle = causeColor("busy"); ctx.globalAlpha = 0.5;
        if (a1 > a0) ctx.fillRect(a0, row.y + 4, a1 - a0, row.h - 8);
        ctx.globalAlpha = 1;
      }
    }
    for (const g of gaps) {
      const x0 = this._x(g.start_ns, w), x1 = this._x(g.end_ns, w);
      if (x1 < GUTTER || x0 > GUTTER + w) continue;
      ctx.fillStyle = causeColor(g.cause);
      ctx.globalAlpha = strip ? 1 : 0.55;
      ctx.fillRect(x0, row.y, Math.max(1, x1 - x0), row.h);
      if (strip && g.id === this.selectedGap) {
        this.drawnSelected = { id: g.id, x0: Math.max(GUTTER, x0), x1: Math.min(GUTTER + w, x1), y: row.y, h: row.h };
        ctx.globalAlpha = 1; ctx.strokeStyle = getComputedStyle(this.container).getPropertyValue("--pd-accent").trim() || "#f57c00";
        ctx.lineWidth = 2; ctx.strokeRect(Math.max(GUTTER, x0) + 1, row.y + 1, Math.max(1, Math.min(GUTTER + w, x1) - Math.max(GUTTER, x0)) - 2, row.h - 2);
        ctx.lineWidth = 1;
      }
      if (strip && x1 - x0 > 70) {
        ctx.globalAlpha = 1; ctx.fillStyle = "#000";
        ctx.fillText(`${causeLabel(g.cause)} ${formatNs(g.duration_ns)}`, Math.max(GUTTER, x0) + 3, row.y + row.h / 2);
      }
    }
    ctx.globalAlpha = 1;
  }

  _drawEvents(ctx, row, w, names) {
    const rowH = row.kind === "host" ? ROW : row.h;
    let lastEnd = -1;
    for (const [s, d, ni, depth] of row.lane.events) {
      if (row.kind === "host" && depth >= MAX_DEPTH_ROWS) continue;
      let x0 = this._x(s, w), x1 = this._x(s + d, w);
      if (x1 < GUTTER || x0 > GUTTER + w) continue;
      const y = row.y + (row.kind === "host" ? depth * ROW : 0);
      const name = names[ni] || "";
      x0 = Math.max(GUTTER - 1, x0); x1 = Math.min(GUTTER + w + 1, x1);
      ctx.fillStyle = nameColor(name, row.kind);
      ctx.fillRect(x0, y + 1, Math.max(1, x1 - x0), rowH - 2);
      if (x1 - x0 > 30 && depth === 0 || x1 - x0 > 30 && row.kind === "host") {
        if (x0 >= lastEnd || row.kind === "host") {
          ctx.save(); ctx.beginPath(); ctx.rect(x0, y, x1 - x0 - 2, rowH); ctx.clip();
          ctx.fillStyle = "#111"; ctx.fillText(name, x0 + 2, y + rowH / 2);
          ctx.restore(); lastEnd = x1;
        }
      }
    }
  }

  _drawBins(ctx, row, w, names, dStart, dEnd) {
    const { share, name } = row.lane.bins;
    const n = share.length, binNs = (dEnd - dStart) / Math.max(1, n);
    for (let i = 0; i < n; i++) {
      if (!share[i]) continue;
      const x0 = this._x(dStart + i * binNs, w), x1 = this._x(dStart + (i + 1) * binNs, w);
      if (x1 < GUTTER || x0 > GUTTER + w) continue;
      const hh = Math.max(2, share[i] * (row.h - 2));
      ctx.fillStyle = nameColor(names[name[i]] || "", row.kind);
      ctx.fillRect(x0, row.y + row.h - 1 - hh, Math.max(1, x1 - x0), hh);
    }
  }

  /** What is under (x, y): {gap} | {event} | {bin} | null. */
  hit(x, y) {
    const w = this._plotW();
    if (x < GUTTER) return null;
    const t = this._t(x, w);
    const slack = (this.view.end - this.view.start) / w * 2;
    const row = this.rows.find((r) => y >= r.y && y < r.y + r.h);
    if (!row) return null;
    const names = (this.data && this.data.names) || [];
    if (row.kind === "gaps" || row.kind === "device") {
      const g = ((this.gapsByDevice || {})[String(row.device)] || []).find((x) => x.start_ns - slack <= t && t <= x.end_ns + slack);
      if (g && (row.kind === "gaps" || !this._eventAt(row, t, slack))) return { gap: g };
      if (row.kind === "gaps") return null;
    }
    if (row.lane.bins) {
      const n = row.lane.bins.share.length;
      const i = Math.floor((t - this.data.start_ns) / ((this.data.end_ns - this.data.start_ns) / n));
      if (i < 0 || i >= n || !row.lane.bins.share[i]) return null;
      return { bin: { name: names[row.lane.bins.name[i]] || "(mixed)", share: row.lane.bins.share[i], lane: row.label } };
    }
    const depth = row.kind === "host" ? Math.floor((y - row.y) / ROW) : null;
    const e = this._eventAt(row, t, slack, depth);
    return e ? { event: { name: names[e[2]] || "", dur: e[1], start: e[0], lane: row.label } } : null;
  }

  _eventAt(row, t, slack, depth) {
    if (!row.lane || !row.lane.events) return null;
    let best = null;
    for (const e of row.lane.events) {
      if (depth !== null && depth !== undefined && e[3] !== depth) continue;
      if (e[0] - slack <= t && t <= e[0] + e[1] + slack && (!best || e[1] < best[1])) best = e;
    }
    return best;
  }

  setView(v, { notify = true } = {}) {
    this.view = clampView(v, this.bounds);
    this.draw();
    if (notify) this.onZoom(this.view);
    this._refetch(180);
  }

  _bind() {
    const c = this.canvas;
    let drag = null;
    c.addEventListener("wheel", (e) => {
      const r = c.getBoundingClientRect();
      const x = e.clientX - r.left;
      if (x < GUTTER) return;
      e.preventDefault();
      const t = this._t(x, this._plotW());
      this.setView(zoomView(this.view, t, e.deltaY > 0 ? 1.25 : 0.8, this.bounds));
    }, { passive: false });
    c.addEventListener("keydown", (e) => {
      const v = this.view, span = v.end - v.start, mid = (v.start + v.end) / 2;
      let nv = null;
      if (e.key === "+" || e.key === "=") nv = zoomView(v, mid, 0.67, this.bounds);
      else if (e.key === "-" || e.key === "_") nv = zoomView(v, mid, 1.5, this.bounds);
      else if (e.key === "ArrowLeft") nv = panView(v, -span * 0.2, this.bounds);
      else if (e.key === "ArrowRight") nv = panView(v, span * 0.2, this.bounds);
      else if (e.key === "0" || e.key === "Home") { e.preventDefault(); this.view = { ...this.bounds }; this.draw(); this.onZoom(null); this._refetch(0); return; }
      else if (e.key === "Enter") {
        const inView = this.gaps.filter((x) => x.start_ns <= v.end && x.end_ns >= v.start);
        const g = inView.find((x) => x.start_ns <= mid && mid <= x.end_ns) ||
          inView.sort((x, y) => y.duration_ns - x.duration_ns)[0];
        if (g) { e.preventDefault(); this.onSelectGap(g.id); }
        return;
      }
      if (nv) { e.preventDefault(); this.setView(nv); }
    });
    c.addEventListener("mousedown", (e) => { drag = { x: e.clientX, view: { ...this.view } }; });
    this._onUp = (e) => {
      if (drag && drag.moved) this.setView(this.view);
      else if (drag && e.target === c) {
        const r = c.getBoundingClientRect();
        const x = e.clientX - r.left, y = e.clientY - r.top;
        const row = (this.rows || []).find((q) => y >= q.y && y < q.y + q.h);
        if (row && row.kind === "hostgroup") {
          if (this.expanded.has(row.key)) this.expanded.delete(row.key); else this.expanded.add(row.key);
          this.draw();
        } else {
          const hit = this.hit(x, y);
          if (hit && hit.gap) this.onSelectGap(hit.gap.id);
        }
      }
      drag = null;
    };
    window.addEventListener("mouseup", this._onUp);
    c.addEventListener("mousemove", (e) => {
      const r = c.getBoundingClientRect();
      if (drag) {
        const dx = e.clientX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        const dt = -(dx / this._plotW()) * (drag.view.end - drag.view.start);
        this.view = panView(drag.view, dt, this.bounds);
        this.draw();
        return;
      }
      const x = e.clientX - r.left, y = e.clientY - r.top;
      const hit = this.hit(x, y);
      if (!hit && x < GUTTER) {        // the lane's whole name (labels are cut to the gutter)
        const row = this.rows.find((q) => y >= q.y && y < q.y + q.h);
        c.style.cursor = row && row.kind === "hostgroup" ? "pointer" : "";
        if (row) {
          this.tip.hidden = false;
          this.tip.textContent = cut(row.kind === "hostgroup" ? `${row.label} (click to ${row.label.startsWith("▾") ? "fold" : "show each thread"})` : row.label, 300);
          this.tip.style.left = `${Math.min(x + 12, Math.max(0, r.width - 360))}px`;
          this.tip.style.top = `${y + 14}px`;
          return;
        }
      }
      if (!hit) { this.tip.hidden = true; c.style.cursor = ""; return; }
      let text;
      if (hit.gap) text = `${causeLabel(hit.gap.cause)} · ${formatNs(hit.gap.duration_ns)} · ${hit.gap.step === null || hit.gap.step === undefined ? (hit.gap.outside === "after_last_step" ? "after the last step" : "before the first step") : "step " + hit.gap.step} (click to select)`;
      else if (hit.bin) text = `${cut(hit.bin.name, 200)} · ${Math.round(hit.bin.share * 100)}% busy in this pixel · ${cut(hit.bin.lane, 100)}`;
      else text = `${cut(hit.event.name, 200)} · ${formatNs(hit.event.dur)} · ${cut(hit.event.lane, 100)}`;
      c.style.cursor = hit.gap ? "pointer" : "";
      this.tip.hidden = false;
      this.tip.textContent = text;
      const left = Math.min(e.clientX - r.left + 12, Math.max(0, r.width - 360));
      this.tip.style.left = `${left}px`;
      this.tip.style.top = `${e.clientY - r.top + 14}px`;
    });
    c.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    c.addEventListener("dblclick", () => { this.view = { ...this.bounds }; this.draw(); this.onZoom(null); this._refetch(0); });
  }
}
