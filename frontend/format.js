// Pure formatting helpers and the cause palette (importable in any browser page).

export const CAUSE_LABELS = {
  host_sync: "Host sync / device→host read",
  compilation: "Compilation",
  h2d_transfer: "Host→device transfer",
  data_loading: "Data loading / input",
  host_compute: "Host compute between launches",
  launch_overhead: "Kernel-launch overhead",
  collective_wait: "Collective wait",
  untraced: "Untraced (host idle or not profiled)",
  device_wait: "Device-side wait (dependency or queue)",
  allocator: "Memory allocator",
  graph_capture: "CUDA-graph capture",
  runtime_call: "Other runtime call",
  startup: "Start-up (once per run)",
  other_idle: "Other idle (short gaps / no device activity)",
  busy: "Busy",
  host_step: "Host step (no device activity)",
  // not idle: busy time inside collectives spent waiting for the last participant (GUIDE §4)
  peer_wait: "Peer wait at collectives (busy, waiting for the last participant)",
  device_compute: "Device compute (more work than its peers)",
};

export const CAUSE_COLORS = {
  host_sync: "#d62728",
  compilation: "#ff7f0e",
  h2d_transfer: "#8c8d2b",
  data_loading: "#e7ba52",
  host_compute: "#9467bd",
  launch_overhead: "#7f7f7f",
  collective_wait: "#17becf",
  untraced: "#b0b0b0",
  device_wait: "#1f77b4",
  allocator: "#8c564b",
  graph_capture: "#e377c2",
  runtime_call: "#bcbd22",
  startup: "#0b5d4e",
  other_idle: "#dcdcdc",
  busy: "#2ca02c",
  host_step: "#9ecae1",
  peer_wait: "#5254a3",
  device_compute: "#31a354",
};

/** A finding's cost on its badge: a rate per step for a recurring cost only; a one-time
 *  cost (start-up, a warm-up, one step's) and time outside every step as a total. */
export function findingCost(f) {
  if (f.one_time || f.once) return `${formatNs(f.time_lost_ns)} lost once`;
  if (!f.time_lost_ns_per_step && f.outside_steps_ns) return `${formatNs(f.time_lost_ns)} lost outside the steps`;
  return `≈ ${formatNs(f.time_lost_ns_per_step)} lost per step`;
}

export function causeLabel(cause) {
  return CAUSE_LABELS[cause] || String(cause);
}

export function causeColor(cause) {
  return CAUSE_COLORS[cause] || "#999999";
}

/** Nanoseconds → text by the one unit rule of every face (tb_perfdiag/units.py writes the
 *  same): whole ns below 1 µs, µs below 1 ms, ms below 1 s, s above, three significant
 *  digits: 1234567 → "1.23 ms", 3379400000 → "3.38 s" (never "3379 ms"). */
export function formatNs(ns) {
  if (ns === null || ns === undefined || Number.isNaN(Number(ns))) return "–";
  const v = Number(ns);
  const a = Math.abs(v);
  const units = [[1e9, 1e9, "s"], [1e6, 1e6, "ms"], [1e3, 1e3, "µs"]];
  for (const [at, scale, unit] of units) {
    // what rounds up to a thousand of the smaller unit is written in this one
    if (a >= at * 0.9995) return `${sig3(v / scale)} ${unit}`;
  }
  return `${v.toFixed(0)} ns`;      // whole nanoseconds: never "0.00 ns"
}

/** A wait: "none" where it is zero (a straggler waits for no one), never "0 ns". */
export function formatWait(ns) {
  return Number(ns) === 0 ? "none" : formatNs(ns);
}

/** "3 steps", "1 step". */
export function plural(n, word, many = word + "s") {
  return `${n} ${n === 1 ? word : many}`;
}

/** A thread lane's label with the name the framework gave the thread first, then its id:
 *  "thread 31337 (python)" → "python · 31337", "tf_numa_-1_Eigen/-2230…" →
 *  "tf_numa_-1_Eigen · -2230…" (a narrow gutter then cuts the id, not the name). */
export function laneText(label) {
  const s = String(label ?? "");
  const at = s.lastIndexOf(" · ");
  const head = at >= 0 ? s.slice(0, at + 3) : "", tail = at >= 0 ? s.slice(at + 3) : s;
  let m = /^thread (\d+) \((.+)\)$/.exec(tail);
  if (m) return `${head}${m[2]} · ${m[1]}`;
  m = /^(.*[^\d\s/-].*?)\/(-?\d{3,})$/.exec(tail);
  if (m) return `${head}${m[1]} · ${m[2]}`;
  return s;
}

function sig3(x) {
  // three digits of the value as rounded: 9.999 is "10.0", never "10.00"
  for (const places of [2, 1]) {
    const t = x.toFixed(places);
    if (Math.abs(Number(t)) < 10 ** (3 - places)) return t;
  }
  return x.toFixed(0);
}

