// The gap panel: a selected gap's detail (its shares, fix, hand-offs to the trace viewer,
// host ops, syncs and neighbouring device ops).
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { routeUrl, TB_ROOT } from "./api.js";
import { h, put } from "./dom.js";
import { causeColor, causeLabel, cut, formatNs, fullTitle, squeeze, stepPlace } from "./format.js";
import { writeState, urlWindow } from "./state.js";
import { barHoldsStep } from "./steps_chart.js";
import { poolOf } from "./timeline.js";

/** Causes where the device had the work and waited (not the host's doing). */
const DEVICE_SIDE = ["device_wait", "collective_wait"];
/** What the host did during a share of a gap, for the panel's "In short". */
const HOST_DID = {
  untraced: "shows no op (idle or not profiled)", data_loading: "was loading input",
  host_compute: "was computing between launches", launch_overhead: "was launching work",
  compilation: "was compiling", h2d_transfer: "was copying data to the device",
  allocator: "was in the memory allocator", graph_capture: "was capturing a CUDA graph",
  runtime_call: "was in a runtime call", startup: "was still starting up",
};

export const GapPanel = {
  async selectGap(id, { keepZoom } = {}) {
    // a gap of another device (a finding's evidence, a pasted URL): that device's list
    const dev = String(id).split("-")[0];
    if (this.diag && dev !== String(this.state.device) && (this.diag.devices || []).some((x) => String(x.id) === dev)) {
      this.state.device = dev; this.state.gap = id; this.state.zoom = "";
      return this.loadDiagnosis();
    }
    this.state.gap = id;
    writeState(this.state);
    for (const b of this.listEl.querySelectorAll(".gap-row")) {
      b.classList.toggle("selected", b.dataset.gap === id);
      if (b.dataset.gap === id) {  // bring it into the list's own view, without scrolling the page
        const l = this.listEl, top = b.offsetTop - l.offsetTop;
        if (top < l.scrollTop || top + b.offsetHeight > l.scrollTop + l.clientHeight) l.scrollTop = Math.max(0, top - 8);
      }
    }
    if (this.timeline) { this.timeline.selectedGap = id; this.timeline.draw(); }
    const listed = this.gaps.find((x) => x.id === id);
    if (listed) { this.markGapStep(listed.step); this.bringGapIntoView(listed, keepZoom); }
    this.detailEl.textContent = "";
    this.detailEl.append(h("p", { class: "pd-loading" }, "Loading gap…"));
    const token = this.token;
    const r = await this.fetchJSON("gap", this.params({ id }));
    if (token !== this.token || this.state.gap !== id) return;
    this.detailEl.textContent = "";
    if (!r.ok) {
      this.detailEl.append(h("p", { class: "pd-error", role: "alert" }, r.body.error || `HTTP ${r.status}`));
      return;
    }
    this.markGapStep(r.body.step);
    this.renderDetail(r.body);
    if (!listed) this.bringGapIntoView(r.body, keepZoom);
  },

  /** The step of the selected gap, marked in the step chart (the step filter stays as it is). */
  markGapStep(step) {
    for (const b of this.stepsEl.querySelectorAll(".step-bar")) {
      b.classList.toggle("gap-marked", barHoldsStep(b, step));
    }
  },

  /** "3.29 ms idle in step 44 on GPU 0": a gap as a person names it (its id stays in the URL). */
  gapTitle(g) {
    const dev = (this.diag && this.diag.devices || []).find((x) => String(x.id) === String(g.device));
    const where = stepPlace(g);
    return `${formatNs(g.duration_ns)} idle ${where}${dev ? ` on ${dev.name}` : ""}`;
  },

  /** The overlay around gap `g` (diagnosis tracks over the real events of its window). */
  overlayUrl(g) {
    return routeUrl("overlay", this.params({ gap: g.id }));
  },

  /** The Profile plugin's trace viewer on our overlay of gap `g`, opened at the gap. */
  traceViewerUrl(g) {
    const overlay = this.overlayUrl(g);
    const v = (g.viewer || {}).view_ms || [(g.start_ns - 10000) / 1e6, (g.end_ns + 10000) / 1e6];
    const u = new URL("data/plugin/profile/trace_viewer_index.html", TB_ROOT);
    u.search = `is_streaming=false&is_oss=true&trace_data_url=${encodeURIComponent(overlay.pathname + overlay.search)}` +
      `&view_start=${v[0].toFixed(6)}&view_end=${v[1].toFixed(6)}`;
    return u.href;
  },

  /** The Profile plugin's own (streaming) trace viewer of this XSpace session, at gap `g`. */
  profileViewerUrl(g) {
    const data = new URL("data/plugin/profile/data", TB_ROOT);
    data.search = `run=${encodeURIComponent(this.state.run)}&tag=${encodeURIComponent("trace_viewer@")}&host=${encodeURIComponent(this.state.host)}`;
    const v = g.viewer.profile_view_ms;
    const u = new URL("data/plugin/profile/trace_viewer_index.html", TB_ROOT);
    u.search = `is_streaming=true&is_oss=true&trace_data_url=${encodeURIComponent(data.pathname + data.search)}` +
      `&view_start=${v[0].toFixed(6)}&view_end=${v[1].toFixed(6)}`;
    return u.href;
  },

  profileTabUrl() {
    const u = new URL(TB_ROOT.href);
    u.search = `run=${encodeURIComponent(this.state.run)}&tag=trace_viewer@&host=${encodeURIComponent(this.state.host)}`;
    u.hash = "profile";
    return u.href;
  },

  /** Whether the Profile plugin is loaded and shows this run itself (an XSpace session it
   *  lists under the same name); asked once per run list. It never lists PyTorch runs and
   *  would fall back to another run, so those get no Profile-tab hand-off. */
  async profileShowsRun() {
    const run = this.runs.find((x) => x.run === this.state.run);
    if (!this.profilePlugin || !run || run.layout !== "profile") return false;
    if (this.profileRuns === null) {
      this.profileRuns = (async () => {
        try {
          const res = await fetch(new URL("data/plugin/profile/runs", TB_ROOT));
          const body = res.ok ? await res.json() : [];
          return new Set(Array.isArray(body) ? body.map(String) : []);
        } catch (e) { return new Set(); }
      })();
    }
    return (await this.profileRuns).has(this.state.run);
  },

  /** The hand-offs of a gap: the trace viewer on the overlay (or a download of it when the
   *  Profile plugin is not installed), and for an XSpace session the Profile plugin's own. */
  renderActions(g) {
    const el = h("div", { class: "pd-actions", id: "pd-actions" });
    if (this.profilePlugin) {
      el.append(h("a", { class: "pd-button", id: "pd-open-trace", href: this.traceViewerUrl(g), target: "_blank", rel: "noopener",
        title: "The trace viewer on this gap: the real events around it with the diagnosis overlaid (gaps by cause, steps, syncs, the waited-for launch → device op arrow)" },
      "Open in trace viewer"));
    }
    el.append(h("a", { class: this.profilePlugin ? "pd-link" : "pd-button", id: "pd-download-trace", href: this.overlayUrl(g).href,
      download: `perfdiag-gap-${g.id}.json`, title: "Chrome trace JSON of the same window: opens in Perfetto (ui.perfetto.dev) and chrome://tracing" },
    this.profilePlugin ? "Download (Perfetto)" : "Download trace around the gap (Perfetto, chrome://tracing)"));
    const slot = h("span", { class: "pd-profile-slot" });
    el.append(slot);
    const token = this.token, id = g.id;
    this.profileShowsRun().then((ok) => {
      if (token !== this.token || this.state.gap !== id) return;
      ok = ok && !!(g.viewer && g.viewer.profile_view_ms);
      el.dataset.profile = ok ? "shown" : "none";     // settled: tests and screen readers
      if (!ok) return;
      slot.append(
        h("a", { class: "pd-button", id: "pd-open-profile-viewer", href: this.profileViewerUrl(g), target: "_blank", rel: "noopener",
          title: "The Profile plugin's own trace viewer of this session, at the gap's time range (no overlay)" }, "Open session at the gap"),
        h("button", { class: "pd-button", id: "pd-open-profile", title: "The Profile tab on this run and host", onclick: () => {
          urlWindow().location.href = this.profileTabUrl();
        } }, "Open in Profile tab"));
    });
    return el;
  },

  /** The gap split into what would close it: one stacked bar, one line per share (its one
   *  figure, what the evidence says of it), and "In short" from the same shares. */
  renderShares(g) {
    const shares = Object.entries(g.shares_ns || {}).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
    if (!shares.length) return null;
    const total = Math.max(1, shares.reduce((s, [, v]) => s + v, 0));
    const tl = g.tracelens || {};
    const axes = { sync_drain: "a sync drained the device's queue", starved: "the host did not give the device work in time",
      device_side: "the device had the work and waited on itself" };
    const chain = (e, n = 2) => squeeze(e.chain && e.chain.length ? e.chain.slice(-n).join(" › ") : e.name, 80, 300);
    const note = (c) => {
      if (c === "host_sync" && g.blocking) return ` · exposed by ${chain(g.blocking, 3)} on ${squeeze(g.blocking.thread, 80, 120)}`;
      if (DEVICE_SIDE.includes(c) && g.next_op) {
        const cap = g.next_op.captured;
        return ` · ${c === "collective_wait" ? "waiting for peers at" : "before"} ${squeeze(g.next_op.label || g.next_op.name, 80, 200)}` +
          (cap && cap.op && cap.op !== g.next_op.name ? ` (captured under ${squeeze(cap.op, 80, 200)})` : "") +
          (g.waited_for ? `, issued by ${chain(g.waited_for)}` : "");
      }
      if (c === g.cause && g.culprit) return ` · ${chain(g.culprit, 3)}`;
      return "";
    };
    // what the host did: the largest share the host side explains, in the list's own figure
    const hostShare = shares.find(([c]) => !DEVICE_SIDE.includes(c));
    const did = (c) => {
      if (c === "host_sync") return g.blocking ? `was blocked in ${chain(g.blocking)}` : "was blocked waiting for the device";
      const base = HOST_DID[c] || `was busy with ${causeLabel(c).toLowerCase()}`;
      return c === g.cause && g.culprit && c !== "untraced" ? `${base} (${chain(g.culprit)})` : base;
    };
    const short = [tl.idle_type ? axes[tl.idle_type] || tl.idle_type : null,
      hostShare ? `the host ${did(hostShare[0])} for ${formatNs(hostShare[1])} of it` : null].filter(Boolean).join("; ");
    return h("div", { class: "pd-shares", id: "pd-shares" },
      h("div", { class: "pd-shares-bar" }, shares.map(([c, v]) => h("span", {
        class: "pd-share", title: `${causeLabel(c)}: ${formatNs(v)}`,
        style: { width: `${100 * v / total}%`, background: causeColor(c) } }))),
      h("ul", { class: "pd-shares-list" }, shares.map(([c, v]) => h("li", { "data-cause": c },
        h("span", { class: "chip", style: { background: causeColor(c) } }),
        `${formatNs(v)} ${causeLabel(c).toLowerCase()}`,
        note(c) ? h("span", { class: "pd-muted pd-small" }, note(c)) : null))),
      short ? h("div", { class: "pd-small pd-muted" },
        h("span", { id: "pd-idle-kind" }, `In short: ${short}. `),
        h("abbr", { class: "pd-help", title: "How the device queue ran dry (a sync drained it, the host starved it, or the device waited on itself; TraceLens' first axis) and what the host did meanwhile, from the shares listed above" }, "?"),
        g.followed_thread ? ` Idle time of the issuing thread followed to ${squeeze(g.followed_thread, 80, 120)}.` : "") : null);
  },

  /** The fix for gap `g`: its finding's (the one citing it, or about its cause), with a
   *  link to that finding. */
  renderGapFix(g) {
    const f = g.fix;
    if (!f || !f.text) return null;
    const li = () => f.finding !== null && f.finding !== undefined ?
      this.summaryEl.querySelector(`.pd-finding[data-finding="${f.finding}"]`) : null;
    return h("div", { class: "pd-fix", id: "pd-gap-fix" }, h("b", {}, "Fix: "), squeeze(f.text), " ",
      h("span", { class: "pd-muted pd-small" }, f.via === "gap" ? "(its finding: " : "(the finding about its cause: ",
        li() ? h("a", { href: "#", class: "pd-link pd-inline-link", id: "pd-gap-finding", title: fullTitle(f.title, 0), onclick: (e) => {
          e.preventDefault();
          const el = li();
          if (el) { el.scrollIntoView({ block: "center" }); el.classList.add("pd-flash"); setTimeout(() => el.classList.remove("pd-flash"), 1500); }
        } }, squeeze(f.title, 60, 120)) : squeeze(f.title, 60, 120), ")"));
  },

  /** Host ops during a gap, by thread: the issuing thread and the one its idle time was
   *  followed to open first, then the busiest; the rest folded by thread pool. */
  renderHostOps(g, byThread, maxSelf) {
    const OPEN_THREADS = 3, OPS_SHOWN = 6;
    const top = (ops) => Math.max(0, ...ops.map((o) => o.self_ns || 0));
    const order = [...byThread.keys()].sort((a, b) =>
      (b === g.analysed_thread) - (a === g.analysed_thread) || (b === g.followed_thread) - (a === g.followed_thread) ||
      top(byThread.get(b)) - top(byThread.get(a)));
    const opRow = (o) => h("div", { class: "pd-hostop", title: cut(o.chain.join(" › "), 2000) },
      h("div", { class: "pd-hostop-bar", style: { width: `${Math.max(1, 100 * (o.self_ns || 0) / maxSelf)}%` } }),
      h("div", { class: "pd-hostop-text" }, h("b", {}, squeeze(o.name, 80, 200)), ` self ${formatNs(o.self_ns)} of ${formatNs(o.duration_ns)}`,
        o.kind ? h("span", { class: "pd-badge" }, o.kind) : null),
      h("div", { class: "pd-small pd-muted pd-hostop-chain" }, squeeze(o.chain.join(" › "), 80, 600)));
    const thread = (name) => {
      const ops = byThread.get(name);
      return h("div", { class: "pd-thread", "data-thread": cut(name, 200) },
        h("div", { class: "pd-thread-name", title: fullTitle(name, 120) }, squeeze(name, 80, 120)),
        ops.slice(0, OPS_SHOWN).map(opRow),
        ops.length > OPS_SHOWN ? h("details", { class: "pd-more-ops" },
          h("summary", { class: "pd-small pd-muted" }, `${ops.length - OPS_SHOWN} more op(s)`),
          ops.slice(OPS_SHOWN).map(opRow)) : null);
    };
    const pools = new Map();
    for (const name of order.slice(OPEN_THREADS)) {
      const k = poolOf(name);
      if (!pools.has(k)) pools.set(k, []);
      pools.get(k).push(name);
    }
    return h("div", { class: "pd-hostops" }, order.slice(0, OPEN_THREADS).map(thread),
      [...pools.entries()].map(([pool, names]) => h("details", { class: "pd-pool", "data-pool": cut(pool, 200) },
        h("summary", { class: "pd-thread-name", title: fullTitle(pool, 100) },
          `${squeeze(pool, 80, 100)} · ${names.length} thread${names.length > 1 ? "s" : ""} `,
          h("span", { class: "pd-muted pd-small" }, `(up to ${formatNs(Math.max(...names.map((n) => top(byThread.get(n)))))} self time)`)),
        names.map(thread))));
  },

  /** Where a replayed device op was launched while its CUDA/HIP graph was captured: the
   *  capture's op, its annotations and call chain (the replay's own chain is "Waited for"). */
  renderCaptured(c) {
    const full = (c.chain || []).join(" › ");
    return h("div", { class: "pd-captured pd-small pd-muted", title: fullTitle(full, 600) },
      "replayed from a graph; captured under ", h("b", {}, squeeze(c.op || "its launch", 80, 200)),
      (c.annotations || []).length ? ` · ${squeeze(c.annotations.join(" › "), 80, 300)}` : "",
      h("div", { class: "pd-chain" }, squeeze(full, 80, 600)));
  },

  renderDetail(g) {
    const el = this.detailEl;
    const op = (label, o) => o ? h("div", { class: "pd-neighbour-op" }, h("b", {}, label + ": "),
      h("span", { class: "pd-op-name", title: fullTitle(o.name, 0) }, squeeze(o.label || o.name, 80, 200)), ` (${formatNs(o.duration_ns)})`,
      o.annotation ? h("span", { class: "pd-muted" }, ` · ${squeeze(o.annotation, 80, 200)}`) : null,
      o.captured ? this.renderCaptured(o.captured) : null) : h("div", {}, h("b", {}, label + ": "), "none");
    const byThread = new Map();
    for (const o of g.host_ops || []) {
      if (!byThread.has(o.thread)) byThread.set(o.thread, []);
      byThread.get(o.thread).push(o);
    }
    const maxSelf = Math.max(1, ...(g.host_ops || []).map((o) => o.self_ns || 0));
    put(el,
      h("h2", { id: "pd-detail-title", title: `gap ${g.id}` }, this.gapTitle(g)),
      h("div", { class: "pd-detail-head" },
        h("span", { class: "chip", style: { background: causeColor(g.cause) } }),
        h("b", { class: "pd-detail-cause" }, g.cause_label || causeLabel(g.cause)),
        g.shares_ns && Object.keys(g.shares_ns).length > 1 ? " · the largest of its causes" : ""),
      // the shares say what the evidence says, one figure each; the sentence only without them
      this.renderShares(g) || h("p", { class: "pd-evidence" }, squeeze(g.evidence, 80, 1500)),
      this.renderGapFix(g),
      this.renderActions(g),
      h("h3", {}, "Waited for"),
      g.waited_for ? h("div", { class: "pd-chain", title: fullTitle(g.waited_for.chain.join(" › "), 600) }, squeeze(g.waited_for.chain.join(" › "), 80, 600),
        h("div", { class: "pd-muted pd-small" }, `on ${squeeze(g.waited_for.thread, 80, 120)} · ${formatNs(g.waited_for.duration_ns)} · found via ${g.waited_for.found_via}`))
        : h("p", { class: "pd-muted" }, "Nothing identified."),
      h("h3", {}, "Host ops during the gap", g.analysed_thread ? h("span", { class: "pd-muted pd-small", title: fullTitle(g.analysed_thread, 120) },
        ` (cause from the issuing thread, ${squeeze(g.analysed_thread, 80, 120)})`) : null),
      byThread.size ? this.renderHostOps(g, byThread, maxSelf) :
        h("p", { class: "pd-muted" }, "No host ops recorded."),
      h("h3", {}, "Syncs"),
      (g.syncs || []).length ? h("ul", { class: "pd-syncs" }, g.syncs.map((x) => h("li", {}, `${squeeze(x.name, 80, 200)} on ${squeeze(x.thread, 80, 120)}` +
        (x.duration_ns !== undefined ? ` (${formatNs(x.duration_ns)})` : "")))) : h("p", { class: "pd-muted" }, "None."),
      h("h3", {}, "Neighbouring device ops"),
      op("Previous", g.prev_op), op("Next", g.next_op));
  },
};
