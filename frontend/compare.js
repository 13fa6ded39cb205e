// "Compare hosts" and a pod's summary: the /hosts route summarises every host of the run
// (analysed as Dask tasks on the server's cluster, or read from the result store): per
// host the duty cycle, typical step, worst gap, top causes of idle time and whether it
// straggles next to the median host. The server sorts and pages (a pod can have
// thousands of hosts); the page shows one page of rows and every straggler by name.
// Click a row to open that host.
import { getJSON } from "./api.js";
import { h } from "./dom.js";
import { causeColor, causeLabel, cut, formatNs, formatPct, formatShare, formatWait, fullTitle, plural, squeeze } from "./format.js";
import { stepStats } from "./steps_chart.js";
import { hostPeerLoss } from "./headline.js";

/** One table row's numbers from a diagnosis body. */
export function hostSummary(d) {
  const { count, avg } = stepStats(d);
  const worst = (d.gaps || [])[0] || null;
  const f = [...(d.findings || [])].sort((a, b) => (b.time_lost_ns_per_step || 0) - (a.time_lost_ns_per_step || 0))[0] || null;
  return {
    devices: (d.devices || []).map((x) => ({ name: x.name, duty_cycle: x.duty_cycle })),
    avg_step_ns: avg, steps: count,
    worst_gap: worst ? { duration_ns: worst.duration_ns, cause: worst.cause, label: worst.cause_label || causeLabel(worst.cause) } : null,
    top_finding: f ? { title: f.title, per_step_ns: f.time_lost_ns_per_step } : null,
  };
}

/** Rows per page of the table. */
export const HOSTS_PAGE = 50;
/** Sort keys the server takes, each with its column label. */
export const SORTS = [["straggler", "Straggler"], ["host", "Host"], ["duty_cycle", "Duty cycle"], ["mfu", "MFU"],
  ["typical_step", "Typical step"], ["worst_gap", "Worst gap"], ["idle", "Idle / step"],
  ["peer_wait", "Peer wait / step"], ["last_arrivals", "Last arrivals"]];
/** Short cause names for the shares column (the full label is the tooltip). */
const SHORT = { host_sync: "Sync", compilation: "Compile", h2d_transfer: "H→D", data_loading: "Data",
  host_compute: "Host compute", launch_overhead: "Launch", collective_wait: "Collective", untraced: "Untraced",
  device_wait: "Device wait", allocator: "Allocator", graph_capture: "Graph capture", runtime_call: "Runtime",
  startup: "Start-up" };
/** Each column's first direction (the server's default): worst hosts first. */
const DEFAULT_DESC = { host: false, duty_cycle: false, mfu: false, typical_step: true, worst_gap: true, idle: true,
  peer_wait: true, last_arrivals: true };
/** At most this many devices get a duty-cycle column each (more: the mean alone). */
const MAX_DEVICE_COLUMNS = 4;
const POLL_MS = 700;

/** An MFU as the hosts table shows it: the one share rule of every face (formatShare). */
export function mfuPct(x) {
  return formatShare(x);
}

/** "Hosts 51–100 of 1000". */
export function pageLabel(offset, count, total) {
  return count ? `Hosts ${offset + 1}–${offset + count} of ${total}` : `No host of ${total} on this page`;
}

export class CompareHosts {
  constructor(slot, { params, onPick, spanLabel }) {
    this.slot = slot; this.params = params; this.onPick = onPick;
    this.spanLabel = spanLabel || ((host, span) => span);
    this.open = false; this.run = null; this.hosts = []; this.token = 0; this.current = "";
    this.sortBy = "straggler"; this.order = ""; this.offset = 0; this.data = null; this.error = null;
  }

  toggle(run, hosts, current) {
    if (this.open && this.run === run && !this.pinned) { this.close(); return false; }
    this.show(run, hosts, current);
    return true;
  }

  show(run, hosts, current, { pinned = false } = {}) {
    this.open = true; this.pinned = pinned;
    if (this.run !== run) { this.data = null; this.error = null; this.run = run; this.offset = 0; }
    this.hosts = hosts; this.current = current;
    this.render();
    this.load();
  }

