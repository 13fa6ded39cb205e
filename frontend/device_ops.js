// "Device time by op": per device, the op groups that fill the busy time (the server's
// device_ops section, already cut to a step when one is selected), the kernels shorter than
// the launch latency as a group of their own, and the busy time split into compute, copies
// and collectives. The page only renders; every figure comes from the JSON.
import { h } from "./dom.js";
import { formatNs, formatPct, squeeze } from "./format.js";
import { boundLabel, utilisationText } from "./roofline.js";

const CLASS_LABEL = { compute: "compute", collective: "collective", memcpy: "copy", memset: "set" };

/** Achieved FLOP/s of an op group ("" where it has no FLOPs). */
function flopRate(r) {
  if (!r || !r.flops_per_s) return "";
  const v = r.flops_per_s;
  return v >= 1e12 ? `${(v / 1e12).toPrecision(3)} T` : v >= 1e9 ? `${(v / 1e9).toPrecision(3)} G` : `${(v / 1e6).toPrecision(3)} M`;
}

/** "HBM · 1.7 %", "VMEM-write · 49.6 %": which roof limits the group and its share of roofline. */
function roofCell(r) {
  // faster than its roof over its own time: its bytes move outside it (an async copy's
  // start/done pair), so it has no share — said, never a share over 100 %
  if (r && r.above_roof) {
    return h("td", { class: "pd-small dop-roof pd-muted", title: "Its bytes over its own time would beat the roof: " +
      "the op moves them outside its own time (an async copy-start/copy-done pair), or the peak is too low. No share of the roofline." },
    "– (moves its bytes outside its own time)");
  }
  if (!r || !r.bound) return h("td", {}, "");
  const what = boundLabel(r);
  const util = utilisationText(r);
  return h("td", { class: "pd-small dop-roof", title: `intensity ${r.intensity === null ? "–" : Number(r.intensity).toPrecision(3)} FLOP/byte; ` +
    `${r.bytes_per_s ? `${(r.bytes_per_s / 1e9).toPrecision(3)} GB/s; ` : ""}share of the roofline (${what}-bound)` +
    (util ? `; utilisation: ${util}` : "") },
  `${what} · ${r.efficiency === null ? "–" : formatPct(r.efficiency)}`);
}

function pct(x) {
  return x === null || x === undefined ? "" : formatPct(x);
}

/** Short kernels under this share of busy time are a note, not a warning: too little
 *  time to be worth acting on (a launch-bound run has them by the tens of percent). */
export const SHORT_WARN_SHARE = 0.01;

/** One device's busy time as a stacked bar: compute, copies not under compute, collectives
 *  under neither (they add up to the busy time), with the overlap figures in words. */
function overlapLine(dev, collectives) {
  const o = dev.overlap, busy = Math.max(o.busy_ns, 1);
  const part = (cls, ns, label) => ns > 0 ? h("span", { class: `dop-part ${cls}`, style: { width: `${100 * ns / busy}%` },
    title: `${label}: ${formatNs(ns)} (${pct(ns / busy)} of busy)` }) : null;
  const over = (all, under) => all > 0 ? `${formatNs(all)}, ${pct(under / all)} of it under compute` : "none";
  return h("div", { class: "dop-overlap", "data-device": String(dev.device) },
    h("span", { class: "dop-dev" }, dev.name),
    h("span", { class: "dop-stack", role: "img",
      "aria-label": `busy ${formatNs(o.busy_ns)}: compute ${formatNs(o.compute_ns)}, exposed copies ${formatNs(o.copies_exposed_ns)}, exposed collectives ${formatNs(o.collectives_exposed_ns)}` },
    part("dop-compute", o.compute_ns, "compute"), part("dop-copy", o.copies_exposed_ns, "copies not under compute"),
    part("dop-coll", o.collectives_exposed_ns, "collectives not under compute or copies")),
    h("span", { class: "dop-ov-text pd-small" },
      `busy ${formatNs(o.busy_ns)} · compute ${formatNs(o.compute_ns)} · copies ${over(o.copies_ns, o.copies_under_compute_ns)} · ` +
      `collectives ${over(o.collectives_ns, o.collectives_under_compute_ns)}` + peerWait(dev, collectives)));
}

