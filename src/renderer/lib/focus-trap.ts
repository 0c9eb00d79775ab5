/**
 * Tab and Shift+Tab stay inside an open drawer (a narrow window's chat list and inspector), as in a modal dialog:
 * behind it the page is covered, and the focus must not wander there unseen. Esc closes the drawers (App).
 */
import { type RefObject, useEffect } from 'react';

const FOCUSABLE = 'a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex="-1"])';

/** What Tab reaches in `root`, in order: enabled, shown. */
export function tabStops(root: HTMLElement): HTMLElement[] {
  return [...root.querySelectorAll<HTMLElement>(FOCUSABLE)].filter(
    (el) =>
      !(el as HTMLButtonElement).disabled &&
      el.tabIndex >= 0 &&
      el.getClientRects().length > 0 &&
      // Inside a disabled fieldset or an inert part, or hidden: Tab passes it by.
      el.closest('fieldset:disabled, [inert]') === null &&
      getComputedStyle(el).visibility !== 'hidden',
  );
}

/** While `active`, Tab past the last stop of `ref`'s element goes to its first, Shift+Tab before the first to the last. */
export function useFocusTrap(ref: RefObject<HTMLElement | null>, active: boolean): void {
  useEffect(() => {
    const root = ref.current;
    if (!active || !root) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Tab') return;
      const stops = tabStops(root);
      const first = stops[0];
      const last = stops[stops.length - 1];
      if (!first || !last) return;
      const at = document.activeElement;
      if (e.shiftKey && (at === first || at === root)) {
        e.preventDefault();
        last.focus();
      } else if (!e.shiftKey && at === last) {
        e.preventDefault();
        first.focus();
      }
    };
    root.addEventListener('keydown', onKey);
    return () => root.removeEventListener('keydown', onKey);
  }, [ref, active]);
}
