// A host's "Collectives" card, from the /collectives route: its collective ops matched with
// the other participants of the run (per op: instances, peer wait, transfer, whom it waited
// for, the steps), the run's straggler with why it was late, and the clock alignment; or,
// when there is no such figure, why (the other hosts still being analysed, the others not
// captured, another capture than the run's). The page only renders.
import { h } from "./dom.js";
import { causeColor, formatNs, formatPct, formatWait } from "./format.js";

/** "duty 66% — 59 points waiting for worker7 at send-recv" for device `id` (null: none). */
export function dutyWaitText(coll, id) {
  if (!coll || coll.state !== "joined") return null;
  const d = (coll.devices || []).find((x) => String(x.id) === String(id));
  if (!d || !d.wait_ns || d.wait_points === null || d.wait_points === undefined) return null;
  // under a twentieth of a point it would read "0.0 points of it waiting" (the TPU sample)
  if (d.wait_points < 0.05) return null;
  return `${d.wait_points.toFixed(d.wait_points < 10 ? 1 : 0)} points of it waiting for ` +
    `${awaitedName(d)}${d.waited_at ? ` at ${d.waited_at}` : ""}`;
}

/** Whom a device waited for most: a host, a device of this one, or several that arrived
 * together ("TPU 1, TPU 2 and TPU 3, arriving together"). */
function awaitedName(d) {
  const t = d.waited_for_together || [];
  if (t.length) return `${listed(t)}, arriving together`;
  return d.waited_for || d.waited_for_device || "peers";
}

const listed = (xs) => xs.length > 1 ? `${xs.slice(0, -1).join(", ")} and ${xs[xs.length - 1]}` : (xs[0] || "");

/** Peer wait per step and device into the diagnosis' steps (the bars draw it as a part). */
export function mergeStepWait(steps, coll) {
  const by = (coll && coll.state === "joined" && coll.step_peer_wait_ns) || {};
  for (const s of steps || []) {
    const row = by[String(s.id)] || {};
    for (const [dev, d] of Object.entries(s.devices || {})) d.peer_wait_ns = row[dev] || 0;
  }
}

const hostLink = (name, onHost, cls = "pd-link-btn") => h("button", { class: cls, "data-host": name,
  title: `Open ${name}`, onclick: () => onHost(name) }, name);

// devices of one process: who arrived last among them and who waited for it
function devicesLine(c) {
  const last = Object.entries(c.device_last_arrivals || {});
  if (c.hosts !== 1) return null;
  if (!last.length) return tiedLine(c);
  const [who, n] = last[0];
  const waiting = (c.devices || []).filter((d) => d.waited_for_device === who && (d.wait_ns + (d.idle_wait_ns || 0)) > 0);
  const steps = c.steps || 1;
  return h("p", { class: "pd-stragglers", id: "pd-coll-straggler" },
    h("b", {}, "Between this process's devices: "),
    `${who} arrived last to ${n} of ${c.instances} instances`,
    waiting.length ? `; ${waiting.map((d) => `${d.name} waited for it ${formatNs((d.wait_ns + (d.idle_wait_ns || 0)) / steps)} per step` +
      (d.idle_wait_ns ? ` (${formatNs(d.idle_wait_ns / steps)} of it idle before the op, already queued: collective wait)` : "")).join(", ")}` : "",
    c.saving_per_step_ns ? `. Bringing ${who} in on time saves ≈ ${formatNs(c.saving_per_step_ns)} per step` : "",
    ".");
}

// devices of one process whose last arrivals the clock cannot tell apart: no one is named
// last, and a device ready before all of them waited for them together
function tiedLine(c) {
  if (!c.unresolved) return null;
  const steps = c.steps || 1;
  const waiting = (c.devices || []).filter((d) => (d.waited_for_together || []).length);
  return h("p", { class: "pd-stragglers", id: "pd-coll-straggler" },
    h("b", {}, "Between this process's devices: "),
    `no one device is last at ${c.unresolved} of ${c.instances} instances (the last ones arrive within the clock's agreement)`,
    waiting.length ? `; ${waiting.map((d) => `${d.name} is ready before them and waits ` +
      `${formatNs((d.wait_ns + (d.idle_wait_ns || 0)) / steps)} per step for ${listed(d.waited_for_together)}`).join(", ")}` : "", ".");
}

