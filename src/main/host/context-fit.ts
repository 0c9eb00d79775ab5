/**
 * Fitting a conversation into the model's context by leaving out its oldest turns (the `drop-oldest` overflow
 * policy; Ollama's behaviour, the Responses API's `truncation: "auto"`). Pure: `render` turns a candidate
 * conversation into its prompt (tokens), so this is tested without a model.
 *
 * What is left out: whole turns from the start, a turn being a user message and everything after it up to the
 * next user message (replies, tool calls and their results stay together, and the kept conversation still opens
 * with a user message, as strict templates require). System messages are never left out, and neither is the
 * last user message and what follows it.
 */
import type { ChatMessage } from '../../shared/contract';

export interface FitOptions<P extends { length: number } = number[]> {
  /** Most prompt tokens that leave the reply its room. */
  limit: number;
  /**
   * When turns must go: how far to go below `limit`. A conversation whose client remembers the drop (the
   * window's threads) goes well below it, so its next turns continue the same prefix and reuse its KV instead
   * of dropping (and reading the whole context again) every turn, as llama.cpp's context shift does.
   */
  target: number;
  /** Messages an earlier turn of this conversation already left out (not counting system messages). */
  atLeast: number;
  /**
   * When turns must go: a prompt worth keeping (it continues KV the host holds, as an earlier turn of this
   * conversation left it). A start within the limit whose prompt is preferred wins over the target, so a client
   * that remembers nothing (the HTTP APIs) still continues the prefix of its last turn. The PREFER_SCAN starts
   * at and before the target's are tried, nearest first.
   */
  prefer?: (prompt: P) => boolean;
}

/**
 * A conversation of at most this many characters per token of the limit is rendered whole first (it most likely
 * fits, and then once is all it takes); a longer one is searched from its newest turns. Only the order of the search
 * depends on it, never its result: a prompt averages 3–5 characters a token.
 */
export const WHOLE_FIRST_CHARS_PER_TOKEN = 16;

/** The characters of a conversation's messages (what its prompt holds besides the template's markup). */
function textSize(messages: ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    n += m.content.length + (m.reasoning?.length ?? 0);
    for (const c of m.toolCalls ?? []) n += c.arguments.length;
  }
  return n;
}

/** Starts `prefer` looks at beyond the first that fits (each is one more render of the conversation). */
export const PREFER_SCAN = 16;

export interface FitResult<P extends { length: number }> {
  /** The conversation the model sees. */
  messages: ChatMessage[];
  /** How many of the non-system messages were left out (from the start). */
  dropped: number;
  /** Its prompt, as `render` gave it. */
  prompt: P;
}

/** The conversation with its first `dropped` non-system messages left out. */
export function keptMessages(messages: ChatMessage[], dropped: number): ChatMessage[] {
  if (dropped === 0) return messages;
  let seen = 0;
  return messages.filter((m) => m.role === 'system' || seen++ >= dropped);
}

/**
 * Where the kept conversation may start, as counts of non-system messages left out: 0, and every user message
 * up to the last one.
 */
export function turnStarts(messages: ChatMessage[]): number[] {
  const starts = [0];
  let index = 0;
  for (const m of messages) {
    if (m.role === 'system') continue;
    if (m.role === 'user' && index > 0) starts.push(index);
    index++;
  }
  return starts;
}

/**
 * The fewest turns to leave out (at least `atLeast` messages' worth) so the prompt fits `limit`, going down to
 * `target` when anything must go. When even the last turn alone does not fit, it is all that is kept (the
 * scheduler then clips the reply or refuses the prompt, naming the numbers).
 */
export function dropOldest<P extends { length: number }>(
  messages: ChatMessage[],
  render: (kept: ChatMessage[]) => P,
  opts: FitOptions<P>,
): FitResult<P> {
  const starts = turnStarts(messages);
  const prompts = new Map<number, P>();
  const promptAt = (i: number): P => {
    let p = prompts.get(i);
    if (p === undefined) {
      p = render(keptMessages(messages, starts[i] as number));
      prompts.set(i, p);
    }
    return p;
  };
  const tokensAt = (i: number): number => promptAt(i).length;
  const result = (i: number): FitResult<P> => ({
    messages: keptMessages(messages, starts[i] as number),
    dropped: starts[i] as number,
    prompt: promptAt(i),
  });
  // The first start the earlier turns allow (a hint past the last turn keeps the last turn).
  let first = starts.findIndex((s) => s >= opts.atLeast);
  if (first < 0) first = starts.length - 1;
  const last = starts.length - 1;
  /**
   * The first start from `first` on whose prompt is within `bound` (fewer tokens the more is left out), or -1.
   * Searched from the end: the newest turn, then 2, 4, 8… turns back, until a prompt passes `bound` (or `first` is
   * reached), then halving between the two. Only prompts of about the size that fits are rendered, never the whole
   * of a conversation far longer than the context (a chat of tens of MB measured whole took minutes).
   */
  const firstWithin = (bound: number): number => {
    if (tokensAt(last) > bound) return -1;
    // tokensAt(hi) is within bound; every start before lo passes it (or there is none).
    let hi = last;
    let lo = first;
    for (let step = 1; hi > first; step *= 2) {
      const at = Math.max(first, hi - step);
      if (tokensAt(at) > bound) {
        lo = at + 1;
        break;
      }
      hi = at;
    }
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (tokensAt(mid) <= bound) hi = mid;
      else lo = mid + 1;
    }
    return hi;
  };
  // A conversation of about the context's size or less: most likely it all fits, as it is.
  const kept = keptMessages(messages, starts[first] as number);
  if (textSize(kept) <= opts.limit * WHOLE_FIRST_CHARS_PER_TOKEN && tokensAt(first) <= opts.limit) return result(first);
  const fits = firstWithin(opts.limit);
  if (fits === first) return result(first);
  const atTarget = opts.target < opts.limit ? firstWithin(opts.target) : -1;
  if (opts.prefer) {
    // An earlier turn's start sits at or before where the target is now (its turn went down to the target, and
    // the conversation has only grown since): look back from there, nearest first.
    if (fits >= 0) {
      const from = atTarget >= 0 ? atTarget : last;
      for (let i = from; i >= Math.max(fits, from - PREFER_SCAN + 1); i--) {
        if (opts.prefer(promptAt(i))) return result(i);
      }
    }
  }
  if (atTarget >= 0) return result(atTarget);
  return result(fits >= 0 ? fits : last);
}

/**
 * A conversation's prompt counted no further than `cap` tokens needs: the whole prompt when it is within `cap` (or
 * short enough to render whole first); else the prompt of its newest turns that already passes `cap`, found from the
 * end as dropOldest searches (the newest turn, then 2, 4, 8… turns back) — the whole has at least as many tokens.
 * A chat of tens of MB is so measured against its context without rendering it all.
 */
export function promptUpTo<P extends { length: number }>(
  messages: ChatMessage[],
  render: (kept: ChatMessage[]) => P,
  cap: number,
): { prompt: P; whole: boolean } {
  if (textSize(messages) <= cap * WHOLE_FIRST_CHARS_PER_TOKEN) return { prompt: render(messages), whole: true };
  const starts = turnStarts(messages);
  let at = starts.length - 1;
  for (let step = 1; ; step *= 2) {
    const prompt = render(keptMessages(messages, starts[at] as number));
    if (at === 0) return { prompt, whole: true };
    if (prompt.length > cap) return { prompt, whole: false };
    at = Math.max(0, at - step);
  }
}
