/**
 * A reply's versions: regenerating keeps the reply it replaces, so a person can go back to it (‹ 2 / 3 ›). The
 * message shows one version (its own fields); the others wait in `alternatives`, and `altIndex` is where the
 * shown one sits among all of them. Pure, for the store and its tests.
 */
import type { MessageVersion, StoredMessage } from '../../shared/api';

/** The most versions a reply keeps; regenerating past it drops the oldest. */
export const MAX_VERSIONS = 16;

/** The fields a version has of its own. */
function versionOf(m: StoredMessage): MessageVersion {
  return {
    content: m.content,
    createdAt: m.createdAt,
    ...(m.reasoning !== undefined ? { reasoning: m.reasoning } : {}),
    ...(m.format !== undefined ? { format: m.format } : {}),
    ...(m.stats !== undefined ? { stats: m.stats } : {}),
    ...(m.edited ? { edited: true } : {}),
    ...(m.probabilities ? { probabilities: m.probabilities } : {}),
    ...(m.toolCalls ? { toolCalls: m.toolCalls } : {}),
    ...(m.toolRoutes ? { toolRoutes: m.toolRoutes } : {}),
  };
}

/** Every version of a reply, in the order they were written (the shown one at altIndex). */
export function versionsOf(m: StoredMessage): MessageVersion[] {
  const others = m.alternatives ?? [];
  const at = Math.min(m.altIndex ?? others.length, others.length);
  return [...others.slice(0, at), versionOf(m), ...others.slice(at)];
}

/**
 * Whether a version is worth keeping: it said something, or called a tool (a refusal, or a reply stopped before it
 * began, is not).
 */
function kept(v: MessageVersion): boolean {
  return (v.content.length > 0 || (v.reasoning ?? '').length > 0 || (v.toolCalls?.length ?? 0) > 0) && !v.stats?.error;
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
  const {
    content: _c,
    reasoning: _r,
    format: _f,
    stats: _s,
    createdAt: _t,
    edited: _e,
    probabilities: _p,
    toolCalls: _tc,
    toolRoutes: _tr,
    alternatives: _a,
    altIndex: _i,
    ...rest
  } = m;
  return { ...rest, ...pick, alternatives: all.filter((_, i) => i !== index), altIndex: index };
}
