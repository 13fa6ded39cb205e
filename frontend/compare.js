// "Compare hosts": the /hosts route summarises every host of the run (analysed in parallel
// on the server): duty cycle per device, average step time, worst gap, top finding, and
// stragglers flagged against the median host. Click a row to open that host.
import { getJSON } from "./api.js";
import { h } from "./dom.js";
import { causeColor, causeLabel, formatNs, formatPct } from "./format.js";

/** One table row's numbers from a diagnosis body. */
export function hostSummary(d) {
  const steps = d.steps || [];
  const avg = steps.length ? steps.reduce((a, s) => a + (s.end_ns - s.start_ns), 0) / steps.length : null;
  const worst = (d.gaps || [])[0] || null;
  const f = [...(d.findings || [])].sort((a, b) => (b.time_lost_ns_per_step || 0) - (a.time_lost_ns_per_step || 0))[0] || null;
  return {
    devices: (d.devices || []).map((x) => ({ name: x.name, duty_cycle: x.duty_cycle })),
    avg_step_ns: avg, steps: steps.length,
    worst_gap: worst ? { duration_ns: worst.duration_ns, cause: worst.cause, label: worst.cause_label || causeLabel(worst.cause) } : null,
    top_finding: f ? { title: f.title, per_step_ns: f.time_lost_ns_per_step } : null,
  };
}

/** A /hosts route row in the table's shape (null while the host is still analysed). */
export function fromHostsRow(row) {
  if (row.status === "pending") return null;
  if (row.status !== 200) return { ok: false, error: row.error || `HTTP ${row.status}` };
  return {
    ok: true, devices: row.devices || [], avg_step_ns: row.avg_step_ns, typical_step_ns: row.typical_step_ns,
    steps: row.steps, duty_cycle: row.duty_cycle,
    worst_gap: row.worst_gap ? { ...row.worst_gap, label: causeLabel(row.worst_gap.cause) } : null,
    top_finding: row.top_finding ? { title: row.top_finding, per_step_ns: null } : null,
    straggler: !!row.straggler, straggler_reason: row.straggler_reason || "",
    straggler_cause: row.straggler_cause || null,
  };
}

/** Hosts in table order: by a column (stragglers first by default), then by name. */
export function sortHosts(hosts, rows, by) {
  const key = {
    straggler: (r) => (r && r.ok ? (r.straggler ? 0 : 1) : 2),
    step: (r) => (r && r.ok && r.typical_step_ns != null ? -r.typical_step_ns : Infinity),
    duty: (r) => (r && r.ok && r.duty_cycle != null ? r.duty_cycle : Infinity),
    host: () => 0,
  }[by] || (() => 0);
  return [...hosts].sort((a, b) => (key(rows.get(a)) - key(rows.get(b))) || a.localeCompare(b, undefined, { numeric: true }));
}

const POLL_MS = 500;

export class CompareHosts {
  constructor(slot, { params, onPick }) {
    this.slot = slot; this.params = params; this.onPick = onPick;
    this.open = false; this.run = null; this.hosts = []; this.rows = new Map(); this.token = 0; this.current = "";
    this.sortBy = "straggler"; this.progress = null;
  }

  toggle(run, hosts, current) {
    if (this.open && this.run === run && !this.pinned) { this.close(); return false; }
    this.show(run, hosts, current);
    return true;
  }

