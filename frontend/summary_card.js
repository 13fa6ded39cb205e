// The Diagnose view's summary card: headline, duty cycle, typical step, idle by cause and
// the top findings (peer wait ranked among them).
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { h, put } from "./dom.js";
import { causeColor, causeLabel, findingCost, formatNs, formatPct, fullTitle, gapLabel, gapRefs, plural, squeeze } from "./format.js";
import { stepStats } from "./steps_chart.js";
import { dutyWaitText } from "./collectives.js";
import { hasCollectives, headline } from "./headline.js";
import { renderEfficiency } from "./efficiency.js";
import { writeState } from "./state.js";

export const SummaryCard = {
  renderSummary() {
    const d = this.diag, el = this.summaryEl;
    const dutyDef = (d.definitions || {}).duty_cycle || "";
    const { count: nSteps, avg } = stepStats(d);
    if (!this.hasDeviceActivity()) {
      el.append(h("div", { class: "pd-no-device", id: "pd-no-device", role: "note" },
        h("b", {}, "No device activity in this trace."),
        ` It holds host work only (${(d.devices || []).length ? "the device was not profiled" : "a CPU-only run, or the device was not profiled"}), so there is no duty cycle and no idle gap to explain. `,
        "The host timeline below shows what each thread did; to diagnose the accelerator, profile with its activity on (",
        h("code", {}, "ProfilerActivity.CUDA"), " in PyTorch; a TPU/GPU backend for XLA)."));
    }
    // the duty cycle over the window its idle by cause adds up over (the steps, or the
    // capture): the figure compare and the CLI show; the device's own active span beside it
    // over the steps the steady state leaves start-up out (paid once per run)
    const steadyDuty = (w) => (w.steady_duty_cycle != null ? w.steady_duty_cycle : w.duty_cycle);
    const overSteps = (x) => x.steps_window && x.steps_window.duty_cycle != null && x.steps_window.window_ns !== x.window_ns;
    const devRows = d.devices.filter((x) => x.ops > 0).map((x) => {
      const wait = dutyWaitText(this.collectives(), x.id);
      return h("div", { class: "pd-stat", title: dutyDef },
        h("span", { class: "pd-stat-value pd-duty" }, formatPct(overSteps(x) ? steadyDuty(x.steps_window) : x.duty_cycle)),
        h("span", { class: "pd-stat-label" }, overSteps(x)
          ? `${x.name} duty cycle over ${d.step_source === "whole_trace" ? "the capture" : x.steps_window.past_steps ? "the steps and its work outside them" : "the steps"}${x.steps_window.startup_ns ? ` leaving out ${formatNs(x.steps_window.startup_ns)} of start-up` : ""} (${formatPct(x.duty_cycle)} over its active span) `
          : `${x.name} duty cycle (its active span) `, h("abbr", { title: dutyDef, class: "pd-help" }, "?")),
        wait ? h("span", { class: "pd-stat-label pd-duty-wait", "data-device": String(x.id),
          style: { color: causeColor("peer_wait") } }, `— ${wait}`) : null);
    });
    const idle = Object.entries(this.device().idle_by_cause_ns || {}).sort((a, b) => b[1] - a[1]);
    const findings = [...(d.findings || [])].sort((a, b) => (b.time_lost_ns_per_step || 0) - (a.time_lost_ns_per_step || 0));
    // the largest loss leads: peer wait, start-up or any one cause, whichever costs most
    const dev = this.device(), coll = this.collectives();
    // with collectives, the largest loss waits for their answer: a headline said before it
    // would change under the reader's eyes ("3.6 points idle" → "77 points waiting")
    const waiting = hasCollectives(d) && (!coll || coll.state === "pending");
    const hl = headline(dev, coll, nSteps, { duty: overSteps(dev) ? dev.steps_window.duty_cycle : dev.duty_cycle, waiting,
      typicalNs: d.typical_step_ns });
    const peer = hl && (hl.loss && hl.loss.kind === "peer_wait" ? hl.loss : null);
    const top = findings.filter((f) => f.top !== false).slice(0, 6).map((f) => this.findingItem(f));
    if (peer) {   // busy time, so no finding of the server's: listed where its size ranks it
      const at = findings.filter((f) => f.top !== false).slice(0, 6).findIndex((f) => (f.time_lost_ns_per_step || 0) < peer.per_step_ns);
      top.splice(at < 0 ? top.length : at, 0, this.peerWaitItem(peer, coll));
    }
    // start-up costs no step but is what such a capture mostly holds: shown after them
    top.push(...findings.filter((f) => f.kind === "startup").slice(0, 2).map((f) => this.findingItem(f)));
    put(el,
      hl ? h("p", { class: "pd-headline", id: "pd-headline", "data-loss": hl.loss ? hl.loss.kind : "" },
        h("b", {}, `${dev.name}: `), hl.text) : null,
      h("div", { class: "pd-stats" }, devRows,
        // the one step time of every face (definitions.typical_step): the CLI, check,
        // compare and MCP say the same figure; the steady state leaves the steps that hold
        // start-up out (paid once per run)
        h("div", { class: "pd-stat", title: (d.definitions || {}).typical_step || "" },
          h("span", { class: "pd-stat-value pd-typical-step" }, formatNs(d.typical_step_ns ?? d.steady_step_ns ?? avg)),
          h("span", { class: "pd-stat-label", title: [(d.definitions || {}).typical_step, d.step_marker ? `each step marked by ${d.step_marker}` : ((d.definitions || {}).steps || "")].filter(Boolean).join("\n") },
            `typical step time (${plural(nSteps, "step")}, from ${d.step_source || "?"}${d.steady_step_ns != null
              ? `; leaving out start-up in step ${(d.startup_steps || []).join(", ")}, ${formatNs(avg)} with it` : ""}) `,
            h("abbr", { title: (d.definitions || {}).typical_step || "", class: "pd-help" }, "?")))),
      h("h3", {}, "Idle time by cause ", h("abbr", { title: (d.definitions || {}).causes || "", class: "pd-help" }, "?")),
      h("ul", { class: "pd-idle" }, idle.length ? idle.map(([c, ns]) => h("li", {},
        h("span", { class: "chip", style: { background: causeColor(c) } }), `${causeLabel(c)}: `, h("b", {}, formatNs(ns)))) :
        h("li", { class: "pd-muted" }, this.hasDeviceActivity() ? "No idle gaps above the threshold." : "None: no device activity.")),
      h("h3", {}, "Top findings"),
      h("ol", { class: "pd-findings" }, top),
      h("div", { class: "pd-small pd-muted" }, findings.some((f) => f.top === false && f.kind !== "startup") ?
        `${findings.filter((f) => f.top === false && f.kind !== "startup").length} more finding(s) under 1 % of a step not shown.` : ""));
    renderEfficiency(el, d, { deviceId: this.device().id ?? 0, step: this.state.step, coll: this.collectives(),
      // another capture is another diagnosis: the page is drawn again from its answers
      onCapture: (v) => { this.state = { ...this.state, capture: v || undefined, gap: undefined, zoom: undefined }; writeState(this.state); this.show(); },
      // a peak of the user's: every figure of the capture is asked for again against it
      peak: this.state.peak || "", onPeak: (v) => { this.state.peak = v; this.loadDiagnosis(); } });
    const warnings = (d.warnings || []).filter((w) => this.hasDeviceActivity() || !String(w).startsWith("no device activity"));
    if (warnings.length) el.append(h("ul", { class: "pd-warnings" }, warnings.map((w) => h("li", {}, squeeze(w, 80, 500)))));
  },

  findingItem(f) {
    const d = this.diag;
    return h("li", { class: "pd-finding", "data-finding": String((d.findings || []).indexOf(f)) },
      h("div", {}, h("b", { title: fullTitle(f.title, 300) }, squeeze(f.title, 80, 300)), " ", h("span", { class: "pd-badge" }, findingCost(f)),
        f.confidence ? h("span", { class: "pd-muted pd-small" }, ` · ${f.confidence} confidence`) : null),
      h("div", { class: "pd-small" }, squeeze(f.detail)),
      f.fix ? h("div", { class: "pd-fix" }, h("b", {}, "Fix: "), squeeze(f.fix)) : null,
      (f.evidence && f.evidence.gaps || []).length ? h("div", { class: "pd-small" }, "Gaps: ",
        gapRefs(f.evidence).slice(0, 5).map((g, i) => [i ? ", " : "", h("a", { href: "#", class: "pd-gap-link", "data-gap": g.id,
          title: `gap ${g.id}`, onclick: (ev) => { ev.preventDefault(); this.selectGap(g.id); } },
          gapLabel(g, (d.devices || []).filter((x) => x.ops > 0).length > 1))]),
        f.evidence.gaps.length > 5 ? ` and ${f.evidence.gaps.length - 5} more` : "") : null,
      (f.chain || []).length ? h("details", { class: "pd-small" }, h("summary", {}, "Call chain"),
        squeeze(f.chain.join(" › "))) : null);
  },

  /** Peer wait as a finding: busy time inside collectives waiting for the last participant;
   *  what to change is the straggler's own loss. */
  peerWaitItem(loss, coll) {
    const st = ((coll && coll.stragglers) || [])[0];
    const who = loss.who || (st && st.host) || null;
    const open = (host) => h("button", { class: "pd-link-btn", "data-host": host, title: `Open ${host}`, onclick: () => {
      this.state = { run: this.state.run, host }; this.buildSelectors(); this.show();
    } }, host);
    const why = st && st.host === who && st.cause ? ` (late because of ${causeLabel(st.cause).toLowerCase()}${st.culprit ? `, ${squeeze(st.culprit, 80, 200)}` : ""})` : "";
    return h("li", { class: "pd-finding pd-finding-peer", id: "pd-finding-peer-wait" },
      h("div", {}, h("b", {}, `Waiting for ${who || "peers"}${loss.where ? ` at ${loss.where}` : ""}: busy time spent until the last participant arrives`), " ",
        h("span", { class: "pd-badge" }, `≈ ${formatNs(loss.per_step_ns)} lost per step`)),
      h("div", { class: "pd-small" }, `${formatNs(loss.ns)} over the capture inside collectives; see Collectives below.`),
      h("div", { class: "pd-fix" }, h("b", {}, "Fix: "), who && who !== this.state.host
        ? ["make ", open(who), ` arrive on time${why}: open it and fix its largest loss; this host then gains about that much per step.`]
        : `balance the work between the participants, or overlap the collective with compute${why}.`));
  },
};
