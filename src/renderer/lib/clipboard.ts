/**
 * Text put on the clipboard by a copy button. The Clipboard API is only there in a secure context (the window,
 * localhost, https): the UI opened over plain http by another name (from another computer on the local network)
 * has none, and copies the older way instead, a hidden text area selected and copied on the click.
 */

export { COPY_UNAVAILABLE } from './copy-unavailable';

/** Puts `text` on the clipboard; false when the browser took it neither way (say so: the person selects it). */
export async function copyText(text: string): Promise<boolean> {
  if (typeof navigator.clipboard?.writeText === 'function') {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Refused (no permission, the page not focused): the older way may still copy it.
    }
  }
  return copiedBySelection(text);
}

/**
 * The copy before the Clipboard API: the text in a text area out of sight, selected and copied with
 * `execCommand('copy')` (allowed on a click). The focus and the selection the page had come back after.
 */
function copiedBySelection(text: string): boolean {
  const focused = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  const selection = document.getSelection();
  const ranges = selection
    ? Array.from({ length: selection.rangeCount }, (_, i) => selection.getRangeAt(i).cloneRange())
    : [];
  const area = document.createElement('textarea');
  area.value = text;
  area.readOnly = true;
  area.tabIndex = -1;
  area.setAttribute('aria-hidden', 'true');
  area.style.cssText = 'position:fixed;top:0;left:0;width:1px;height:1px;padding:0;border:0;opacity:0;';
  document.body.append(area);
  let copied = false;
  try {
    area.focus({ preventScroll: true });
    area.select();
    copied = document.execCommand('copy');
  } catch {
    copied = false;
  } finally {
    area.remove();
    focused?.focus({ preventScroll: true });
    if (selection && ranges.length > 0) {
      selection.removeAllRanges();
      for (const r of ranges) selection.addRange(r);
    }
  }
  return copied;
}
