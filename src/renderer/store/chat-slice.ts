/**
 * Chat threads, their messages, and the replies being generated. Pure reducers:
 * the bridge calls them after (or instead of) talking to the host, so they can
 * be tested without a transport.
 */

import type { StateCreator } from 'zustand/vanilla';
import {
  MAX_PROBABILITY_TOKENS,
  type StoredMessage,
  type Thread,
  type ThreadSummary,
  type TokenProbability,
} from '../../shared/api';
import type { GeneratedTokenLogprob, GenerationResult, StreamFrame } from '../../shared/contract';
import type { ErrorInfo } from '../../shared/errors';
import { cutText } from '../../shared/text';
import { inheritVersions, showVersion as pickVersion } from '../lib/versions';
import type { AppState, ChatSlice, FrameBatch, LiveReply } from './types';

/** Title a thread has until its first message names it. */
export const UNTITLED = 'New chat';

/** A short title from the first user message: its first line, cut at a word near 48 characters. */
export function titleFrom(text: string): string {
  const line = text.trim().split('\n')[0]?.trim() ?? '';
  if (line.length <= 48) return line || UNTITLED;
  const cut = cutText(line, 48);
  const space = cut.lastIndexOf(' ');
  return `${(space > 24 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

/** Newest activity first, as the thread list shows them. */
/** A listed chat as the store keeps it until it is fetched: its fields, no messages (see `summaries`). */
function asThread(summary: ThreadSummary): Thread {
  const { bytes: _bytes, ...fields } = summary;
  return { ...fields, messages: [] };
}

export function sortThreads(threads: Thread[]): Thread[] {
  return [...threads].sort((a, b) => b.updatedAt - a.updatedAt || b.createdAt - a.createdAt);
}

function mapThread(threads: Thread[], id: string, fn: (t: Thread) => Thread): Thread[] {
  return threads.map((t) => (t.id === id ? fn(t) : t));
}

/**
 * A thinking model's reply's reasoning figures: its reasoning tokens and how long they took at the reply's decode
 * rate (frames may bring many tokens at once, so the clock between them says little); a continued reply adds
 * its continuation's to what it had (`before`).
 */
function reasoningStats(
  r: GenerationResult | undefined,
  before: StoredMessage['stats'],
): Pick<NonNullable<StoredMessage['stats']>, 'reasoningTokens' | 'reasoningMs'> {
  const rate = r?.timings.tokensPerSecond ?? 0;
  const tokens = (before?.reasoningTokens ?? 0) + (r?.reasoningTokens ?? 0);
  const ms = (before?.reasoningMs ?? 0) + (r?.reasoningTokens && rate > 0 ? (r.reasoningTokens * 1000) / rate : 0);
  return tokens > 0 ? { reasoningTokens: tokens, ...(ms > 0 ? { reasoningMs: ms } : {}) } : {};
}

/** A log-probability as a reply keeps it: 4 decimals (enough for a percentage's), a masked token's -Infinity as -1e4. */
const finite = (lp: number) => (Number.isFinite(lp) ? Math.round(Math.max(lp, -1e4) * 1e4) / 1e4 : -1e4);

/** The tokens' list with these tokens' probabilities after it (at most MAX_PROBABILITY_TOKENS kept). */
function withProbabilities(
  list: TokenProbability[] | undefined,
  logprobs: GeneratedTokenLogprob[],
): TokenProbability[] {
  const room = MAX_PROBABILITY_TOKENS - (list?.length ?? 0);
  if (room <= 0) return list ?? [];
  const added = logprobs.slice(0, room).map((l) => ({
    b: l.bytes,
    lp: finite(l.logprob),
    top: l.top.map((t) => ({ t: t.token, lp: finite(t.logprob) })),
  }));
  return [...(list ?? []), ...added];
}

/**
 * A reply's time to first token and decode rate as the window saw them (its clock: from the send to the first
 * tokens, and the tokens after those over the time they took), for a reply that ends without the host's figures —
 * stopped, or cut off by a reload. Nothing where the window did not see enough to tell.
 */
export function liveTimings(live: LiveReply): Pick<NonNullable<StoredMessage['stats']>, 'ttftMs' | 'tokensPerSecond'> {
  if (live.firstTokenAt === undefined) return {};
  const ttftMs = Math.max(0, live.firstTokenAt - live.startedAt);
  const later = live.tokens - (live.firstTokens ?? live.tokens);
  const ms = (live.lastTokenAt ?? live.firstTokenAt) - live.firstTokenAt;
  return { ttftMs, ...(later > 0 && ms > 0 ? { tokensPerSecond: (later * 1000) / ms } : {}) };
}

/** Where a reply stopped before its first token was: sent (not yet accepted), queued, or reading its prompt. */
function stoppedWhile(live: LiveReply): 'sending' | 'queued' | 'reading' {
  return live.phase === 'running' ? 'reading' : live.phase;
}

/** Marks a reply that was still being written when the page went (its text so far was saved as it streamed). */
export const INTERRUPTED = 'interrupted';

/**
 * A reply being written as it is saved while it streams: its text so far, marked interrupted, with its figures so
 * far. Should the page go before the reply ends (a reload, a crash), that is what opens again — a reply cut short,
 * to continue or regenerate; one that had written nothing yet says where it was then (sent, queued, reading its
 * prompt), as a reply stopped there does. The end of the reply saves it again, whole.
 */
export function partialReply(message: StoredMessage, live: LiveReply): StoredMessage {
  const before = live.continues?.tokens ?? 0;
  const written = message.content || message.reasoning || message.toolCalls?.length;
  const capAndClip = {
    ...(live.budgetCap ? { budgetCap: live.budgetCap } : {}),
    ...(live.clipped ? { clipped: live.clipped } : {}),
    ...(live.contextDrop ? { contextDrop: live.contextDrop } : {}),
  };
  return {
    ...message,
    stats: {
      ...liveTimings(live),
      tokens: before + live.tokens,
      ...(live.promptTokens !== undefined ? { promptTokens: Math.max(0, live.promptTokens - before) } : {}),
      finishReason: INTERRUPTED,
      ...(live.tokens === 0 && !live.continues && !written ? { stoppedWhile: stoppedWhile(live) } : {}),
      ...(live.continues ? reasoningStats(undefined, message.stats) : {}),
      ...capAndClip,
    },
  };
}

/**
 * Applies one generation's frames to its assistant message and live entry.
 * Returns the new message and live entry (undefined when the stream ended).
 * `now`: when these frames arrived (the window's clock, for a stopped reply's ttft and rate).
 */
export function reduceFrames(
  message: StoredMessage,
  live: LiveReply,
  frames: StreamFrame[],
  errors: { set(error: ErrorInfo): void },
  now: number = Date.now(),
  /** A model's name as the window shows it (kept with the reply it writes). */
  nameOf: (modelId: string) => string | undefined = () => undefined,
): { message: StoredMessage; live: LiveReply | undefined } {
  let content = message.content;
  let reasoning = message.reasoning;
  // What this reply's tokens so far (and, continued, its earlier ones) had: the list goes on.
  let probabilities = message.probabilities;
  let toolCalls = message.toolCalls;
  let next: LiveReply | undefined = { ...live };
  let stats = message.stats;
  let writtenBy = message.writtenBy;
  /** The model the host runs the reply on writes it (a continuation on another model: after the one before). */
  const writer = (modelId: string) => {
    if (writtenBy?.at(-1)?.id === modelId) return;
    const name = nameOf(modelId);
    const ref = { id: modelId, ...(name ? { name } : {}) };
    writtenBy = next?.continues && writtenBy ? [...writtenBy, ref].slice(-16) : [ref];
  };
  for (const frame of frames) {
    if (next === undefined) break; // nothing may follow done/error
    switch (frame.type) {
      case 'accepted':
        next = {
          ...next,
          requestId: frame.requestId,
          phase: next.phase === 'sending' ? 'queued' : next.phase,
          promptTokens: frame.promptTokens,
          maxNewTokens: frame.maxNewTokens,
          fixedTokens: frame.fixedTokens,
          clipped: frame.clipped,
          contextDrop: frame.contextDrop,
          modelId: frame.modelId,
        };
        // A new reply is its model's from the start; a continuation only once it writes.
        if (!next.continues) writer(frame.modelId);
        break;
      case 'admitted':
        next = {
          ...next,
          requestId: frame.requestId,
          phase: 'running',
          reservedBytes: frame.reservedBytes,
          admittedMaxTokens: frame.admittedMaxTokens,
          budgetCap: frame.budgetCap,
        };
        break;
      case 'prefill':
        next = { ...next, phase: 'running', prefill: { done: frame.doneTokens, total: frame.totalTokens } };
        break;
      case 'tokens': {
        const row = frame.rows[0];
        if (row) {
          content += row.text;
          if (row.logprobs && row.logprobs.length > 0) probabilities = withProbabilities(probabilities, row.logprobs);
          // A call written whole: its card shows while the reply goes on.
          if (row.toolCalls?.length) toolCalls = [...(toolCalls ?? []), ...row.toolCalls];
          if (row.ids.length > 0 && next.continues && next.modelId) writer(next.modelId);
          next = { ...next, phase: 'running', tokens: next.tokens + row.ids.length };
          if (row.ids.length > 0) {
            // The first tokens' arrival (all that came at that moment count as first), and the latest.
            const isFirst: boolean = next.firstTokenAt === undefined || next.firstTokenAt === now;
            next = {
              ...next,
              ...(isFirst ? { firstTokenAt: now, firstTokens: next.tokens } : {}),
              lastTokenAt: now,
            };
          }
          if (row.reasoning) reasoning = (reasoning ?? '') + row.reasoning;
        }
        break;
      }
      case 'done': {
        const r = frame.result;
        // A continued reply keeps what it said before; its tokens count both parts, and its prompt is the
        // conversation before it (the continuation's prompt held the first part too).
        const before = next.continues?.tokens ?? 0;
        content = (next.continues?.text ?? '') + r.text;
        // The reply's calls, as the host read them.
        const calls = r.rows[0]?.toolCalls;
        if (calls?.length) toolCalls = calls;
        // The whole generation's probabilities (a token held back by a stop string's check arrives with done only).
        const all = r.rows[0]?.logprobs;
        if (all && all.length > 0) {
          const kept = next.continues ? (message.probabilities ?? []).slice(0, next.continues.probabilities ?? 0) : [];
          probabilities = withProbabilities(kept, all);
        }
        const thought = reasoningStats(r, next.continues ? message.stats : undefined);
        stats = {
          ttftMs: r.timings.ttftMs,
          tokensPerSecond: r.timings.tokensPerSecond,
          tokens: before + r.tokenIds.length,
          promptTokens: Math.max(0, r.promptTokens - before),
          finishReason: r.finishReason,
          ...thought,
          ...(r.budgetCap ? { budgetCap: r.budgetCap } : {}),
          ...(r.clipped ? { clipped: r.clipped } : {}),
          ...(r.contextDrop ? { contextDrop: r.contextDrop } : {}),
          ...(r.lookup ? { lookup: r.lookup } : {}),
        };
        next = undefined;
        break;
      }
      case 'error': {
        const capAndClip = {
          ...(next.budgetCap ? { budgetCap: next.budgetCap } : {}),
          ...(next.clipped ? { clipped: next.clipped } : {}),
          ...(next.contextDrop ? { contextDrop: next.contextDrop } : {}),
        };
        const by = frame.error.detail?.reason;
        if (frame.error.code === 'CANCELLED' && next.continues && next.tokens === 0) {
          // A continuation stopped before it wrote anything: the reply stays as it was, its stats too.
        } else if (frame.error.code === 'CANCELLED' && (by === 'shutdown' || by === 'disconnect')) {
          // Not the person's stop: kvdesk stopped, or the page's connection to it was lost. Interrupted, as a reply
          // the page's going cut off, with what it wrote so far and the same things to do.
          const sofar = {
            ...message,
            content,
            ...(reasoning ? { reasoning } : {}),
            ...(toolCalls ? { toolCalls } : {}),
          };
          stats = { ...partialReply(sofar, next).stats, interruptedBy: by };
        } else if (frame.error.code === 'CANCELLED') {
          // Stopped by the person: the partial reply is theirs to keep.
          const before = next.continues?.tokens ?? 0;
          stats = {
            // The host sends no figures for a stopped reply: the window's own (a reload or another page keeps them).
            ...liveTimings(next),
            tokens: before + next.tokens,
            ...(next.promptTokens !== undefined ? { promptTokens: Math.max(0, next.promptTokens - before) } : {}),
            finishReason: 'cancelled',
            // Nothing written: where it was stopped (the window says so in place of a reply).
            ...(next.tokens === 0 && !next.continues ? { stoppedWhile: stoppedWhile(next) } : {}),
            ...(next.continues ? reasoningStats(undefined, message.stats) : {}),
            ...capAndClip,
          };
        } else if (next.continues) {
          // A continuation that failed leaves the reply as it was, with its stats (the bridge says why).
        } else {
          stats = {
            ...(next.tokens > 0 ? { tokens: next.tokens } : {}),
            ...capAndClip,
            error: { code: frame.error.code, message: frame.error.message },
          };
          errors.set(frame.error);
        }
        next = undefined;
        break;
      }
    }
  }
  return {
    message: {
      ...message,
      content,
      ...(reasoning ? { reasoning } : {}),
      ...(stats ? { stats } : {}),
      ...(probabilities ? { probabilities } : {}),
      ...(toolCalls?.length ? { toolCalls } : {}),
      ...(writtenBy ? { writtenBy } : {}),
    },
    live: next,
  };
}

export const createChatSlice: StateCreator<AppState, [], [], ChatSlice> = (set, get) => ({
  threads: [],
  activeThreadId: null,
  threadsLoaded: false,
  summaries: {},
  openFailed: {},
  setOpenFailed(id, why) {
    set((s) => {
      if (why === null) {
        if (!(id in s.openFailed)) return {};
        const { [id]: _gone, ...rest } = s.openFailed;
        return { openFailed: rest };
      }
      return { openFailed: { ...s.openFailed, [id]: why } };
    });
  },
  sendWaiting: {},
  setSendWaiting(id, text) {
    set((s) => {
      if (text === null) {
        if (!(id in s.sendWaiting)) return {};
        const { [id]: _sent, ...rest } = s.sendWaiting;
        return { sendWaiting: rest };
      }
      return { sendWaiting: { ...s.sendWaiting, [id]: text } };
    });
  },
  live: {},
  errorDetails: {},
  editingMessageId: null,
  toolRuns: {},
  chatsMade: 0,

  setToolRun(callId, threadId) {
    set((s) => {
      const { [callId]: _done, ...rest } = s.toolRuns;
      return { toolRuns: threadId ? { ...rest, [callId]: threadId } : rest };
    });
  },

  loadThreads(listed, openThreadId) {
    set((s) => {
      // A person may have started a chat before the saved ones arrived: keep it (and keep it open).
      const local = s.threads.filter((t) => !listed.some((x) => x.id === t.id));
      const summaries = { ...s.summaries };
      const threads = listed.map((summary) => {
        const here = s.threads.find((x) => x.id === summary.id);
        if (here && !s.summaries[summary.id]) return here;
        if ('messages' in summary) {
          delete summaries[summary.id];
          return summary;
        }
        summaries[summary.id] = summary;
        return asThread(summary);
      });
      const sorted = sortThreads([...local, ...threads]);
      const has = (id: string | null | undefined) => id != null && sorted.some((t) => t.id === id);
      const open = has(s.activeThreadId) ? s.activeThreadId : has(openThreadId) ? openThreadId : sorted[0]?.id;
      return { threads: sorted, summaries, activeThreadId: open ?? null, threadsLoaded: true };
    });
  },

  forgetThreads() {
    set({
      threads: [],
      summaries: {},
      openFailed: {},
      activeThreadId: null,
      threadsLoaded: false,
      live: {},
      errorDetails: {},
      editingMessageId: null,
      toolRuns: {},
    });
  },

  receiveSummary(summary, unload = false) {
    set((s) => {
      const here = s.threads.some((t) => t.id === summary.id);
      if (here && !s.summaries[summary.id] && !unload) return {};
      const summaries = { ...s.summaries, [summary.id]: summary };
      const thread = asThread(summary);
      // Placed by its activity, as receiveThread places a whole chat.
      return here
        ? { summaries, threads: sortThreads(s.threads.map((t) => (t.id === summary.id ? thread : t))) }
        : { summaries, threads: sortThreads([thread, ...s.threads]) };
    });
  },

  addThread(thread) {
    set((s) => ({ threads: [thread, ...s.threads.filter((t) => t.id !== thread.id)], activeThreadId: thread.id }));
  },

  chatMade() {
    set((s) => ({ chatsMade: s.chatsMade + 1 }));
  },

  receiveThread(thread) {
    // Placed by its activity, as the list shows chats: one that went on in another tab moves up there too.
    set((s) => {
      const { [thread.id]: _fetched, ...summaries } = s.summaries;
      const fetched = _fetched ? { summaries } : {};
      return s.threads.some((t) => t.id === thread.id)
        ? { ...fetched, threads: sortThreads(s.threads.map((t) => (t.id === thread.id ? thread : t))) }
        : { ...fetched, threads: sortThreads([thread, ...s.threads]) };
    });
  },

  selectThread(id) {
    set({ activeThreadId: id, editingMessageId: null });
  },

  renameThread(id, title) {
    // An empty name keeps the one it had (it would otherwise read as a new, empty chat).
    const clean = cutText(title.trim(), 200);
    if (!clean) return;
    set((s) => ({ threads: mapThread(s.threads, id, (t) => ({ ...t, title: clean })) }));
  },

  removeThread(id) {
    set((s) => {
      const { [id]: _gone, ...summaries } = s.summaries;
      const threads = s.threads.filter((t) => t.id !== id);
      const live = Object.fromEntries(Object.entries(s.live).filter(([, l]) => l.threadId !== id));
      const activeThreadId = s.activeThreadId === id ? (threads[0]?.id ?? null) : s.activeThreadId;
      return { threads, summaries, live, activeThreadId };
    });
  },

  updateThread(id, patch) {
    set((s) => ({ threads: mapThread(s.threads, id, (t) => ({ ...t, ...patch })) }));
  },

  setEditing(messageId) {
    set({ editingMessageId: messageId });
  },

  startReply({ threadId, assistantId, append, keepBefore, replaces, now, modelId }) {
    const thread = get().threads.find((t) => t.id === threadId);
    if (!thread) return;
    const versions = replaces ? inheritVersions(thread.messages.find((m) => m.id === replaces)) : {};
    let kept = thread.messages;
    if (keepBefore !== undefined) {
      const at = kept.findIndex((m) => m.id === keepBefore);
      if (at >= 0) kept = kept.slice(0, at);
    }
    const assistant: StoredMessage = {
      id: assistantId,
      role: 'assistant',
      content: '',
      createdAt: now,
      ...(thread.responseFormat === 'json' ? { format: 'json' as const } : {}),
      ...versions,
    };
    const firstUser = append.find((m) => m.role === 'user');
    // A message of files only is titled by its first file.
    const firstText = firstUser ? firstUser.content.trim() || (firstUser.attachments?.[0]?.name ?? '') : '';
    const title = thread.title === UNTITLED && firstUser ? titleFrom(firstText) : thread.title;
    const updated: Thread = {
      ...thread,
      title,
      updatedAt: now,
      ...(modelId ? { modelId } : {}),
      messages: [...kept, ...append, assistant],
    };
    const live: LiveReply = { threadId, messageId: assistantId, phase: 'sending', startedAt: now, tokens: 0 };
    set((s) => ({
      threads: [updated, ...s.threads.filter((t) => t.id !== threadId)],
      live: { ...s.live, [assistantId]: live },
      editingMessageId: null,
    }));
  },

  resumeReply({ threadId, messageId, now, modelId }) {
    const thread = get().threads.find((t) => t.id === threadId);
    const message = thread?.messages.find((m) => m.id === messageId);
    if (!thread || !message) return;
    const live: LiveReply = {
      threadId,
      messageId,
      phase: 'sending',
      startedAt: now,
      tokens: 0,
      // An edited reply's tokens are not the ones its text holds now: what it had is counted in the prompt.
      continues: {
        text: message.content,
        tokens: message.edited ? 0 : (message.stats?.tokens ?? 0),
        ...(message.probabilities ? { probabilities: message.probabilities.length } : {}),
      },
    };
    const updated: Thread = { ...thread, updatedAt: now, ...(modelId ? { modelId } : {}) };
    set((s) => ({
      threads: [updated, ...s.threads.filter((t) => t.id !== threadId)],
      live: { ...s.live, [messageId]: live },
      editingMessageId: null,
    }));
  },

  applyFrames(batches: FrameBatch[], now: number) {
    set((s) => {
      let threads = s.threads;
      let live = s.live;
      let errorDetails = s.errorDetails;
      for (const batch of batches) {
        const current = live[batch.messageId];
        if (!current) continue; // thread deleted while streaming, or a late frame after the end
        const thread = threads.find((t) => t.id === current.threadId);
        const message = thread?.messages.find((m) => m.id === batch.messageId);
        if (!thread || !message) continue;
        const result = reduceFrames(
          message,
          current,
          batch.frames,
          {
            set(error) {
              errorDetails = { ...errorDetails, [batch.messageId]: error };
            },
          },
          now,
          (id) => s.models.find((m) => m.id === id)?.spec.displayName,
        );
        const ended = result.live === undefined;
        threads = mapThread(threads, thread.id, (t) => ({
          ...t,
          ...(ended ? { updatedAt: now } : {}),
          messages: t.messages.map((m) => (m.id === batch.messageId ? result.message : m)),
        }));
        if (ended) {
          const { [batch.messageId]: _gone, ...rest } = live;
          live = rest;
        } else {
          live = { ...live, [batch.messageId]: result.live as LiveReply };
        }
      }
      return { threads, live, errorDetails };
    });
  },

  editReply(threadId, messageId, content, now) {
    const thread = get().threads.find((t) => t.id === threadId);
    const message = thread?.messages.find((m) => m.id === messageId);
    if (!thread || message?.role !== 'assistant' || get().live[messageId]) return;
    // A change of the chat, as a new turn is: the thread goes to the top of the list.
    const updated: Thread = {
      ...thread,
      updatedAt: now,
      // Its tokens' probabilities were the model's text's, not this one's.
      messages: thread.messages.map((m) => {
        if (m.id !== messageId) return m;
        const { probabilities: _gone, ...rest } = m;
        return { ...rest, content, edited: true };
      }),
    };
    set((s) => ({ threads: [updated, ...s.threads.filter((t) => t.id !== threadId)], editingMessageId: null }));
  },

  setToolRoutes(threadId, messageId, routes) {
    set((s) => ({
      threads: mapThread(s.threads, threadId, (t) => ({
        ...t,
        messages: t.messages.map((m) => (m.id === messageId ? { ...m, toolRoutes: routes } : m)),
      })),
    }));
  },

  addToolResult(threadId, result) {
    set((s) => ({
      threads: mapThread(s.threads, threadId, (t) => ({
        ...t,
        updatedAt: result.createdAt,
        // One answer per call.
        messages: t.messages.some((m) => m.role === 'tool' && m.toolCallId === result.toolCallId)
          ? t.messages
          : [...t.messages, result],
      })),
    }));
  },

  showVersion(threadId, messageId, index) {
    set((s) => ({
      threads: mapThread(s.threads, threadId, (t) => ({
        ...t,
        messages: t.messages.map((m) => (m.id === messageId ? pickVersion(m, index) : m)),
      })),
    }));
  },

  failReply(messageId, error) {
    const current = get().live[messageId];
    if (!current) return;
    get().applyFrames(
      [{ messageId, frames: [{ type: 'error', requestId: current.requestId ?? '', error }] }],
      Date.now(),
    );
  },

  markStopping(messageId) {
    set((s) => {
      const current = s.live[messageId];
      return current ? { live: { ...s.live, [messageId]: { ...current, stopping: true } } } : {};
    });
  },
});
