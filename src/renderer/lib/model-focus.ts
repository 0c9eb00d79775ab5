/**
 * Where the keyboard's focus goes once a card's Load or Unload is done. Meanwhile the button pressed is greyed or
 * gone (the focus rescue hands the focus to the Models view), and the package's card may be elsewhere now: loaded,
 * among the loaded models (its Unload); unloaded, in the library or the chosen package's card (its Load); refused,
 * where it was (its Load again, or Forget where the library found it broken), or the chosen package's error (its
 * Dismiss). The focus goes to that button, or to the Loaded heading where the package has no card left (a model
 * unloaded that is in no library); never when the person has put it somewhere else meanwhile.
 */

/** A card's button for what comes next, in the order looked for. */
const NEXT = ['model-unload', 'model-load', 'library-load', 'model-error-dismiss', 'library-forget'].map(
  (id) => `button[data-testid="${id}"]:not(:disabled)`,
);

/** The Models view's Loaded heading: where the focus goes when the package has no card left. */
export const LOADED_HEADING_ID = 'models-loaded';

/** Looks again this long after the change is done (the view shows it at its next render). */
const CHECKS_MS = [0, 50, 200];

export async function focusWhenDone(done: Promise<unknown>, pressed: HTMLElement, root: string): Promise<void> {
  const doc = pressed.ownerDocument;
  const card = pressed.closest('.card');
  const home = pressed.closest('[data-focus-home]');
  await done.catch(() => undefined);
  for (const ms of CHECKS_MS) {
    await new Promise((resolve) => setTimeout(resolve, ms));
    const active = doc.activeElement;
    // The button pressed is still there to press again (a load again that failed): the focus stays on it.
    if (active === pressed && pressed.isConnected && !(pressed as HTMLButtonElement).disabled) return;
    // Moved on purpose meanwhile (not to the page, the view, or the button pressed): it stays there.
    if (!(active === null || active === doc.body || active === home || active === pressed)) return;
    const target = nextControl(doc, card, root);
    if (target) {
      if (target !== active) target.focus();
      return;
    }
  }
  if (doc.activeElement === home || doc.activeElement === doc.body) doc.getElementById(LOADED_HEADING_ID)?.focus();
}

function nextControl(doc: Document, card: Element | null, root: string): HTMLElement | null {
  // The chosen package's card stays where it is, loaded or not; a loaded model's and a library row move.
  const cards = [
    ...(card?.isConnected ? [card] : []),
    ...Array.from(doc.querySelectorAll('.card[data-root]')).filter((c) => c.getAttribute('data-root') === root),
  ];
  for (const c of cards) {
    for (const selector of NEXT) {
      const button = c.querySelector<HTMLElement>(selector);
      if (button) return button;
    }
  }
  return null;
}
