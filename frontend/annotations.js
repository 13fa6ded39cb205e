// Annotations panel: device time per user annotation as a collapsible, keyboard-navigable
// tree (role=tree). Scattered annotations (device work split into runs interleaved with
// other annotations) get a badge whose tooltip lists what they interleave with.
import { h } from "./dom.js";
import { formatNs, squeeze } from "./format.js";

/** Flat annotation list (with `path`) → tree [{key, ann, children}] in input order. */
export function buildTree(annotations) {
  const roots = [], byKey = new Map();
  const sorted = [...annotations].sort((a, b) => a.path.length - b.path.length);
  for (const a of sorted) {
    const key = a.path.join("/");
    const node = { key, ann: a, children: [] };
    byKey.set(key, node);
    const parent = byKey.get(a.path.slice(0, -1).join("/"));
    (a.path.length > 1 && parent ? parent.children : roots).push(node);
  }
  const order = (nodes) => {
    nodes.sort((x, y) => (y.ann.inclusive_ns || 0) - (x.ann.inclusive_ns || 0));
    nodes.forEach((n) => order(n.children));
  };
  order(roots);
  return roots;
}

/** Inclusive/exclusive time of an annotation for `step` ("" = whole trace). */
export function annTimes(ann, step) {
  if (step !== undefined && step !== null && step !== "") {
    const p = (ann.per_step || {})[String(step)];
    return p ? { inclusive_ns: p.inclusive_ns, exclusive_ns: p.exclusive_ns } : { inclusive_ns: 0, exclusive_ns: 0 };
  }
  return { inclusive_ns: ann.inclusive_ns, exclusive_ns: ann.exclusive_ns };
}

export function renderAnnotations(container, annotations, { step } = {}) {
  container.textContent = "";
  if (!annotations.length) {
    container.append(h("p", { class: "pd-muted" },
      "No user annotations found on the device ops (add torch_xla xp.Trace / jax.named_scope / record_function)."));
    return;
  }
  const roots = buildTree(annotations);
  const hasStep = step !== undefined && step !== null && step !== "";
  const maxT = Math.max(1, ...roots.map((n) => annTimes(n.ann, step).inclusive_ns || 0));
  const tree = h("div", { role: "tree", class: "ann-tree", "aria-label": "Device time by annotation" });
  const head = h("div", { class: "ann-row ann-head", "aria-hidden": "true" },
    h("span", {}, "Annotation"), h("span", {}, "Inclusive"), h("span", {}, "Exclusive"), h("span", {}, "Ops"));
  const rows = [];
  const addNode = (node, level, parentRow) => {
    const a = node.ann, t = annTimes(a, step);
    const whole = hasStep ? h("span", { class: "pd-muted pd-small" }, ` (${formatNs(a.inclusive_ns)})`) : null;
    const interleaved = (a.interleaved_with || []).join(", ");
    const badge = a.scattered ? h("span", { class: "pd-badge ann-scattered", tabindex: "-1",
      title: `Scattered: its device work runs in ${a.device_runs} separate pieces` +
        (interleaved ? `, interleaved with ${interleaved}` : "") + "." }, "scattered") : null;
    const twisty = h("span", { class: "ann-twisty", "aria-hidden": "true" }, node.children.length ? "▾" : "");
    const row = h("div", {
      role: "treeitem", class: "ann-row", tabindex: rows.length === 0 ? "0" : "-1",
      "aria-level": String(level), "data-path": node.key, "data-name": a.name,
      "data-scattered": a.scattered ? "1" : null,
      "aria-expanded": node.children.length ? "true" : null,
      title: squeeze(a.path.join(" › "), 200, 2000),
    },
    h("span", { class: "ann-name", style: { paddingLeft: `${(level - 1) * 16}px` } }, twisty,
      h("span", { class: "ann-bar", style: { width: `${Math.max(1, 60 * (t.inclusive_ns || 0) / maxT)}px` } }), squeeze(a.name, 80, 160), badge),
    h("span", { class: "ann-incl" }, formatNs(t.inclusive_ns), whole),
    h("span", { class: "ann-excl" }, formatNs(t.exclusive_ns)),
    h("span", { class: "ann-ops" }, String(a.ops ?? "")));
    row._children = [];
    row._parent = parentRow;
    if (parentRow) parentRow._children.push(row);
    rows.push(row);
    tree.append(row);
    node.children.forEach((c) => addNode(c, level + 1, row));
  };
  roots.forEach((n) => addNode(n, 1, null));

  const setVisible = (row, vis) => {
    for (const c of row._children) {
      c.hidden = !vis;
      setVisible(c, vis && c.getAttribute("aria-expanded") !== "false");
    }
  };
  const toggle = (row, open) => {
    if (!row._children.length) return;
    const now = row.getAttribute("aria-expanded") === "true";
    const next = open === undefined ? !now : open;
    row.setAttribute("aria-expanded", String(next));
    row.querySelector(".ann-twisty").textContent = next ? "▾" : "▸";
    setVisible(row, next);
  };
  const focusRow = (row) => {
    if (!row) return;
    for (const r of rows) r.tabIndex = -1;
    row.tabIndex = 0; row.focus();
  };
  tree.addEventListener("click", (e) => {
    const row = e.target.closest(".ann-row[role=treeitem]");
    if (row) { toggle(row); focusRow(row); }
  });
  tree.addEventListener("keydown", (e) => {
    const row = e.target.closest(".ann-row[role=treeitem]");
    if (!row) return;
    const vis = rows.filter((r) => !r.hidden);
    const i = vis.indexOf(row);
    if (e.key === "ArrowDown") focusRow(vis[i + 1]);
    else if (e.key === "ArrowUp") focusRow(vis[i - 1]);
    else if (e.key === "ArrowRight") { if (row.getAttribute("aria-expanded") === "false") toggle(row, true); else focusRow(row._children[0]); }
    else if (e.key === "ArrowLeft") { if (row.getAttribute("aria-expanded") === "true") toggle(row, false); else focusRow(row._parent); }
    else if (e.key === "Enter" || e.key === " ") toggle(row);
    else if (e.key === "Home") focusRow(vis[0]);
    else if (e.key === "End") focusRow(vis[vis.length - 1]);
    else return;
    e.preventDefault();
  });
  container.append(head, tree);
}
