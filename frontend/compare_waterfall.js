// The MFU waterfall before → after of one device pair in "Compare with…": the two
// waterfalls as stacked bars on one 100-point scale (the single run's part colours and
// labels, efficiency.js), and the parts that moved a point or more (the comparison's
// delta.waterfall_moved: MFU first, then by the size of the move). A side without FLOP
// figures is named with its reason (figures.missing). Everything comes from the JSON.
import { h, put } from "./dom.js";
import { partColor, partLabel } from "./efficiency.js";
import { pageAdvice } from "./format.js";

/** "+5.9 pts", "−22.3 pts", "0 pts": a move in points. */
export function signedPts(v) {
  if (!Number.isFinite(v) || Math.abs(v) < 0.05) return "0 pts";
  return `${v > 0 ? "+" : "−"}${Math.abs(v).toFixed(1)} pts`;
}

/** Better or worse: the achieved MFU is better higher, every other part (time lost to
 *  peak) better lower. */
function moveClass(part, v) {
  if (!Number.isFinite(v) || Math.abs(v) < 0.05) return "";
  return (part === "mfu") === (v > 0) ? "pd-better" : "pd-worse";
}

function bar(w, tag, title) {
  const parts = Object.entries(w || {}).filter(([, v]) => Number.isFinite(v) && v > 0);
  return h("div", { class: "pd-cmp-wf-row", "data-side": tag },
    h("span", { class: "pd-cmp-wf-tag" }, tag === "before" ? "Before" : "After"),
    h("div", { class: "dop-stack pd-cmp-wf-stack", role: "img", "data-side": tag,
      "aria-label": `${title}: ${parts.map(([k, v]) => `${partLabel(k)} ${v.toFixed(1)}`).join(", ")}` },
    parts.map(([k, v]) => h("span", { class: "dop-part pd-wf-part", "data-part": k,
      style: { width: `${v}%`, background: partColor(k) }, title: `${partLabel(k)}: ${v.toFixed(2)} points` }))),
    h("span", { class: "pd-cmp-wf-mfu" }, `MFU ${(w.mfu || 0).toFixed(1)}%`));
}

/** Parts under this many points on both sides are left out of the legend (their
 *  segments are slivers; a segment's hover names it). */
const LEGEND_MIN = 1;

/** The legend: the parts either side has a point or more of, largest first. */
function legend(a, b) {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])]
    .filter((k) => Math.max(a[k] || 0, b[k] || 0) >= LEGEND_MIN)
    .sort((x, y) => Math.max(b[y] || 0, a[y] || 0) - Math.max(b[x] || 0, a[x] || 0));
  return h("ul", { class: "pd-idle pd-cmp-wf-legend pd-small" }, keys.map((k) =>
    h("li", {}, h("span", { class: "chip", style: { background: partColor(k) } }), partLabel(k))));
}

/** The card's content for one device pair's step set (typical_step or per_step), or null
 *  when neither side is there. */
export function waterfallCompare(set, deviceName, { where = "steps", definition = "", labels = {} } = {}) {
  const a = set.before, b = set.after;
  if (!a || !b) return null;
  const head = h("h3", {}, "What the busy time achieves: MFU waterfall before → after ",
    h("abbr", { class: "pd-help", title: definition }, "?"));
  const box = h("div", { class: "pd-cmp-efficiency", "data-device": deviceName }, head);
  if (!a.waterfall || !b.waterfall) {
    // say which side has no figures and why, never an empty card
    const sides = [["before", a], ["after", b]].filter(([, f]) => !f.waterfall);
    put(box, h("p", { class: "pd-muted pd-small pd-cmp-wf-missing" },
      `No MFU waterfall to compare on ${deviceName}: `,
      sides.map(([tag, f], i) => [i ? "; " : "", "the ", h("b", {}, tag), labels[tag] ? ` run (${labels[tag]})` : " run",
        " has no FLOP figures — ", h("span", { "data-side": tag, class: "pd-cmp-wf-why" }, pageAdvice(f.missing) || "no FLOP figures or no peak for these steps")]),
      sides.length === 1 ? `. The ${sides[0][0] === "before" ? "after" : "before"} run's MFU is in the table above.` : "."));
    return box;
  }
  const moved = (set.delta && set.delta.waterfall_moved) || [];
  put(box, h("p", { class: "pd-small pd-muted" }, `${deviceName}'s time at peak over its ${where}, in points adding up to 100:`),
    h("div", { class: "pd-cmp-wf-bars" }, bar(a.waterfall, "before", "Before"), bar(b.waterfall, "after", "After")),
    legend(a.waterfall, b.waterfall),
    h("table", { class: "pd-cmp-table pd-cmp-wf-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Part (points of the time at peak)"), h("th", { scope: "col", class: "pd-num" }, "Before"),
        h("th", { scope: "col", class: "pd-num" }, "After"), h("th", { scope: "col", class: "pd-num" }, "Change"))),
      h("tbody", {}, moved.map((r) => h("tr", { "data-part": r.part, "data-delta": String(r.delta) },
        h("th", { scope: "row" }, h("span", { class: "chip", style: { background: partColor(r.part) } }), partLabel(r.part)),
        h("td", { class: "pd-num" }, r.before.toFixed(1)), h("td", { class: "pd-num" }, r.after.toFixed(1)),
        h("td", { class: `pd-num pd-delta ${moveClass(r.part, r.delta)}` }, signedPts(r.delta)))))),
    moved.length <= 1 ? h("p", { class: "pd-muted pd-small" }, "No other part moved by a point or more.") : null);
  const notes = [["before", a], ["after", b]].filter(([, f]) => f.missing);
  if (notes.length) {
    put(box, h("p", { class: "pd-muted pd-small" }, notes.map(([tag, f], i) => [i ? "; " : "", `${tag}: ${pageAdvice(f.missing)}`])));
  }
  return box;
}