/** 0.0117 → "1.2%". */
export function formatPct(frac) {
  if (frac === null || frac === undefined || Number.isNaN(Number(frac))) return "–";
  const p = Number(frac) * 100, a = Math.abs(p);
  if (a > 0 && a < 0.05) return p > 0 ? "<0.1%" : "−<0.1%";    // never "0.0%" beside "0%"
  return `${a >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)}%`;
}

const SI = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

/** A count or rate with an SI prefix, three significant digits: (4.665e12, "FLOP") →
 *  "4.67 TFLOP" — what render/efficiency.py `si` writes (never "8.49e+12 FLOP/s"). */
export function formatSi(x, unit = "") {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return "–";
  let v = Number(x), pre = "";
  for (const [scale, p] of SI) {
    if (Math.abs(v) >= scale * 0.9995) { v /= scale; pre = p; break; }
  }
  const a = Math.abs(v);
  return `${v.toFixed(a >= 99.95 ? 0 : a >= 9.995 ? 1 : 2)} ${pre}${unit}`;
}

/** An MFU or a share of the roofline: "27.9%", "2.85%", "0.012%", "<0.001%" — what
 *  render/efficiency.py `pct` writes (never "0.000%" or an exponent). */
export function formatShare(frac) {
  if (frac === null || frac === undefined || !Number.isFinite(Number(frac))) return "–";
  const p = 100 * Number(frac), a = Math.abs(p);
  if (a === 0) return "0%";
  if (a >= 9.995) return `${p.toFixed(1)}%`;
  if (a >= 0.9995) return `${p.toFixed(2)}%`;
  if (a >= 0.001) return `${Number(p.toPrecision(2))}%`;
  return "<0.001%";
}

/** Where a peak comes from, in words: "datasheet:V100 SXM2" → "V100 SXM2 datasheet". */
export function peakSourceText(src) {
  const s = String(src || "");
  if (s.startsWith("datasheet:")) return `${s.slice("datasheet:".length)} datasheet`;
  return { trace: "from the trace", option: "the peak you entered" }[s] || s;
}

/** The analysis' advice as the page gives it: the CLI's --peak-tflops flag is the page's
 *  "Peak TFLOP/s" field (in "What the busy time achieves"). */
export function pageAdvice(text) {
  return String(text ?? "")
    .replace(/\(give the peak with --peak-tflops\)/g, "(enter it in the Peak TFLOP/s field under “What the busy time achieves”)")
    .replace(/\(check --peak-tflops\)/g, "(check the Peak TFLOP/s field)")
    .replace(/--peak-tflops/g, "the Peak TFLOP/s field");
}

/** Long text cut to `n` characters with an ellipsis (names can be 100 KB long). */
export function cut(text, n = 160) {
  const s = String(text ?? "");
  return s.length <= n ? s : s.slice(0, n - 1) + "…";
}

/** Attributes for a cut name: the full name on hover (itself bounded). */
export function fullTitle(text, n = 160) {
  const s = String(text ?? "");
  return s.length <= n ? undefined : cut(s, 4000);
}

/** A run/host/span name in a <select>: cut, whole in the tooltip. */
export function optionText(text) {
  return cut(text, 120);
}

/** Prose that may quote huge names: every run of over `word` characters without a space
 *  is cut, then the whole to `total` characters. */
export function squeeze(text, word = 80, total = 2000) {
  const s = String(text ?? "").replace(new RegExp(`\\S{${word + 1},}`, "g"), (w) => w.slice(0, word - 1) + "…");
  return cut(s, total);
}

/** A finding's cited gaps as readers name them: {id, duration_ns, step, device}; the id is
 * what the page links with.  Results without gap_refs give ids alone. */
export function gapRefs(evidence) {
  const ids = (evidence && evidence.gaps) || [];
  const refs = (evidence && evidence.gap_refs) || [];
  return ids.map((id, i) => refs[i] && refs[i].id === id ? refs[i] : { id, duration_ns: null, step: null, device: null });
}

/** Where a gap lies, as the gap list says it: "in step 41", "before the first step" or
 * "after the last step" (its outside field, when it is in no step). */
export function stepPlace(g) {
  if (g.step !== null && g.step !== undefined) return `in step ${g.step}`;
  return g.outside === "after_last_step" ? "after the last step" : "before the first step";
}

/** "8.6 ms in step 41" (with the device when several have gaps); never an internal id
 * unless nothing else is known. */
export function gapLabel(ref, withDevice = false) {
  if (ref.duration_ns === null || ref.duration_ns === undefined) return `gap ${ref.id}`;
  const where = stepPlace(ref);
  return `${formatNs(ref.duration_ns)} ${where}${withDevice && ref.device ? ` on ${ref.device}` : ""}`;
}
