// The headline of a host's page: the largest loss first. Losses are compared per step, over
// the window the figures use: the busy time spent waiting for peers at collectives (from
// the Collectives answer), and each cause of idle time (whatever causes the server names,
// start-up included). Pure: no DOM, importable in any page.
import { causeLabel, formatNs, formatPct } from "./format.js";

/** Points (of the window, 0–100) as the page writes them: "77", "4.5". */
export function pointsText(p) {
  return p.toFixed(p < 10 ? 1 : 0);
}

/**
 * Every loss of device `dev` (a diagnosis device row), largest first:
 * [{kind: "peer_wait" | <cause>, ns, per_step_ns, once_ns, points, who, where}].
 * The split per step / once is the server's (idle_per_step_ns: the mean over the typical
 * steps, never above the step; idle_once_ns: the rest), the peer wait per step the
 * Collectives answer's own figure (wait_per_step_ns): the page divides nothing itself.
 * @param coll the Collectives answer for this selection, or null
 * @param steps how many steps the window holds (answers without the split only)
 */
export function lossesOf(dev, coll, steps) {
  const w = (dev && dev.steps_window) || {};
  const window = w.window_ns || (dev && dev.window_ns) || 0;
  const n = Math.max(1, steps || 0);
  const out = [];
  const pts = (ns) => (window > 0 ? Math.min(100, (100 * ns) / window) : null);
  const split = dev && dev.idle_per_step_ns !== undefined;
  const perStep = (dev && dev.idle_per_step_ns) || {}, once = (dev && dev.idle_once_ns) || {};
  for (const [cause, ns] of Object.entries((dev && dev.idle_by_cause_ns) || {})) {
    if (ns > 0) {
      out.push({ kind: cause, ns, per_step_ns: split ? perStep[cause] || 0 : ns / n,
        once_ns: split ? once[cause] || 0 : 0, points: pts(ns) });
    }
  }
  const c = coll && coll.state === "joined" ? (coll.devices || []).find((x) => String(x.id) === String(dev && dev.id)) : null;
  if (c && c.wait_ns > 0) {
    const points = c.wait_points !== null && c.wait_points !== undefined ? Math.min(100, c.wait_points) : pts(c.wait_ns);
    const per = c.wait_per_step_ns !== undefined && c.wait_per_step_ns !== null ? c.wait_per_step_ns : c.wait_ns / n;
    out.push({ kind: "peer_wait", ns: c.wait_ns, per_step_ns: per, once_ns: 0, points, who: c.waited_for || null, where: c.waited_at || null });
  }
  return out.sort((a, b) => b.ns - a.ns);
}

/** "77 points of it waiting for host2 at all-reduce" / "74 points idle in data loading /
 *  input": the loss in the words of the duty cycle beside it. */
export function lossText(loss) {
  const p = loss.points === null || loss.points === undefined ? null : pointsText(loss.points);
  if (loss.kind === "peer_wait") {
    const who = `waiting for ${loss.who || "peers"}${loss.where ? ` at ${loss.where}` : ""}`;
    return p === null ? `${formatNs(loss.per_step_ns)} per step ${who}` : `${p} points of it ${who}`;
  }
  const what = causeLabel(loss.kind).toLowerCase();
  if (p === null && loss.kind === "startup") return `${formatNs(loss.ns)} idle in ${what}`;
  return p === null ? `${formatNs(loss.per_step_ns)} per step idle in ${what}` : `${p} points idle in ${what}`;
}

/** What a loss costs, in the server's split: "2.85 ms per step", "3146 ms once",
 *  "19.9 ms per step, 825 ms once"; start-up is paid once per run, never a rate. */
export function costText(loss, stepNs = null) {
  if (loss.kind === "startup") return `${formatNs(loss.ns)} once`;
  const per = loss.per_step_ns > 0 ? `${formatNs(loss.per_step_ns)} ${stepNs ? `of its ${formatNs(stepNs)} ` : ""}per step` : "";
  // a once part that is a trace of the rate ("3.62 s per step, 299 µs once") is not said
  const once = loss.once_ns > 0 && !(loss.once_ns < 1e-3 * loss.per_step_ns) ? `${formatNs(loss.once_ns)} once` : "";
  return [per, once].filter(Boolean).join(", ") || `${formatNs(loss.ns)} once`;
}

/**
 * The page's first line for device `dev`: {duty, loss, text} — "duty 95% — 77 points of it
 * waiting for host2 at all-reduce (31.0 ms per step)"; null without device activity.
 * `typicalNs`: the host's typical step (a device window per step unlike it is named).
 * A loss under `minPoints` of the window is not called the largest (a busy device).
 * `waiting`: the Collectives answer this device's losses need is not in yet — the line
 * then says the duty cycle alone rather than a largest loss that would change.
 */
export function headline(dev, coll, steps, { duty, minPoints = 1, waiting = false, typicalNs = null } = {}) {
  if (!dev || !(dev.ops > 0)) return null;
  const d = duty === undefined ? dev.duty_cycle : duty;
  const head = `duty ${formatPct(d)}`;
  if (waiting) return { duty: d, loss: null, text: `${head} — its largest loss once the collectives are matched…` };
  const losses = lossesOf(dev, coll, steps);
  const top = losses[0] && (losses[0].points === null || losses[0].points >= minPoints) ? losses[0] : null;
  if (!top) return { duty: d, loss: null, text: `${head} — no loss of a point or more` };
  return { duty: d, loss: top, text: `${head} — ${lossText(top)} (${costText(top, ownStep(dev, typicalNs))})` };
}

/** The device's own window per typical step where it is not the host's typical step
 *  (a device running behind its host): what its loss per step is a part of, said so that
 *  "2.85 ms of its 6.57 ms per step" reads as the points beside it; null where the two
 *  agree within 3 %. */
export function ownStep(dev, typicalNs) {
  const w = dev && dev.step_window_ns;
  if (!w || !typicalNs) return null;
  return Math.abs(w - typicalNs) > 0.03 * typicalNs ? w : null;
}

/**
 * The largest loss of one row of the Hosts view (a /hosts row) when it is peer wait, which
 * no finding names (busy time): "waiting for host2 at all-reduce, 31.0 ms per step"; null
 * when an idle cause costs more (the row's top finding then says it).
 */
export function hostPeerLoss(r) {
  const wait = (r && r.peer_wait_ns) || 0;
  if (!(wait > 0)) return null;
  const idle = Math.max(0, ...Object.values(r.step_idle_ns || {}));
  if (wait < idle) return null;
  const top = (o, v) => Object.entries(o || {}).sort((a, b) => v(b[1]) - v(a[1]))[0];
  const who = top(r.waited_for, (x) => x), op = top(r.wait_by_op, (x) => x.wait_ns || 0);
  return `waiting for ${who ? who[0] : "peers"}${op && op[1].wait_ns > 0 ? ` at ${op[0]}` : ""}, ${formatNs(wait)} per step`;
}

/** Whether diagnosis `d` has collective ops, so that its headline needs the Collectives
 *  answer (the peer wait inside them may be its largest loss). */
export function hasCollectives(d) {
  const devs = ((d && d.device_ops) || {}).devices || [];
  return devs.some((x) => (x.ops || []).some((o) => o.class === "collective")) ||
    ((d && d.devices) || []).some((x) => ((x.idle_by_cause_ns || {}).collective_wait || 0) > 0);
}
