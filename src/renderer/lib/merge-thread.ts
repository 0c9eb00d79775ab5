/**
 * Two pages on one chat (DOM-free, for the bridge and its tests).
 */
import type { Thread } from '../../shared/api';

/**
 * A chat another page saved, merged with this page's copy while this page writes a reply in it: the other's
 * fields and messages, the messages in `keep` (the reply being written) as this page has them, and messages only
 * this page has, each after the one it follows here.
 */
export function mergeThread(remote: Thread, local: Thread, keep: ReadonlySet<string>): Thread {
  const mine = new Map(local.messages.map((m) => [m.id, m]));
  const out = remote.messages.map((m) => (keep.has(m.id) ? (mine.get(m.id) ?? m) : m));
  let at = -1;
  for (const m of local.messages) {
    const i = out.findIndex((x) => x.id === m.id);
    if (i >= 0) {
      at = i;
      continue;
    }
    out.splice(at + 1, 0, m);
    at += 1;
  }
  return { ...remote, messages: out };
}
