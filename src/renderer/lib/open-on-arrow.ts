/**
 * A closed <select> whose choice acts at once (loads a model, applies a preset): Chromium on Linux and Windows
 * changes a closed select's value on an arrow key, so browsing with the keyboard would act on every option passed.
 * The arrow keys open its list instead, where they move without choosing, and Enter chooses.
 */
export function openOnArrow(e: {
  key: string;
  altKey: boolean;
  ctrlKey: boolean;
  metaKey: boolean;
  preventDefault(): void;
  currentTarget: { showPicker?: () => void };
}): void {
  if (e.altKey || e.ctrlKey || e.metaKey) return;
  if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
  const open = e.currentTarget.showPicker;
  if (typeof open !== 'function') return;
  e.preventDefault();
  try {
    open.call(e.currentTarget);
  } catch {
    // Not allowed here (no user activation, a cross-origin frame): the arrow does nothing, which is still safe.
  }
}
