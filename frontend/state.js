// Page selection ↔ URL hash: `#perfdiag&p.perfdiag.run=…&p.perfdiag.host=…`.
// Pure encode/decode plus read/write against the parent (TensorBoard) window when it is
// reachable (same origin), else our own window. A new selection is pushed (the browser's Back
// returns to the one before); filling a default in, zooming or panning replaces.

export const PLUGIN = "perfdiag";
// peak: the peak TFLOP/s the user gave MFU and the roofline (the CLI's --peak-tflops);
// capture: the capture file graph replays are aligned with
export const KEYS = ["run", "host", "span", "device", "step", "gap", "zoom", "base_run", "base_host", "base_span", "view", "baseline", "capture", "peak"];
const PREFIX = `p.${PLUGIN}.`;

/** Parse a location hash into our state object (only keys we know, strings). */
export function decodeHash(hash) {
  const out = {};
  const h = (hash || "").replace(/^#/, "");
  if (!h) return out;
  for (const part of h.split("&")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    const k = safeDecode(part.slice(0, i));
    if (!k.startsWith(PREFIX)) continue;
    const key = k.slice(PREFIX.length);
    if (!KEYS.includes(key)) continue;
    out[key] = safeDecode(part.slice(i + 1));
  }
  return out;
}

/** Build a hash (with leading '#') holding `state`, keeping other plugins' parts of `oldHash`. */
export function encodeHash(state, oldHash) {
  const h = (oldHash || "").replace(/^#/, "");
  const kept = [];
  h.split("&").filter(Boolean).forEach((part, i) => {
    if (i === 0 && !part.includes("=")) return;  // the active plugin's id: always ours here
    const k = safeDecode(part.split("=")[0]);
    if (k.startsWith(PREFIX)) return;
    kept.push(part);
  });
  const ours = [];
  for (const key of KEYS) {
    const v = state[key];
    if (v === undefined || v === null || v === "") continue;
    ours.push(`${PREFIX}${key}=${encodeURIComponent(String(v))}`);
  }
  return "#" + [PLUGIN, ...kept, ...ours].join("&");
}

function safeDecode(s) {
  try { return decodeURIComponent(s.replace(/\+/g, " ")); } catch (e) { return s; }
}

/** The window whose URL the user sees: TensorBoard's (parent) if reachable. */
export function urlWindow() {
  try {
    if (window.parent && window.parent !== window && window.parent.location.href) {
      return window.parent;
    }
  } catch (e) { /* cross-origin parent: fall back to our own window */ }
  return window;
}

export function readState() {
  const w = urlWindow();
  const s = decodeHash(w.location.hash);
  if (w !== window && Object.keys(s).length === 0) return decodeHash(window.location.hash);
  return s;
}

// the keys whose change is a new selection; zoom (pan, wheel) never is
const SELECTION = KEYS.filter((k) => k !== "zoom");

/** Whether going from `before` to `after` is a selection the browser's Back should undo:
 *  a key that had a value changes (another run, host, device, step or gap), or a run,
 *  host, step, gap or comparison is chosen; a device filled in by default is not. */
export function isNewSelection(before, after) {
  return SELECTION.some((k) => {
    const a = before[k] || "", b = after[k] || "";
    if (a === b) return false;
    return a !== "" || (k !== "device" && k !== "span" && before.run !== undefined && before.run !== "");
  });
}

export function writeState(state) {
  const w = urlWindow();
  const hash = encodeHash(state, w.location.hash);
  if (hash === w.location.hash) return;
  const push = isNewSelection(decodeHash(w.location.hash), state);
  const write = (win) => {
    const url = win.location.href.split("#")[0] + hash;
    if (push) win.history.pushState(win.history.state, "", url);
    else win.history.replaceState(win.history.state, "", url);
  };
  try {
    write(w);
  } catch (e) {
    write(window);
  }
}

/** Calls `fn` when the browser's Back or Forward changes our part of the URL. */
export function onHistory(fn) {
  const w = urlWindow();
  const on = () => fn(readState());
  w.addEventListener("popstate", on);
  if (w !== window) window.addEventListener("popstate", on);
}
