// A host's "Collectives" card, from the /collectives route: its collective ops matched with
// the other participants of the run (per op: instances, peer wait, transfer, whom it waited
// for, the steps), the run's straggler with why it was late, and the clock alignment; or,
// when there is no such figure, why (the other hosts still being analysed, the others not
// captured, another capture than the run's). The page only renders.
import { h } from "./dom.js";
import { causeColor, causeLabel, formatNs, formatPct, squeeze } from "./format.js";

/** "duty 66% — 59 points waiting for worker7 at send-recv" for device `id` (null: none). */
export function dutyWaitText(coll, id) {
  if (!coll || coll.state !== "joined") return null;
  const d = (coll.devices || []).find((x) => String(x.id) === String(id));
  if (!d || !d.wait_ns || d.wait_points === null || d.wait_points === undefined) return null;
  return `${d.wait_points.toFixed(d.wait_points < 10 ? 1 : 0)} points of it waiting for ` +
    `${d.waited_for || "peers"}${d.waited_at ? ` at ${d.waited_at}` : ""}`;
}

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

function stragglerLine(c, onHost, onStep) {
  const st = c.stragglers || [];
  if (c.clock_noisy) {
    return h("p", { class: "pd-warnings-inline", id: "pd-coll-noisy", role: "note" },
      "The hosts' clocks could not be aligned closely enough to order arrivals: no straggler is named.");
  }
  if (!st.length) {
    return h("p", { class: "pd-muted pd-small", id: "pd-coll-straggler" },
      "No participant is consistently the last to arrive: no straggler in this run.");
  }
  const s = st[0];
  const me = s.host === c.host;
  const why = s.cause ? [" late because of ", h("span", { class: "chip", style: { background: causeColor(s.cause) } }),
    causeLabel(s.cause).toLowerCase(), s.culprit ? [" (", h("code", {}, squeeze(s.culprit, 80, 200)), ")"] : null] : "";
  const steps = (s.late_steps || []).slice(0, 8);
  return h("p", { class: "pd-stragglers", id: "pd-coll-straggler" },
    me ? h("b", {}, "This host is the run's straggler: ") : [h("b", {}, "The run's straggler: "), hostLink(s.host, onHost, "pd-link-btn pd-coll-straggler-link"), " — "],
    `the others wait ${formatNs(s.caused_wait_per_step_ns)} per step for it (last to arrive at ${s.last_arrivals} of ${c.run_instances} instances);`,
    why,
    steps.length ? [s.intermittent ? ", in a few steps only: " : "; late in step ", steps.map((x, i) => [i ? ", " : "",
      h("a", { href: "#", class: "pd-link", onclick: (e) => { e.preventDefault(); onStep(x); } }, String(x))]),
    s.late_steps.length > steps.length ? ` and ${s.late_steps.length - steps.length} more` : ""] : "",
    ". Fixing it saves about that much per step on every other participant.",
    st.length > 1 ? h("span", { class: "pd-muted pd-small" }, ` Also: ${st.slice(1).map((x) => x.host).join(", ")}.`) : null);
}

function clockLine(c) {
  const k = c.clock;
  if (!k) return null;
  // a signed offset reads as a direction, never as a negative duration
  const est = Number(k.estimated_ns) || 0;
  const by = est ? `this host's clock ${formatNs(Math.abs(est))} ${est > 0 ? "ahead of" : "behind"} the others` : "no offset between the clocks";
  const off = k.applied ? `offset applied (${by}, estimated from the instances' ends; residual ${formatNs(k.residual_ns)})`
    : `no offset applied (${by}, within the residual ${formatNs(k.residual_ns)}: the same clock)`;
  return h("span", { id: "pd-coll-clock" }, `Clock: ${off}.`);
}

