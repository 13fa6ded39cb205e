// TensorBoard's side of a plugin iframe: the message channel its plugin library speaks.
// The iframe posts "experimental.bootstrap" with a MessagePort to the TensorBoard page,
// which then sends JSON messages {type, id, payload, isReply} on it; every message is
// answered. "experimental.DataReloaded" comes on the reload button and on each
// auto-reload: the page lists the logdir again then.

export const DATA_RELOADED = "experimental.DataReloaded";

/** Calls `onReload()` whenever TensorBoard reloads its data. Returns false when the page
 *  is not inside TensorBoard (no parent window to talk to). */
export function onTensorBoardReload(onReload) {
  let parent;
  try { parent = window.parent !== window ? window.parent : null; } catch (e) { parent = null; }
  if (!parent || typeof MessageChannel === "undefined") return false;
  const channel = new MessageChannel();
  channel.port1.onmessage = (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch (e) { return; }
    if (!msg || msg.isReply) return;
    if (msg.type === DATA_RELOADED) {
      try { onReload(); } catch (e) { /* the page reports its own failures */ }
    }
    channel.port1.postMessage(JSON.stringify({ type: msg.type, id: msg.id, payload: null,
      error: null, isReply: true }));
  };
  try {
    parent.postMessage("experimental.bootstrap", window.location.origin, [channel.port2]);
  } catch (e) {
    return false;
  }
  return true;
}
