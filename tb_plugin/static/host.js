// The TensorBoard page around the plugin's iframe: its reload button and its dark mode.

// The TensorBoard host talks to plugin iframes over a MessageChannel; its reload button
// broadcasts "experimental.DataReloaded". Every message expects a reply.
export function listenToHost(onReload) {
  if (!window.parent || window.parent === window) return;
  const channel = new MessageChannel();
  channel.port1.onmessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (message.isReply) return;
    if (message.type === "experimental.DataReloaded") onReload();
    const reply = { type: message.type, id: message.id, payload: null, error: null, isReply: true };
    channel.port1.postMessage(JSON.stringify(reply));
  };
  window.parent.postMessage("experimental.bootstrap", "*", [channel.port2]);
}

// The stylesheet's colours the canvas needs (its variables), for the theme now in force.
const CANVAS_COLORS = ["bg", "fg", "muted", "line", "band", "header-bg", "accent"];

function applyTheme() {
  let dark;
  try {
    dark = window.parent.document.body.classList.contains("dark-mode");
  } catch {
    dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
  }
  document.documentElement.classList.toggle("dark", dark);
  const css = getComputedStyle(document.documentElement);
  const colors = {};
  for (const name of CANVAS_COLORS) colors[name] = css.getPropertyValue(`--${name}`).trim();
  return colors;
}

// Follow TensorBoard's dark mode (else the system's): onChange(colors) now and on every switch.
export function followTheme(onChange) {
  const apply = () => onChange(applyTheme());
  apply();
  try {
    new MutationObserver(apply).observe(window.parent.document.body, {
      attributes: true,
      attributeFilter: ["class"],
    });
  } catch {
    // Not same-origin (never the case inside TensorBoard): follow the system setting.
  }
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", apply);
}
