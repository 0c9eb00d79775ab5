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
  const theirs = new Set(remote.messages.map((m) => m.id));
  // This page's own messages, each after the last one of the other's it follows here (a chat of thousands of
  // messages: one pass, not a search per message).
  const after = new Map<string, Thread['messages']>();
  let last = '';
  for (const m of local.messages) {
    if (theirs.has(m.id)) last = m.id;
    else after.set(last, [...(after.get(last) ?? []), m]);
  }
  const out = [...(after.get('') ?? [])];
  for (const m of remote.messages) {
    out.push(keep.has(m.id) ? (mine.get(m.id) ?? m) : m);
    out.push(...(after.get(m.id) ?? []));
  }
  return { ...remote, messages: out };
}