  /** Keep the table (if open) in step with the page's selection. */
  sync(run, host) {
    if (!this.open) return;
    if (run !== this.run) { this.close(); return; }
    this.pinned = false;
    this.current = host;
    this.render();
  }

  close() { this.open = false; this.pinned = false; this.token++; this.slot.textContent = ""; }

  get complete() { return !!(this.data && this.data.complete) || !!this.error; }

  /** Another order or page: shown in the header at once, asked of the server. */
  reorder(sortBy, order) { this.sortBy = sortBy; this.order = order || ""; this.offset = 0; this.render(); this.load(); }
  turn(offset) { this.offset = Math.max(0, offset); this.load(); }

  /** A column header clicked: sort by it, or (clicked again) the other way. */
  flip(by) {
    if (this.sortBy !== by || by === "straggler") { this.reorder(by, ""); return; }
    const desc = this.order ? this.order === "desc" : !!DEFAULT_DESC[by];
    this.reorder(by, desc ? "asc" : "desc");
  }

  /** Polls /hosts (the server analyses the hosts in the background) until the summary is
   * complete, then once per change of order or page. */
  async load() {
    const token = ++this.token;
    const { run, threshold_us, kernels_only, peak_tflops } = this.params(this.hosts[0]);
    for (;;) {
      let r;
      try {
        r = await getJSON("hosts", { run, threshold_us, kernels_only, peak_tflops, sort: this.sortBy, order: this.order || undefined,
          hosts_offset: this.offset, hosts_limit: HOSTS_PAGE });
      } catch (e) { r = { ok: false, body: { error: String(e) } }; }
      if (token !== this.token) return;
      if (!r.ok) { this.error = r.body.error || `HTTP ${r.status}`; this.data = null; }
      else { this.error = null; this.data = r.body; }
      this.render();
      if (this.complete) return;
      await new Promise((res) => setTimeout(res, POLL_MS));
      if (token !== this.token) return;
    }
  }

  sortHeader(label, by) {
    const on = this.sortBy === by;
    const desc = this.order ? this.order === "desc" : !!DEFAULT_DESC[by];
    return h("th", { scope: "col", "aria-sort": on && by !== "straggler" ? (desc ? "descending" : "ascending") : null },
      h("button", { class: "pd-link-btn pd-sort" + (on ? " on" : ""), "data-sort": by,
        title: on && by !== "straggler" ? "Click again for the other direction" : `Sort by ${label.toLowerCase()}`,
        onclick: () => this.flip(by) },
      label, on && by !== "straggler" ? (desc ? " ▾" : " ▴") : ""));
  }

  /** The run's collectives in one paragraph: instances matched, per op wait and transfer,
   *  who arrives last, the clocks. */
  collectivesLine(c) {
    const ops = Object.entries(c.ops || {});
    const last = Object.entries(c.last_arrivers || {}).slice(0, 4);
    const clocks = Object.entries(c.clock_offsets || {}).filter(([, o]) => o.applied);
    return h("p", { class: "pd-small pd-pod-collectives", id: "pd-pod-collectives" },
      h("b", {}, `${c.instances} collective instances`), ` matched across ${c.hosts} hosts (${c.participants} devices)`,
      ops.length ? [": ", ops.map(([k, o], i) => [i ? "; " : "", `${k} ×${o.count}: peer wait ${formatWait(o.wait_ns)}, transfer ${formatNs(o.transfer_ns)} (per participant, over the capture)`])] : "",
      last.length ? `. Last to arrive: ${last.map(([k, n]) => `${k} ×${n}`).join(", ")}` : "",
      `. Clocks: ${c.clock_noisy ? "too noisy to order arrivals" : clocks.length ? `offsets applied to ${clocks.map(([k, o]) => `${k} (${formatNs(o.estimated_ns)})`).join(", ")}` : "aligned (no offset needed)"}.`,
      (c.unmatched || []).length ? ` ${c.unmatched.length} sequence(s) could not be matched on every participant.` : "",
      " ", h("abbr", { class: "pd-help", title: c.note || "" }, "?"));
  }