function stragglerLine(c, onHost, onStep) {
  const st = c.stragglers || [];
  if (c.clock_noisy) {
    return h("p", { class: "pd-warnings-inline", id: "pd-coll-noisy", role: "note" },
      "The hosts' clocks could not be aligned closely enough to order arrivals: no straggler is named.");
  }
  const dl = devicesLine(c);
  if (dl) return dl;
  if (!st.length) {
    return h("p", { class: "pd-muted pd-small", id: "pd-coll-straggler" },
      "No participant is consistently the last to arrive: no straggler in this run.");
  }
  const s = st[0];
  const me = s.host === c.host;
  // why: its own idle by cause only where that explains half of its lateness (the server's words)
  const why = s.why ? [" ", h("span", { class: "pd-coll-why" }, s.why)] : "";
  const steps = (s.late_steps || []).slice(0, 8);
  return h("p", { class: "pd-stragglers", id: "pd-coll-straggler" },
    me ? h("b", {}, "This host is the run's straggler: ") : [h("b", {}, "The run's straggler: "), hostLink(s.host, onHost, "pd-link-btn pd-coll-straggler-link"), " — "],
    `the others wait ${formatNs(s.caused_wait_per_step_ns)} per step for it (last to arrive at ${s.last_arrivals} of ${c.run_instances} instances); `,
    s.saving_per_step_ns !== null && s.saving_per_step_ns !== undefined ? h("span", { id: "pd-coll-saving" },
      `fixing it alone saves ≈ ${formatNs(s.saving_per_step_ns)} per step (its lead over the next-to-last arrival` +
      (s.next_straggler ? `; then ${s.next_straggler} is last` : "") + ");") : null,
    why,
    steps.length ? [s.intermittent ? ", in a few steps only: " : "; late in step ", steps.map((x, i) => [i ? ", " : "",
      h("a", { href: "#", class: "pd-link", onclick: (e) => { e.preventDefault(); onStep(x); } }, String(x))]),
    s.late_steps.length > steps.length ? ` and ${s.late_steps.length - steps.length} more` : ""] : "",
    ".",
    st.length > 1 ? h("span", { class: "pd-muted pd-small" }, ` Also: ${st.slice(1).map((x) => x.host).join(", ")}.`) : null);
}

function clockLine(c) {
  const k = c.clock;
  if (!k) return null;
  const shared = k.shared_with || 0;
  // a signed offset reads as a direction, never as a negative duration
  const est = Number(k.estimated_ns) || 0;
  const dir = est ? `${formatNs(Math.abs(est))} ${est > 0 ? "ahead of" : "behind"} the others` : "";
  const own = k.applied ? `this host's clock ${dir || "level with the others"}, estimated from the instances' ends and applied (residual ${formatNs(k.residual_ns)})`
    : shared ? `this host shares its clock with ${shared} other host${shared > 1 ? "s" : ""} (${k.basis}): no offset`
      : c.clocks > 1 ? `no offset applied to this host (${dir ? `estimated ${dir}, ` : ""}within its residual ${formatNs(k.residual_ns)})` : "";
  const said = [c.clock_note, own].filter(Boolean);
  return said.length ? h("span", { id: "pd-coll-clock" }, `Clock: ${said.join("; ")}.`) : null;
}