function joinedTable(c, onHost, onStep) {
  const head = ["Op", "Instances", "Peer wait", "/ step", "Transfer", "Wait share", "Waited for", "Last to arrive", "Steps it waited most in"];
  return h("table", { class: "pd-cmp-table pd-coll-table", id: "pd-coll-table", "aria-label": "Collectives of this host by op" },
    h("thead", {}, h("tr", {}, head.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, (c.ops || []).map((o) => h("tr", { "data-op": o.op },
      h("th", { scope: "row", title: (o.keys || []).join("\n") }, o.op),
      h("td", { class: "pd-num" }, String(o.instances)),
      h("td", { class: "pd-num pd-coll-wait" }, formatNs(o.wait_ns)),
      h("td", { class: "pd-num" }, formatNs(o.wait_per_step_ns)),
      h("td", { class: "pd-num" }, formatNs(o.transfer_ns)),
      h("td", { class: "pd-num" }, o.wait_share === null ? "–" : h("span", { class: "pd-coll-share", title: "peer wait / (peer wait + transfer)" },
        h("span", { class: "pd-coll-bar", "aria-hidden": "true" }, h("span", { style: { width: `${100 * o.wait_share}%` } })), ` ${formatPct(o.wait_share)}`)),
      h("td", { class: "pd-coll-who" }, (o.waited_for || []).length ? o.waited_for.map((w, i) => [i ? ", " : "",
        hostLink(w.host, onHost), ` ${formatNs(w.wait_ns)}`]) : h("span", { class: "pd-muted" }, "nobody")),
      h("td", { class: "pd-small" }, Object.entries(o.last_arrivers || {}).map(([k, n], i) => [i ? ", " : "",
        k === c.host ? h("b", {}, `this host ×${n}`) : `${k} ×${n}`])),
      h("td", { class: "pd-small" }, (o.steps || []).slice(0, 6).map((x, i) => [i ? ", " : "",
        h("a", { href: "#", class: "pd-link pd-coll-step", "data-step": String(x.step), title: `open step ${x.step}`,
          onclick: (e) => { e.preventDefault(); onStep(x.step); } }, `${x.step}`), ` (${formatNs(x.wait_ns)})`]),
      (o.steps || []).length > 6 ? ` …${o.steps.length - 6} more` : "")))));
}

function aloneTable(c) {
  return h("table", { class: "pd-cmp-table pd-coll-table", id: "pd-coll-alone", "aria-label": "Collective time of this host by op" },
    h("thead", {}, h("tr", {}, ["Op", "Instances", "Total", "Median", "Min", "90th pct", "Max"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, (c.ops || []).map((o) => h("tr", { "data-op": o.op },
      h("th", { scope: "row" }, o.op), h("td", { class: "pd-num" }, String(o.count)),
      ...[o.total_ns, o.median_ns, o.min_ns, o.p90_ns, o.max_ns].map((v) => h("td", { class: "pd-num" }, formatNs(v)))))));
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
  const devs = (c.devices || []).filter((d) => d.wait_ns > 0);
  // Element.append writes a null child as the text "null": absent parts are filtered out
  el.append(...[
    h("div", { class: "pd-stats" },
      h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value", id: "pd-coll-peer-wait" }, formatNs(c.peer_wait_ns)),
        h("span", { class: "pd-stat-label" }, `peer wait per step (${formatNs(c.peer_wait_total_ns)} over the capture), busy time spent waiting for the last participant`)),
      h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value" }, formatNs(c.transfer_total_ns)),
        h("span", { class: "pd-stat-label" }, "transfer over the capture (the rest of the collective time)")),
      h("div", { class: "pd-stat" }, h("span", { class: "pd-stat-value", id: "pd-coll-last" }, `${c.last_arrivals} of ${c.instances}`),
        h("span", { class: "pd-stat-label" }, "instances this host arrived last to" +
          (c.lateness_ns ? ` (median ${formatNs(c.lateness_ns)} after the median arrival)` : "")))),
    devs.length ? h("ul", { class: "pd-idle pd-coll-devices" }, devs.map((d) => h("li", {},
      h("span", { class: "chip", style: { background: causeColor("peer_wait") } }),
      `${d.name}: ${formatNs(d.wait_ns)} waiting`, d.wait_points !== null ? ` = ${d.wait_points.toFixed(1)} points of its duty cycle` : "",
      d.waited_for ? [", mostly for ", hostLink(d.waited_for, onHost), d.waited_at ? ` at ${d.waited_at}` : ""] : ""))) : null,
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