/** " (peer wait 11.1 ms of it)": the device's busy time waiting for peers (whole capture). */
function peerWait(dev, c) {
  if (!c || c.state !== "joined") return "";
  const d = (c.devices || []).find((x) => String(x.id) === String(dev.device));
  return d && d.wait_ns ? ` (peer wait ${formatNs(d.wait_ns)} of it over the capture)` : "";
}

/**
 * Renders the section into `container`.
 * @param doc      the diagnosis' device_ops
 * @param deviceId the device whose op table is shown (all devices' overlap is)
 * @param opHref   op → URL of the trace viewer at its longest instance (null: no link)
 * @param onFinding index → show that finding
 */
export function renderDeviceOps(container, doc, { deviceId, opHref, onFinding, collectives } = {}) {
  container.textContent = "";
  if (!doc || !(doc.devices || []).length) {
    container.append(h("p", { class: "pd-muted" }, doc ? "No device ops." :
      "This result was made before device time by op existed: reload to analyse again."));
    return;
  }
  const dev = doc.devices.find((x) => String(x.device) === String(deviceId)) || doc.devices[0];
  const stepCol = doc.step !== null && doc.step !== undefined;
  // legend entries only for the parts some device has
  const has = (k) => doc.devices.some((x) => (x.overlap || {})[k] > 0);
  // a collective group's peer wait and transfer (the whole capture, from /collectives)
  const joined = collectives && collectives.state === "joined";
  const split = new Map((joined ? collectives.groups || [] : []).filter((g) => String(g.device) === String(dev.device))
    .map((g) => [g.name, g]));
  const splitCell = (o) => {
    if (o.class !== "collective") return null;
    const g = split.get(o.name);
    if (!g) {
      const why = !collectives || collectives.state === "pending" ? "matching with the other hosts…"
        : collectives.state === "alone" ? "wait and transfer cannot be told apart without the other participants' profiles"
          : joined ? "not matched with the other participants" : (collectives.note || "");
      return h("div", { class: "pd-small pd-muted dop-split" }, why);
    }
    const all = Math.max(g.wait_ns + g.transfer_ns, 1);
    return h("div", { class: "pd-small dop-split", "data-wait": String(g.wait_ns) },
      h("span", { class: "dop-split-bar", "aria-hidden": "true" },
        h("span", { class: "dop-split-wait", style: { width: `${100 * g.wait_ns / all}%` } })),
      ` peer wait ${formatNs(g.wait_ns)} · transfer ${formatNs(g.transfer_ns)}`,
      stepCol ? " (whole capture)" : "");
  };
  container.append(h("div", { class: "dop-overlaps" }, doc.devices.map((x) => overlapLine(x, collectives))),
    h("div", { class: "pd-legend pd-small" },
      has("compute_ns") ? h("span", { class: "pd-legend-item" }, h("span", { class: "chip dop-compute" }), "compute") : null,
      has("copies_exposed_ns") ? h("span", { class: "pd-legend-item" }, h("span", { class: "chip dop-copy" }), "copies not under compute") : null,
      has("collectives_exposed_ns") ? h("span", { class: "pd-legend-item" }, h("span", { class: "chip dop-coll" }), "collectives not under compute") : null));
  const sk = dev.short_kernels || { calls: 0 };
  if (sk.calls) {
    const most = (sk.groups || [])[0];
    const warn = sk.share_of_busy === null || sk.share_of_busy === undefined || sk.share_of_busy >= SHORT_WARN_SHARE;
    container.append(h("div", { class: warn ? "dop-short" : "dop-short-minor pd-small pd-muted", id: "pd-short-kernels", role: "note" },
      h("b", {}, `Kernels shorter than the ${formatNs(doc.latency_ns)} launch latency: `),
      `${sk.calls} calls, ${formatNs(sk.total_ns)} (${pct(sk.share_of_busy)} of busy)`,
      most ? [" — mostly ", h("code", { class: "dop-short-name", title: most.name }, squeeze(most.name, 80, 200)),
        ` (${most.calls} calls${stepCol ? " in the whole trace" : ""}${most.host_op ? `, from ${most.host_op}` : ""}${most.annotation ? ` under ${most.annotation}` : ""})`] : null,
      sk.finding !== null && sk.finding !== undefined && onFinding ? [" · ",
        h("a", { href: "#", class: "pd-link", id: "pd-short-finding", onclick: (e) => { e.preventDefault(); onFinding(sk.finding); } },
          "launch-bound finding")] : null));
  }
  if (!dev.ops.length) {
    container.append(h("p", { class: "pd-muted" }, stepCol ? `No device ops launched by step ${doc.step} on ${dev.name}.` : `No device ops on ${dev.name}.`));
    return;
  }
  // a host op every row shares tells the rows nothing (XLA: the one program): said once
  const hostOps = new Set(dev.ops.map((o) => o.host_op || ""));
  const oneHost = dev.ops.length > 1 && hostOps.size === 1 ? [...hostOps][0] : null;
  const hostCol = oneHost === null;
  if (oneHost) {
    container.append(h("p", { class: "pd-small pd-muted", id: "pd-ops-one-host", title: oneHost },
      "Every op here was launched by ", h("code", {}, squeeze(oneHost, 60, 120)), "."));
  }
  // the roofline columns where the ops carry FLOP or byte figures (whole capture)
  const roofCol = dev.ops.some((o) => o.roofline && o.roofline.bound);
  const head = h("tr", {}, ["Op", "Class", "Calls", "Total", "Mean", "% busy", stepCol ? "% step" : null, roofCol ? "FLOP/s" : null, roofCol ? "Roofline" : null, hostCol ? "Host op" : null, "Annotation"]
    .filter((x) => x !== null).map((x) => h("th", { scope: "col", class: x === "Host op" ? "dop-text dop-host-h" : x === "Annotation" ? "dop-text" : null }, x)));
  const maxT = Math.max(1, ...dev.ops.map((o) => o.total_ns));
  const rows = dev.ops.map((o) => {
    const href = opHref ? opHref(o) : null;
    const name = [h("span", { class: "dop-barbox" }, h("span", { class: "ann-bar", style: { width: `${Math.max(1, 60 * o.total_ns / maxT)}px` } })),
      h("span", { class: "dop-name", title: o.name }, o.name.length > 200 ? squeeze(o.name, 200, 200) : o.name)];
    return h("tr", { class: "dop-row", "data-op": o.name, title: `${o.name}\nlongest: ${formatNs(o.longest.duration_ns)} at ${formatNs(o.longest.start_ns)}` +
        (o.longest.track ? ` on ${o.longest.track}` : "") + (o.category ? `\ncategory: ${o.category}` : "") +
        (o.short_calls ? `\n${o.short_calls} calls shorter than the launch latency` : "") },
    h("td", {}, href ? h("a", { class: "dop-open", href, target: "_blank", rel: "noopener",
      title: "Open the trace viewer at this op's longest instance" }, name) : name, splitCell(o)),
    h("td", { class: "pd-small" }, CLASS_LABEL[o.class] || o.class),
    h("td", { class: "pd-num" }, String(o.calls)),
    h("td", { class: "pd-num dop-total" }, formatNs(o.total_ns)),
    h("td", { class: "pd-num" }, formatNs(o.mean_ns)),
    h("td", { class: "pd-num" }, pct(o.share_of_busy)),
    stepCol ? h("td", { class: "pd-num" }, pct(o.share_of_step)) : null,
    roofCol ? h("td", { class: "pd-num dop-flops" }, flopRate(o.roofline)) : null,
    roofCol ? roofCell(o.roofline) : null,
    hostCol ? h("td", { class: "dop-host", title: o.host_op || "" }, squeeze(o.host_op || "", 40, 120)) : null,
    h("td", { class: "dop-ann", title: o.annotation || "" }, squeeze(o.annotation || "", 40, 120)));
  });
  if (dev.other) {
    rows.push(h("tr", { class: "dop-row dop-other" },
      h("td", {}, h("span", { class: "dop-barbox" }), `other (${dev.other.groups} groups)`), h("td", {}, ""),
      h("td", { class: "pd-num" }, String(dev.other.calls)), h("td", { class: "pd-num" }, formatNs(dev.other.total_ns)),
      h("td", {}, ""), h("td", { class: "pd-num" }, pct(dev.other.share_of_busy)), stepCol ? h("td", {}, "") : null,
      roofCol ? h("td", {}, "") : null, roofCol ? h("td", {}, "") : null,
      hostCol ? h("td", {}, "") : null, h("td", {}, "")));
  }
  container.append(h("table", { class: "dop-table", id: "pd-device-ops-table", "aria-label": `Device time by op on ${dev.name}` },
    h("thead", {}, head), h("tbody", {}, rows)));
}
