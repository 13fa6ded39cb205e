// JSON fetches relative to this module's folder (= /data/plugin/perfdiag/ under any path prefix).

export const BASE = new URL("./", import.meta.url);
/** TensorBoard's root URL (handles --path_prefix): BASE minus "data/plugin/perfdiag/". */
export const TB_ROOT = new URL("../../../", BASE);

export function routeUrl(route, params) {
  const u = new URL(route, BASE);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, String(v));
  }
  return u;
}

/** Returns {ok, status, body}; never throws for HTTP errors, only for network failures. */
export async function getJSON(route, params, init) {
  const res = await fetch(routeUrl(route, params), init);
  let body;
  try { body = await res.json(); } catch (e) { body = { error: `bad response (HTTP ${res.status})` }; }
  return { ok: res.ok, status: res.status, body };
}
