/**
 * The notes under a reply, as sentences: pure, for the message view and its tests.
 */
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
