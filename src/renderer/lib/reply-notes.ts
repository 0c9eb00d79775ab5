/**
 * The notes under a reply, as sentences: pure, for the message view and its tests.
 */
import type { StoredMessage } from '../../shared/api';
import type { ContextClip } from '../../shared/contract';
import { formatInteger } from './format';

/**
 * The context-clip note: only for a reply that ran into the clipped max tokens (it ended by length; one that ended
 * on its own was not cut by it). `earlier`: whether the prompt held earlier turns of the chat — only then does a
 * new chat leave a longer reply room; otherwise the model's context itself is the limit.
 */
export function clipNote(clip: ContextClip, finishReason: string | undefined, earlier: boolean): string | null {
  if (finishReason !== 'length' && finishReason !== 'context') return null;
  const cut = `⚠ Max tokens cut from ${formatInteger(clip.requestedMaxTokens)} to ${formatInteger(clip.clippedMaxTokens)}`;
  return earlier
    ? `${cut} so the reply fits the model's context of ${formatInteger(clip.contextLength)} tokens — start a new chat for a longer reply.`
    : `${cut}: the model's context is ${formatInteger(clip.contextLength)} tokens, and the prompt takes the rest of it — a shorter message (or system prompt) leaves the reply more room.`;
}

type Stats = NonNullable<StoredMessage['stats']>;
type InterruptedBy = Stats['interruptedBy'];

/**
 * Whether the KV budget's cap ended a reply: it ended by length, having written the tokens its capped reservation
 * had room for. A capped reply that ended on its own before them (or was stopped, or failed) was not cut by the cap
 * (SCHEDULER.md: the cap is on its reservation; the API still reports it beside any finish reason).
 */
export function cutByBudgetCap(stats: Stats | undefined): boolean {
  const cap = stats?.budgetCap;
  return cap !== undefined && stats?.finishReason === 'length' && (stats.tokens ?? 0) >= cap.admittedMaxTokens;
}

/**
 * What interrupted a reply, in words: `by` as the page heard it, or (absent) what the page could not hear — it went
 * (a reload, the window closing), or kvdesk stopped and the page's last save of the reply did not reach it.
 */
export function interruptedCause(by: InterruptedBy): string {
  return by === 'shutdown'
    ? 'kvdesk stopped'
    : by === 'disconnect'
      ? 'the connection to kvdesk was lost'
      : 'the page was closed or reloaded (or kvdesk stopped)';
}

/**
 * Why a reply was interrupted, and what to do: continue where it was cut (`continuable`: it has an answer begun to
 * go on from), else regenerate.
 */
export function interruptedNote(by: InterruptedBy, nothingWritten: boolean, continuable: boolean): string {
  const why = interruptedCause(by);
  if (nothingWritten) return `Interrupted: ${why} before this reply began (regenerate it).`;
  return continuable
    ? `Interrupted: ${why} while this reply was being written (its text so far is kept; continue or regenerate it).`
    : `Interrupted: ${why} while this reply was being written (what it wrote is kept; regenerate it).`;
}

/**
 * A reply that ran out of its max tokens while it reasoned, before it answered: how many went to the reasoning,
 * and the one thing to do (the settings are the composer's "system & sampling…").
 */
export function reasoningCutNote(tokens: number | undefined): string {
  const all = tokens ? `All ${formatInteger(tokens)} of its max tokens` : 'All of its max tokens';
  return `${all} went to its reasoning, before it answered — raise max tokens in the chat's settings (system & sampling…, under the message box), then regenerate it.`;
}