  show(run, hosts, current, { pinned = false } = {}) {
    this.open = true; this.pinned = pinned;
    if (this.run !== run) { this.rows = new Map(); this.run = run; this.progress = null; }
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

  get complete() { return this.hosts.every((x) => this.rows.get(x)); }

  /** Polls /hosts (the server analyses the hosts in the background) until every row is in. */
  async load() {
    const token = ++this.token;
    const { run, threshold_us, kernels_only } = this.params(this.hosts[0]);
    while (!this.complete) {
      let r;
      try { r = await getJSON("hosts", { run, threshold_us, kernels_only }); } catch (e) { r = { ok: false, body: { error: String(e) } }; }
      if (token !== this.token) return;
      if (!r.ok) {
        for (const host of this.hosts) this.rows.set(host, { ok: false, error: r.body.error || `HTTP ${r.status}` });
      } else {
        this.progress = r.body;
        for (const row of r.body.hosts) this.rows.set(row.host, fromHostsRow(row));
      }
      this.render();
      if (this.complete) return;
      await new Promise((res) => setTimeout(res, POLL_MS));
      if (token !== this.token) return;
    }
  }

  render() {
    if (!this.open) return;
    const devNames = [];
    for (const r of this.rows.values()) for (const d of (r && r.devices) || []) if (!devNames.includes(d.name)) devNames.push(d.name);
    const sortable = (label, by) => h("th", { scope: "col", "aria-sort": this.sortBy === by ? "descending" : null },
      h("button", { class: "pd-link-btn pd-sort", "data-sort": by, onclick: () => { this.sortBy = by; this.render(); } }, label));
    const order = sortHosts(this.hosts, this.rows, this.sortBy);
    const table = h("table", { class: "pd-compare-table" },
      h("thead", {}, h("tr", {}, sortable("Host", "host"),
        devNames.map((n) => h("th", { scope: "col" }, `${n} duty cycle`)),
        sortable("Typical step", "step"), h("th", { scope: "col" }, "Worst gap"), h("th", { scope: "col" }, "Top finding"),
        sortable("Straggler", "straggler"))),
      h("tbody", {}, order.map((host) => {
        const r = this.rows.get(host);
        const pick = () => this.onPick(host);
        const cells = !r ? [h("td", { colspan: String(devNames.length + 4), class: "pd-muted" }, "Analysing…")] :
          !r.ok ? [h("td", { colspan: String(devNames.length + 4), class: "pd-error-msg" }, r.error)] : [
            devNames.map((n) => { const d = r.devices.find((x) => x.name === n); return h("td", { class: "pd-num" }, d ? formatPct(d.duty_cycle) : "–"); }),
            h("td", { class: "pd-num", title: `average ${formatNs(r.avg_step_ns)}` }, formatNs(r.typical_step_ns),
              h("span", { class: "pd-muted pd-small" }, ` (${r.steps} steps)`)),
            h("td", {}, r.worst_gap ? [h("span", { class: "chip", style: { background: causeColor(r.worst_gap.cause) } }),
              `${formatNs(r.worst_gap.duration_ns)} ${r.worst_gap.label}`] : "none"),
            h("td", {}, r.top_finding ? (r.top_finding.per_step_ns == null ? r.top_finding.title
              : `${r.top_finding.title} (≈ ${formatNs(r.top_finding.per_step_ns)}/step)`) : "none"),
            h("td", { class: r.straggler ? "pd-error-msg" : "pd-muted", title: r.straggler_reason || "" },
              r.straggler ? `yes: ${r.straggler_reason}` : "no")];
        return h("tr", { class: "pd-compare-row" + (host === this.current ? " selected" : "") + (r && r.straggler ? " straggler" : ""),
          "data-host": host, tabindex: "0", role: "button", "aria-label": `Open host ${host}`, onclick: pick,
          onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } } },
        h("th", { scope: "row" }, host), cells.flat());
      })));
    const done = this.complete;
    const p = this.progress;
    const stragglers = this.hosts.filter((x) => this.rows.get(x)?.straggler);
    const status = !done && p ? h("div", { class: "pd-pod-progress", role: "status" },
      h("progress", { max: String(p.total), value: String(p.done) }),
      ` ${p.done} of ${p.total} hosts analysed (${p.workers} at a time${p.processes ? ", in worker processes" : ""}, ${p.elapsed_s.toFixed(1)} s)`) : null;
    const named = stragglers.flatMap((x, i) => [i ? ", " : "",
      h("button", { class: "pd-link-btn", onclick: () => this.onPick(x) }, x),
      this.rows.get(x).straggler_cause ? ` (${causeLabel(this.rows.get(x).straggler_cause)})` : ""]);
    const callout = !done || this.hosts.length < 2 ? null : stragglers.length
      ? h("p", { class: "pd-stragglers" }, `${stragglers.length} straggler${stragglers.length > 1 ? "s" : ""}: `, ...named)
      : h("p", { class: "pd-muted pd-small" }, `No straggler among ${this.hosts.length} hosts (typical step within 10 % and duty cycle within 5 points of the median host).`);
    this.slot.textContent = "";
    this.slot.append(h("section", { class: "pd-card pd-compare", "aria-label": "Compare hosts", "data-complete": done ? "1" : null },
      h("div", { class: "pd-row" }, h("h2", {}, `Hosts of ${this.run}`),
        this.pinned ? null : h("button", { class: "pd-link-btn", onclick: () => { this.close(); document.getElementById("pd-compare")?.setAttribute("aria-expanded", "false"); } }, "Close")),
      h("p", { class: "pd-muted pd-small" }, "Whole-trace numbers per host; typical step = median step. Click a host to open it."),
      status, callout, table));
  }
}
