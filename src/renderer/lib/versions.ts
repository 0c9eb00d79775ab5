/**
 * A reply's versions: regenerating keeps the reply it replaces, so a person can go back to it (‹ 2 / 3 ›). The
 * message shows one version (its own fields); the others wait in `alternatives`, and `altIndex` is where the
 * shown one sits among all of them. Pure, for the store and its tests.
 */
import { MessageVersion, type StoredMessage } from '../../shared/api';

/** The most versions a reply keeps; regenerating past it drops the oldest. */
export const MAX_VERSIONS = 16;

/** The fields a version has of its own: its schema's, so a field added there is kept per version here too. */
const VERSION_KEYS = Object.keys(MessageVersion.shape) as Array<keyof MessageVersion>;

/** The version a message shows: its version fields that are set. */
function versionOf(m: StoredMessage): MessageVersion {
  const v: Partial<Record<keyof MessageVersion, unknown>> = {};
  for (const k of VERSION_KEYS) if (m[k] !== undefined) v[k] = m[k];
  return v as MessageVersion;
}

/** Every version of a reply, in the order they were written (the shown one at altIndex). */
export function versionsOf(m: StoredMessage): MessageVersion[] {
  const others = m.alternatives ?? [];
  const at = Math.min(m.altIndex ?? others.length, others.length);
  return [...others.slice(0, at), versionOf(m), ...others.slice(at)];
}

/**
 * Whether a version is worth keeping: it said something, or called a tool, or the model ended it without writing
 * anything (a reply the chat shows, with its figures); a refusal, or a reply stopped before it began, is not.
 */
function kept(v: MessageVersion): boolean {
  if (v.stats?.error) return false;
  const said = v.content.length > 0 || (v.reasoning ?? '').length > 0 || (v.toolCalls?.length ?? 0) > 0;
  return said || endedEmpty(v);
}

/** A reply the model ended itself without writing anything (not one stopped, cut off by a reload, or refused). */
export function endedEmpty(v: Pick<MessageVersion, 'content' | 'reasoning' | 'toolCalls' | 'stats'>): boolean {
  const finish = v.stats?.finishReason;
  return (
    v.content.length === 0 &&
    (v.reasoning ?? '').length === 0 &&
    (v.toolCalls?.length ?? 0) === 0 &&
    !v.stats?.error &&
    finish !== undefined &&
    finish !== 'cancelled' &&
    finish !== 'interrupted'
  );
}

/**
 * The versions a new reply inherits from the one it replaces (regenerate): all of that one's worth keeping, the
 * newest MAX_VERSIONS - 1 of them, the new reply after them.
 */
export function inheritVersions(replaced: StoredMessage | undefined): Pick<StoredMessage, 'alternatives' | 'altIndex'> {
  if (replaced?.role !== 'assistant') return {};
  const all = versionsOf(replaced)
    .filter(kept)
    .slice(-(MAX_VERSIONS - 1));
  return all.length > 0 ? { alternatives: all, altIndex: all.length } : {};
}

/** The reply showing its version `index` (0-based among all); the message unchanged when there is none. */
export function showVersion(m: StoredMessage, index: number): StoredMessage {
  const all = versionsOf(m);
  const pick = all[index];
  if (!pick || all.length < 2) return m;
  // The message without its shown version and the versions list: the picked version's fields go in their place.
  const rest: Partial<StoredMessage> = { ...m };
  for (const k of [...VERSION_KEYS, 'alternatives', 'altIndex'] as const) delete rest[k];
  return {
    ...(rest as Omit<StoredMessage, keyof MessageVersion>),
    ...pick,
    alternatives: all.filter((_, i) => i !== index),
    altIndex: index,
  };
}