  row(r) {
    const pick = () => this.onPick(r.host);
    const devNames = this.devNames;
    const width = devNames.length + 6 + (this.peers ? 3 : 0) + (this.mfus ? 1 : 0);
    let cells;
    if (r.status === "pending") cells = [h("td", { colspan: String(width), class: "pd-muted" }, "Analysing…")];
    else if (r.status !== 200) cells = [h("td", { colspan: String(width), class: "pd-error-msg" }, squeeze(r.error || `HTTP ${r.status}`, 80, 500))];
    else {
      const devs = r.devices || [];
      cells = [
        h("td", { class: "pd-num", title: devs.map((d) => `${d.name}: ${formatPct(d.duty_cycle)}`).join("\n") }, formatPct(r.duty_cycle),
          r.peer_wait_points ? h("span", { class: "pd-small pd-duty-wait-cell", title: "busy time spent waiting for peers at collectives, in points of the duty cycle" },
            ` — ${r.peer_wait_points.toFixed(0)} pts waiting`) : null),
        devNames.map((n) => { const d = devs.find((x) => x.name === n); return h("td", { class: "pd-num" }, d ? formatPct(d.duty_cycle) : "–"); }),
        // what the busy time achieves, beside how much of the time was busy: the host's mean
        // MFU, each device's in the hover
        this.mfus ? h("td", { class: "pd-num pd-mfu-cell", title: devs.filter((d) => d.mfu !== null && d.mfu !== undefined)
          .map((d) => `${d.name}: MFU ${d.mfu_lower_bound ? "at least " : ""}${mfuPct(d.mfu)}`).join("\n") },
          r.mfu !== null && r.mfu !== undefined ? `${r.mfu_lower_bound && !mfuPct(r.mfu).startsWith("<") ? "≥" : ""}${mfuPct(r.mfu)}` : "–") : null,
        h("td", { class: "pd-num", title: `typical step: the mean over the steps that neither compile nor last 1.5× the median; all steps: ${formatNs(r.avg_step_ns)}` }, formatNs(r.typical_step_ns),
          h("span", { class: "pd-muted pd-small" }, ` (${plural(r.steps, "step")})`)),
        h("td", {}, r.worst_gap ? [h("span", { class: "chip", style: { background: causeColor(r.worst_gap.cause) } }),
          `${formatNs(r.worst_gap.duration_ns)} ${causeLabel(r.worst_gap.cause)}`] : "none"),
        h("td", { class: "pd-num" }, formatNs(r.idle_ns)),
        this.peers ? this.peerCells(r) : null,
        h("td", { class: "pd-causes" }, Object.entries(r.cause_shares || {}).map(([c, v]) =>
          h("span", { class: "pd-cause-share", title: causeLabel(c), "data-cause": c },
            h("span", { class: "chip", style: { background: causeColor(c) } }), `${SHORT[c] || causeLabel(c)} ${formatPct(v)}`))),
        h("td", { title: fullTitle(r.top_finding || "", 200), class: "pd-largest-loss" }, hostPeerLoss(r) || (r.top_finding ? squeeze(r.top_finding, 60, 120) : "none")),
        h("td", { class: r.straggler ? "pd-error-msg" : "pd-muted", title: r.straggler_reason || "" },
          // the reason in full is the hover and the banner above; the cell names the cause
          r.straggler ? `yes: ${r.straggler_cause ? r.straggler_cause.replace(/_/g, " ") : squeeze(r.straggler_reason || "", 60, 60)}` : "no")];
    }
    return h("tr", { class: "pd-compare-row" + (r.host === this.current ? " selected" : "") + (r.straggler ? " straggler" : ""),
      "data-host": r.host, tabindex: "0", role: "button", "aria-label": `Open host ${r.host}`, onclick: pick,
      onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } } },
    h("th", { scope: "row", title: fullTitle(r.host, 80) }, cut(r.host, 80),
      // the capture analysed (the span rule: each worker's latest), by its capture time: under
      // the host's name, not a column of its own (an 8-rank table fits 1,600 px)
      this.spans && r.status === 200 ? h("span", { class: "pd-capture pd-muted pd-small", "data-span": r.span || "",
        title: "The capture analysed: each worker's latest unless one is chosen (the same rule as the host page and the API)" },
      this.spanLabel(r.host, r.span)) : null), cells.flat());
  }

  /** Peer wait / step (with whom it waited for most), last arrivals, lateness. */
  peerCells(r) {
    const who = Object.entries(r.waited_for || {})[0];
    return [
      h("td", { class: "pd-num pd-peer-wait", title: who ? `waited mostly for ${who[0]} (${formatNs(who[1])} over the capture)` : "" },
        r.peer_wait_ns === undefined || r.peer_wait_ns === null ? "–" : formatWait(r.peer_wait_ns),
        who ? h("span", { class: "pd-muted pd-small" }, ` for ${cut(who[0], 24)}`) : null),
      h("td", { class: "pd-num pd-last-arrivals" }, r.last_arrivals === undefined ? "–" : `${r.last_arrivals} of ${this.instances}`),
      h("td", { class: "pd-num pd-lateness", title: "median lateness against the median arrival, over the instances it arrived last to" },
        r.lateness_ns ? formatNs(r.lateness_ns) : "–")];
  }

  render() {
    if (!this.open) return;
    const d = this.data;
    const rows = d ? d.hosts : [];
    const names = [];
    for (const r of rows) for (const x of r.devices || []) if (!names.includes(x.name)) names.push(x.name);
    // one column per device for a few devices; a pod's 8 chips per host read from the tooltip
    this.devNames = names.length > 1 && names.length <= MAX_DEVICE_COLUMNS ? names : [];
    this.spans = rows.some((r) => r.span);
    // the run's hosts share collectives: the peer-wait columns (GUIDE §4)
    const coll = d && d.collectives;
    this.peers = !!coll;
    // an MFU column where some host has FLOP figures (the server sorts by it too)
    this.mfus = rows.some((r) => r.mfu !== null && r.mfu !== undefined);
    this.instances = coll ? coll.instances : 0;
    const causeSort = h("select", { class: "pd-cause-sort", "aria-label": "Sort by a cause's share of the idle time",
      onchange: (e) => { if (e.target.value) this.reorder(e.target.value); } },
    h("option", { value: "" }, "Sort by a cause…"),
    (d ? d.causes : []).map((c) => h("option", { value: `cause.${c.cause}`, selected: this.sortBy === `cause.${c.cause}` },
      `${causeLabel(c.cause)} (top cause of ${c.hosts_top_cause})`)));
    const table = h("table", { class: "pd-compare-table" },
      h("thead", {}, h("tr", {}, this.sortHeader("Host", "host"),
        this.sortHeader("Duty cycle", "duty_cycle"),
        this.devNames.map((n) => h("th", { scope: "col" }, `${n} duty cycle`)),
        this.mfus ? this.sortHeader("MFU", "mfu") : null,
        this.sortHeader("Typical step", "typical_step"), this.sortHeader("Worst gap", "worst_gap"),
        this.sortHeader("Idle / step", "idle"),
        this.peers ? [this.sortHeader("Peer wait / step", "peer_wait"), this.sortHeader("Last arrivals", "last_arrivals"),
          h("th", { scope: "col", title: "median lateness against the median arrival when it arrived last" }, "Lateness")] : null,
        h("th", { scope: "col" }, "Top causes of idle time"),
        h("th", { scope: "col", title: "Peer wait at collectives when it costs the most, else the top finding" }, "Largest loss"), this.sortHeader("Straggler", "straggler"))),
      h("tbody", {}, rows.map((r) => this.row(r))));
    const done = this.complete;
    let status = null;
    if (this.error) status = h("p", { class: "pd-error-msg", role: "alert" }, this.error);
    else if (d && !d.complete) {
      const e = d.engine || {};
      const where = e.workers ? ` on ${e.workers} Dask worker${e.workers > 1 ? "s" : ""}${e.memory_limit_bytes ? ` (${(e.memory_limit_bytes / 1e9).toFixed(1)} GB each)` : ""}` : "";
      status = h("div", { class: "pd-pod-progress", role: "status" },
        h("progress", { max: String(d.total), value: String(d.done) }),
        ` ${d.done} of ${d.total} hosts${where}, ${d.from_store} from the result store, ${formatNs(d.elapsed_s * 1e9)}`);
    } else if (!d) status = h("p", { class: "pd-muted", role: "status" }, "Loading the host summary…");
    const st = d ? d.stragglers : [];
    const shown = st.slice(0, 20);
    // with collectives, a straggler is the one the others wait for: its cost and why, in words
    const named = shown.flatMap((x, i) => [i ? (d.collectives ? "; " : ", ") : "", h("button", { class: "pd-link-btn", onclick: () => this.onPick(x.host) }, x.host),
      d.collectives && x.reason && i < 3 ? ` — ${x.reason}` : x.cause ? ` (${causeLabel(x.cause)})` : ""]);
    const callout = !d || !d.complete || d.total < 2 ? null : st.length
      ? h("p", { class: "pd-stragglers" }, `${st.length} straggler${st.length > 1 ? "s" : ""}: `, ...named,
        st.length > shown.length ? ` and ${st.length - shown.length} more (sorted first in the table)` : "")
      : h("p", { class: "pd-muted pd-small" }, d.collectives ? `No straggler among ${d.total} hosts: no host is consistently the last to arrive at the collectives${d.collectives.clock_noisy ? " (the clocks are too noisy to order arrivals)" : ""}.`
        : `No straggler among ${d.total} hosts (typical step within 10 % and duty cycle within 5 points of the median host).`);
    const collLine = d && d.complete && d.collectives ? this.collectivesLine(d.collectives) : null;
    const median = d && d.median_step_ns ? h("p", { class: "pd-muted pd-small pd-pod-median" },
      `Median host: typical step ${formatNs(d.median_step_ns)}, duty cycle ${formatPct(d.median_duty_cycle)}`,
      d.median_duty_without_wait != null && d.median_duty_cycle != null
        ? ` — ${(100 * (d.median_duty_cycle - d.median_duty_without_wait)).toFixed(0)} points of it waiting for peers at collectives: ${formatPct(d.median_duty_without_wait)} doing work` : "",
      d.failed ? ` · ${d.failed} host${d.failed > 1 ? "s" : ""} could not be analysed` : "") : null;
    const pager = d && d.total > HOSTS_PAGE ? h("div", { class: "pd-row pd-pager" },
      h("button", { class: "pd-button", "data-page": "prev", disabled: this.offset === 0, onclick: () => this.turn(this.offset - HOSTS_PAGE) }, "‹ Previous"),
      h("span", { class: "pd-muted pd-page-label" }, pageLabel(this.offset, rows.length, d.total)),
      h("button", { class: "pd-button", "data-page": "next", disabled: this.offset + HOSTS_PAGE >= d.total, onclick: () => this.turn(this.offset + HOSTS_PAGE) }, "Next ›"),
      causeSort) : h("div", { class: "pd-row pd-pager" }, causeSort);
    this.slot.textContent = "";
    this.slot.append(h("section", { class: "pd-card pd-compare", "aria-label": "Compare hosts", "data-complete": done && d ? "1" : null },
      h("div", { class: "pd-row" }, h("h2", {}, `Hosts of ${this.run}`),
        this.pinned ? null : h("button", { class: "pd-link-btn", onclick: () => { this.close(); document.getElementById("pd-compare")?.setAttribute("aria-expanded", "false"); } }, "Close")),
      h("p", { class: "pd-muted pd-small" }, "Whole-trace numbers per host; typical step: the mean of the steps that neither compile nor last 1.5× the median; idle / step and the causes' shares are of a typical step. Under each host, the capture analysed. Click a host to open it."),
      status, callout, collLine, median, pager, table));
  }
}
