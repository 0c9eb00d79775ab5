/**
 * Where the keyboard's focus goes when the control that had it goes away under it (Stop once the reply ends,
 * regenerate, a confirmation's buttons, a card that loads): the browser drops it to the page, and the next Tab
 * starts from nowhere a screen reader can say. The part of the window the control was in names its home
 * (`data-focus-home`: a selector within it, or "self"), which takes the focus instead.
 */
const HOME = 'data-focus-home';

/** Looks again this long after a click or a key (a control may go only once the host has answered). */
const CHECKS_MS = [0, 60, 250, 800, 2000, 5000];

export function installFocusRescue(doc: Document): () => void {
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const watch = (e: Event) => {
    // Only the latest click or key is watched (each key typed in the message box would otherwise add its own).
    for (const t of timers) clearTimeout(t);
    timers.clear();
    const target = e.target;
    if (!(target instanceof Element) || target === doc.body) return;
    const region = target.closest(`[${HOME}]`);
    if (!region) return;
    for (const ms of CHECKS_MS) {
      const timer = setTimeout(() => {
        timers.delete(timer);
        rescue(doc, target, region);
      }, ms);
      timers.add(timer);
    }
  };
  doc.addEventListener('click', watch, true);
  doc.addEventListener('keydown', watch, true);
  return () => {
    doc.removeEventListener('click', watch, true);
    doc.removeEventListener('keydown', watch, true);
    for (const t of timers) clearTimeout(t);
  };
}

/** A control the keyboard can no longer use: gone from the page, or disabled (Stop turned into a greyed Send). */
function unusable(el: Element): boolean {
  return !el.isConnected || (el as HTMLButtonElement).disabled === true;
}

function rescue(doc: Document, lost: Element, region: Element): void {
  const active = doc.activeElement;
  // Only a focus that fell to the page, or sits on a disabled control, because its control went (not one the
  // person moved on purpose).
  const onPage = active === null || active === doc.body;
  if (!(onPage || active === lost) || !unusable(lost)) return;
  const home = region.isConnected ? region : null;
  const selector = home?.getAttribute(HOME);
  const target = !home || !selector ? null : selector === 'self' ? home : home.querySelector(selector);
  if (target instanceof HTMLElement) target.focus({ preventScroll: true });
}
