/**
 * Two pages on one chat (DOM-free, for the bridge and its tests).
 */
import type { StoredMessage, Thread } from '../../shared/api';
import { cutText } from '../../shared/text';
import { stable } from './presets';

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

/**
 * Whether `saved` has each of `mine`'s messages as `mine` has it (its text, its reasoning, its tool calls), leaving out
 * those `mine` has as `base` (the chat as the host last had it, from this page's side) has them: they are not this
 * page's to keep (a reply another page writes, shown here as it was then, has grown since).
 */
export function holdsAll(saved: Thread, mine: Thread, base?: Thread): boolean {
  const theirs = new Map(saved.messages.map((m) => [m.id, m]));
  const before = new Map((base?.messages ?? []).map((m) => [m.id, m]));
  return mine.messages.every((m) => sameMessage(before.get(m.id), m) || sameMessage(theirs.get(m.id), m));
}

function sameMessage(t: StoredMessage | undefined, m: StoredMessage): boolean {
  return (
    t !== undefined &&
    t.role === m.role &&
    t.content === m.content &&
    (t.reasoning ?? '') === (m.reasoning ?? '') &&
    JSON.stringify(t.toolCalls ?? []) === JSON.stringify(m.toolCalls ?? []) &&
    (t.alternatives?.length ?? 0) === (m.alternatives?.length ?? 0)
  );
}

/** Whether two copies of a chat have the same name and settings (its messages, revision and times aside). */
export function sameSettings(a: Thread, b: Thread): boolean {
  const settings = ({ messages: _m, revision: _r, updatedAt: _u, ...rest }: Thread) => stable(rest);
  return settings(a) === settings(b);
}

/**
 * `mine`'s name and settings on the chat as saved (its messages, its revision), when they are all this page changed
 * of them since `base` and the saved one has them as `base` had them (nothing of another page's is undone); null
 * otherwise.
 */
export function takeSettings(saved: Thread, mine: Thread, base: Thread | undefined): Thread | null {
  if (!base || sameSettings(mine, saved) || !sameSettings(saved, base)) return null;
  const { revision: _revision, ...settings } = mine;
  return {
    ...settings,
    ...(saved.revision !== undefined ? { revision: saved.revision } : {}),
    updatedAt: Math.max(saved.updatedAt, mine.updatedAt),
    messages: saved.messages,
  };
}

/** What a conflicted copy's title ends with. */
export const CONFLICTED_COPY = ' (conflicted copy)';

/** What a branch's title ends with. */
export const BRANCH = ' (branch)';

/** The title of a branch of chat `title` (at most 200 code units, as any title: the title is cut to leave room). */
export function branchTitle(title: string): string {
  return `${cutText(title, 200 - BRANCH.length)}${BRANCH}`;
}

/** The title of chat `title`'s conflicted copy (at most 200 characters, as any title). */
export function conflictTitle(title: string): string {
  return `${cutText(title, 200 - CONFLICTED_COPY.length)}${CONFLICTED_COPY}`;
}

/**
 * This page's copy of a chat that another page saved first, as a chat of its own beside it: new ids (`id`, and
 * `messageId` with each message's place), its title saying what it is, no revision (its first save) and no tools
 * that run without asking (granted again, where wanted).
 */
export function conflictCopy(mine: Thread, id: string, messageId: string, now: number): Thread {
  const { revision: _revision, toolsAllowed: _tools, pinned: _pinned, ...rest } = mine;
  return {
    ...rest,
    id,
    title: conflictTitle(mine.title),
    createdAt: now,
    updatedAt: now,
    messages: mine.messages.map((m, i) => ({ ...m, id: `${messageId}-${i}` })),
  };
}