function joinedTable(c, onHost, onStep) {
  const head = ["Op", "Instances", "Peer wait", "/ step", "Transfer", "Wait share", "Waited for", "Last to arrive", "Steps it waited most in"];
  return h("table", { class: "pd-cmp-table pd-coll-table", id: "pd-coll-table", "aria-label": "Collectives of this host by op" },
    h("thead", {}, h("tr", {}, head.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, (c.ops || []).map((o) => h("tr", { "data-op": o.op },
      h("th", { scope: "row", title: (o.keys || []).join("\n") }, o.op),
      h("td", { class: "pd-num" }, String(o.instances)),
      h("td", { class: "pd-num pd-coll-wait" }, formatWait(o.wait_ns)),
      h("td", { class: "pd-num" }, formatWait(o.wait_per_step_ns)),
      h("td", { class: "pd-num" }, formatNs(o.transfer_ns)),
      h("td", { class: "pd-num" }, o.wait_share === null ? "–" : h("span", { class: "pd-coll-share", title: "peer wait / (peer wait + transfer)" },
        h("span", { class: "pd-coll-bar", "aria-hidden": "true" }, h("span", { style: { width: `${100 * o.wait_share}%` } })), ` ${formatPct(o.wait_share)}`)),
      h("td", { class: "pd-coll-who" }, (o.waited_for || []).length ? o.waited_for.map((w, i) => [i ? "; " : "",
        (w.together || []).length ? `${listed(w.together)}, together` : w.device ? w.device : hostLink(w.host, onHost),
        ` ${formatNs(w.wait_ns)}`]) : h("span", { class: "pd-muted" }, "nobody")),
      h("td", { class: "pd-small" }, lastCell(c, o)),
      h("td", { class: "pd-small" }, (o.steps || []).slice(0, 6).map((x, i) => [i ? ", " : "",
        h("a", { href: "#", class: "pd-link pd-coll-step", "data-step": String(x.step), title: `open step ${x.step}`,
          onclick: (e) => { e.preventDefault(); onStep(x.step); } }, `${x.step}`), ` (${formatNs(x.wait_ns)})`]),
      (o.steps || []).length > 6 ? ` …${o.steps.length - 6} more` : "")))));
}

// who arrived last to this op's instances: a device of this process (one host) or a host,
// and how many instances had no one last (arrivals the clocks cannot tell apart)
function lastCell(c, o) {
  const named = c.hosts === 1 ? Object.entries(o.last_devices || {})
    : Object.entries(o.last_arrivers || {}).map(([k, n]) => [k === c.host ? "this host" : k, n]);
  const parts = named.map(([k, n]) => k === "this host" ? h("b", {}, `${k} ×${n}`) : `${k} ×${n}`);
  if (o.together) parts.push(h("span", { title: "the last arrivals were within the clocks' agreement: no one is named" }, `together ×${o.together}`));
  return parts.map((p, i) => [i ? ", " : "", p]);
}

function aloneTable(c) {
  return h("table", { class: "pd-cmp-table pd-coll-table", id: "pd-coll-alone", "aria-label": "Collective time of this host by op" },
    h("thead", {}, h("tr", {}, ["Op", "Instances", "Total", "Median", "Min", "90th pct", "Max"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, (c.ops || []).map((o) => h("tr", { "data-op": o.op },
      h("th", { scope: "row" }, o.op), h("td", { class: "pd-num" }, String(o.count)),
      ...[o.total_ns, o.median_ns, o.min_ns, o.p90_ns, o.max_ns].map((v) => h("td", { class: "pd-num" }, formatNs(v)))))));
}

// one device's wait for its peers: inside the ops, idle before them (a part of its
// collective-wait idle), and whom for; a wait the clock cannot order is said to be so
function deviceWait(d, onHost) {
  const told = d.waited_for || d.waited_for_device || (d.waited_for_together || []).length;
  if (!d.wait_ns && !d.idle_wait_ns) return ["no wait for its peers"];
  if (!told) return [`arrived with the last (its ${formatNs(d.wait_ns + (d.idle_wait_ns || 0))} of wait is within the clock's agreement)`];
  const out = [];
  if (d.wait_ns) {
    out.push(`${formatNs(d.wait_ns)} waiting inside the ops`, d.wait_points !== null && d.wait_points !== undefined
      ? (d.wait_points >= 0.05 ? ` = ${d.wait_points.toFixed(1)} points of its duty cycle` : " (under 0.1 points of its duty cycle)") : "");
  }
  if (d.idle_wait_ns) {
    const cw = d.collective_wait_idle_ns;
    out.push(`${d.wait_ns ? ", " : ""}${formatNs(d.idle_wait_ns)} idle before them until the last was ready` +
      (cw && cw > d.idle_wait_ns ? ` (of its ${formatNs(cw)} collective-wait idle)` : " (collective-wait idle)"));
  }
  out.push(", mostly for ", d.waited_for ? hostLink(d.waited_for, onHost) : awaitedName(d), d.waited_at ? ` at ${d.waited_at}` : "");
  return out;
}

/**
 * Renders the card's body into `el` (cleared). `c`: the /collectives body, or
 * {state: "error", error} when the route failed.
 * @param onHost name → open that host's page
 * @param onStep step id → select that step
 */
export function renderCollectives(el, c, { onHost, onStep }) {
  el.textContent = "";
  el.dataset.state = c.state;
  if (c.state === "error") {
    el.append(h("p", { class: "pd-error-msg", role: "alert" }, `Collectives could not be matched: ${c.error}`));
    return;
  }
  if (c.state === "pending") {
    el.append(h("p", { class: "pd-loading", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }),
      ` Matching this host's collectives with the other hosts' (${c.done} of ${c.hosts} analysed)…`));
    return;
  }
  if (c.state !== "joined") {
    el.append(h("p", { class: "pd-muted", id: "pd-coll-note" }, c.note || ""));
    if (c.state === "alone" && (c.ops || []).length) {
      el.append(h("p", {}, `Collective time: ${formatNs(c.collective_ns)} per step (${formatNs(c.collective_total_ns)} over the capture, per device).`),
        aloneTable(c));
    }
    return;
  }
  const devs = c.devices || [];
  const lastDev = Object.entries(c.device_last_arrivals || {});
  // Element.append writes a null child as the text "null": absent parts are filtered out
  el.append(...[
    h("div", { class: "pd-stats" },
      c.idle_wait_total_ns
        // devices that idle before an op they already had wait for a peer outside the op
        ? h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value", id: "pd-coll-peer-wait" }, formatNs((c.peer_wait_ns || 0) + (c.idle_wait_ns || 0))),
          h("span", { class: "pd-stat-label" }, `waiting for peers per step, the mean over this host's devices: ${formatNs(c.idle_wait_ns)} idle before the ops, already queued (collective wait), ` +
            `and ${formatNs(c.peer_wait_ns)} of busy time inside them (${formatNs(c.idle_wait_total_ns + (c.peer_wait_total_ns || 0))} over the capture)`))
        : h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value", id: "pd-coll-peer-wait" }, formatWait(c.peer_wait_ns)),
          h("span", { class: "pd-stat-label" }, `peer wait per step (${formatNs(c.peer_wait_total_ns)} over the capture), busy time spent waiting for the last participant`)),
      h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value" }, formatNs(c.transfer_total_ns)),
        h("span", { class: "pd-stat-label" }, "transfer over the capture (the rest of the collective time)")),
      c.hosts === 1
        ? h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value", id: "pd-coll-last" }, lastDev.length ? `${lastDev[0][1]} of ${c.instances}` : `0 of ${c.instances}`),
          h("span", { class: "pd-stat-label" }, lastDev.length ? `instances ${lastDev[0][0]} arrived last to, among this process's devices` +
            (c.lateness_ns ? ` (median ${formatNs(c.lateness_ns)} after the median device)` : "")
            : "instances one device arrived last to: the devices arrive together"))
        : h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value", id: "pd-coll-last" }, `${c.last_arrivals} of ${c.instances}`),
          h("span", { class: "pd-stat-label" }, "instances this host arrived last to" +
            (c.lateness_ns ? ` (median ${formatNs(c.lateness_ns)} after the median arrival)` : "")))),
    devs.length ? h("ul", { class: "pd-idle pd-coll-devices" }, devs.map((d) => h("li", { "data-device": d.name },
      h("span", { class: "chip", style: { background: causeColor("peer_wait") } }),
      `${d.name}: `, ...deviceWait(d, onHost)))) : null,
    stragglerLine(c, onHost, onStep),
    joinedTable(c, onHost, onStep),
    h("p", { class: "pd-muted pd-small" },
      `${c.run_instances} instances matched across ${c.participants} participants on ${c.hosts} host${c.hosts > 1 ? "s" : ""}. `,
      clockLine(c), " ",
      (c.unmatched || []).length ? h("span", { id: "pd-coll-unmatched" }, `Not matched: ${c.unmatched.map((u) =>
        u.host ? `${u.host} ${u.device || ""} has ${u.count} of ${u.instances} ${u.key}` : `${u.incomplete_instances} of ${u.instances} ${u.key} incomplete`).join("; ")}. `) : null,
      (c.failed_hosts || []).length ? `${c.failed_hosts.length} host(s) could not be analysed and are left out: ${c.failed_hosts.slice(0, 5).join(", ")}. ` : null,
      h("abbr", { class: "pd-help", title: c.note || "" }, "?"))].filter((x) => x !== null && x !== undefined));
}
