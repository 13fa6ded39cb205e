// A pod's per-host summary: the view a run of many hosts opens on.
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { h } from "./dom.js";
import { writeState } from "./state.js";

/** Runs with this many hosts or more open on the per-host summary (a pod), not on one
 *  host: every run of several hosts, as README.md and docs/pods.md say. */
export const POD_HOSTS = 2;
/** The host selector's value for that summary. */
export const ALL_HOSTS = "*";

export const PodView = {
  showPod() {
    this.beginSelection({ fresh: true });    // a diagnosis still loading must not replace this view
    const s = this.state;
    const run = this.runs.find((x) => x.run === s.run);
    writeState(s);
    this.setStatus("");
    this.diag = null;
    this.deviceSlot.textContent = "";
    this.body.textContent = "";
    this.body.append(h("p", { class: "pd-muted pd-pod-hint" },
      `${run.hosts.length} hosts. Stragglers are listed first; pick a host to see its steps, gaps and timeline.`));
    this.compare.show(s.run, run.hosts.map((x) => x.name), "", { pinned: true });
    this.root.dataset.loaded = `${s.run}|${ALL_HOSTS}||pod`;
    return true;
  },
};
