// Entry point loaded by TensorBoard's plugin iframe: `import {render} from "index.js"; render()`.
import { App } from "./app.js";

function addStyle() {
  if (document.querySelector("link[data-perfdiag]")) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = new URL("./style.css", import.meta.url).href;
  link.setAttribute("data-perfdiag", "");
  document.head.appendChild(link);
}

function followTensorBoardTheme() {
  let pb;
  try { pb = window.parent !== window ? window.parent.document.body : null; } catch (e) { pb = null; }
  if (!pb) return;
  const sync = () => {
    document.body.classList.toggle("dark-mode", pb.classList.contains("dark-mode"));
    document.body.classList.toggle("tb-light", !pb.classList.contains("dark-mode"));
  };
  sync();
  new MutationObserver(sync).observe(pb, { attributes: true, attributeFilter: ["class"] });
}

export async function render() {
  addStyle();
  followTensorBoardTheme();
  let root = document.getElementById("perfdiag-root");
  if (!root) {
    root = document.createElement("div");
    root.id = "perfdiag-root";
    document.body.appendChild(root);
  }
  const app = new App(root);
  window.__perfdiag = app;
  await app.start();
}
