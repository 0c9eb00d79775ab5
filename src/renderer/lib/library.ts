/** What the Models view's library shows: the packages loaded before that are not loaded now. */
import type { LibraryEntry, ModelInfo } from '../../shared/api';

/**
 * The library's entries to list below the loaded models: not loaded now (matched by folder, since two folders
 * may share an id), and not the package whose card the last drop shows already.
 */
export function unloadedEntries(
  library: readonly LibraryEntry[],
  models: readonly ModelInfo[],
  shownRoot: string | undefined,
): LibraryEntry[] {
  const loaded = new Set(models.map((m) => m.spec.root));
  return library.filter((e) => !loaded.has(e.root) && e.root !== shownRoot);
}

/** "today", "yesterday", "3 days ago", or the date: when a package was last loaded. */
export function lastLoaded(at: number, now: number): string {
  const day = 86_400_000;
  const startOfToday = new Date(now).setHours(0, 0, 0, 0);
  if (at >= startOfToday) return 'today';
  if (at >= startOfToday - day) return 'yesterday';
  const days = Math.ceil((startOfToday - at) / day);
  if (days < 7) return `${days} days ago`;
  return new Date(at).toLocaleDateString();
}
