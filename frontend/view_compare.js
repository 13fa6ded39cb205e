// A comparison of two captures (before → after): the picker that starts one and the view
// that draws it from /compare.
// Methods of App (app.js), installed on its prototype: they share the selection's state
// (state, token, diag, the drawn elements) with the rest of the page.
import { h } from "./dom.js";
import { writeState } from "./state.js";
import { CompareRuns, renderPicker } from "./compare_runs.js";

export const CompareView = {
  togglePicker(button) {
    if (this.pickerEl.firstChild) { this.pickerEl.textContent = ""; button.setAttribute("aria-expanded", "false"); return; }
    button.setAttribute("aria-expanded", "true");
    renderPicker(this.pickerEl, this.runs, this.state, {
      onCompare: (base) => {
        const s = this.state;
        this.pickerEl.textContent = "";
        this.state = { run: s.run, host: s.host, span: s.span, device: s.device, ...base };
        this.buildSelectors(); this.show();
      },
      onCancel: () => { this.pickerEl.textContent = ""; button.setAttribute("aria-expanded", "false"); },
    });
  },

  /** Before (base_*) → after (the selection), from /compare; the URL keeps both. */
  async showCompare() {
    const token = this.beginSelection({ fresh: true });   // the comparison draws its own body
    const s = this.state;
    delete s.step; delete s.gap; delete s.zoom;
    writeState(s);
    delete this.root.dataset.loaded;
    this.setStatus("");
    this.diag = null;
    this.deviceSlot.textContent = "";
    this.compare.close();
    this.body.textContent = "";
    const name = (r, host, span) => `${r} · ${host}${span ? " · " + span : ""}`;
    const before = h("span", { id: "pd-cmp-before" }, name(s.base_run, s.base_host, s.base_span));
    const after = h("span", { id: "pd-cmp-after" }, name(s.run, s.host, s.span));
    this.body.append(h("div", { class: "pd-cmp-bar", role: "group", "aria-label": "Comparison" },
      h("b", {}, "Before: "), before, h("span", { class: "pd-cmp-arrow", "aria-hidden": "true" }, " → "),
      h("b", {}, "After: "), after,
      h("button", { class: "pd-button", id: "pd-compare-swap", title: "Swap before and after", onclick: () => {
        this.state = { run: s.base_run, host: s.base_host, span: s.base_span, base_run: s.run, base_host: s.host, base_span: s.span };
        this.buildSelectors(); this.show();
      } }, "⇄ Swap"),
      h("button", { class: "pd-link-btn", id: "pd-compare-close", onclick: () => {
        this.state = { run: s.run, host: s.host, span: s.span, device: s.device };
        this.buildSelectors(); this.show();
      } }, "Close comparison")));
    const slot = h("div", { id: "pd-compare-view" });
    this.body.append(slot);
    this.compareRuns = new CompareRuns(slot, {
      onOpenStep: (x) => { this.state = { run: x.run, host: x.host, span: x.span, step: x.step }; this.buildSelectors(); this.show(); },
    });
    const ok = await this.compareRuns.show({ ...this.params(), base_run: s.base_run, base_host: s.base_host, base_span: s.base_span || undefined });
    if (ok === null || token !== this.token) return null;
    // the step charts draw on the next frame (after layout): the view is loaded once they have
    await new Promise((done) => requestAnimationFrame(() => done()));
    if (token !== this.token) return null;
    if (ok) {
      before.textContent = this.compareRuns.data.before.label;
      after.textContent = this.compareRuns.data.after.label;
    }
    this.root.dataset.loaded = `${s.run}|${s.host}||compare-${ok ? "ok" : "error"}`;
    return ok;
  },
};
