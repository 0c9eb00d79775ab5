/**
 * What a screen reader is told about the open chat's reply, once per change of its state (never per token):
 * sent, queued, replying, and how it ended. A refusal is said by its own alert, so it is not said twice here.
 */
import type { StoredMessage } from '../../shared/api';
import { UNTITLED } from '../store/chat-slice';
import { formatInteger } from './format';
import { cutByBudgetCap, interruptedCause } from './reply-notes';

export interface ReplyState {
  /** The live reply's phase, when one is on its way. */
  phase?: 'sending' | 'queued' | 'running' | string;
  /** The chat's last message, once no reply is on its way. */
  last?: StoredMessage;
}

export function replyAnnouncement({ phase, last }: ReplyState): string {
  if (phase === 'sending') return 'Sending…';
  if (phase === 'queued') return 'The reply is queued: it waits for room in the KV budget or a running slot.';
  if (phase !== undefined) return 'Replying…';
  if (last?.role !== 'assistant' || !last.stats || last.stats.error) return '';
  const s = last.stats;
  const tokens = s.tokens !== undefined ? `${formatInteger(s.tokens)} tokens` : '';
  // Only a reply the cap cut says so (one that ended on its own before it was not capped in any way it could hear).
  const capped =
    s.budgetCap && cutByBudgetCap(s)
      ? `; capped at ${formatInteger(s.budgetCap.admittedMaxTokens)} tokens by the KV budget`
      : '';
  if (s.finishReason === 'cancelled') return `Reply stopped${tokens ? ` after ${tokens}` : ''}${capped}.`;
  // Cut off by kvdesk stopping, or the connection to it lost, as it is said under the reply (not the person's stop).
  if (s.finishReason === 'interrupted') {
    return `Reply interrupted${tokens ? ` after ${tokens}` : ''}: ${interruptedCause(s.interruptedBy)}.`;
  }
  return `Reply done${tokens ? `: ${tokens}` : ''}${capped}.`;
}

/**
 * What a screen reader is told when a reply ends in a chat that is not the open one (the chat list's "replying" dot
 * goes, with nothing where the focus is): the chat by its title, and how the reply ended. `last` is that chat's last
 * message, if the page holds its messages.
 */
export function elsewhereAnnouncement(title: string, last: StoredMessage | undefined): string {
  const chat = `“${title || UNTITLED}”`;
  const error = last?.role === 'assistant' ? last.stats?.error : undefined;
  if (error) return `The reply in ${chat} failed: ${error.message}`;
  const ended = replyAnnouncement(last ? { last } : {});
  return ended ? `In ${chat}: ${ended}` : `The reply in ${chat} ended.`;
}
