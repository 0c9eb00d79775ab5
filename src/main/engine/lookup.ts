/**
 * Lookup decoding (prompt lookup, as llama.cpp's lookup and transformers'
 * prompt_lookup_num_tokens): when the last few tokens of a stream appeared
 * before — in the prompt or the reply so far —, the tokens that followed them
 * then are a guess at what comes next. The batcher feeds the guesses with the
 * stream's last token in one run and keeps those the model itself samples
 * (batcher.ts), so the reply is the one plain decoding gives, in fewer runs
 * when it repeats text it has seen: code being edited, a quoted document, a
 * list being extended. On a CPU a decode run mostly reads the weights once;
 * checking a few more positions in the same run costs a fraction of a step.
 *
 * "The one plain decoding gives" up to float rounding: a check scores several
 * positions in one wider matrix product, whose sums round differently (as a
 * batch's do), so where the two likeliest tokens are within rounding of each
 * other (4.5e-4 apart in the logits, once in the bench's runs) the reply may
 * take the other one from there on.
 */

/** What a drafter knows besides the stream: where its reply begins, and the reply the client expects, if any. */
export interface DraftHints {
  /** Index in the history of the reply's first token (the prompt's length). */
  replyFrom: number;
  /** The reply the client predicts (OpenAI's Predicted Outputs: a file being edited, say), as token ids. */
  prediction?: readonly number[];
}

/**
 * Proposes up to `max` tokens to follow `history` (the stream's tokens so far, prompt and reply, its last one
 * included).
 */
export type Drafter = (history: readonly number[], max: number, hints?: DraftHints) => number[];

/** The longest and shortest tail of the stream looked up: a match of two tokens or more. */
export const LOOKUP_NGRAM_MAX = 3;
export const LOOKUP_NGRAM_MIN = 2;
/** Drafted tokens per check by default (0 turns lookup decoding off). */
export const LOOKUP_DRAFT_TOKENS = 4;

/**
 * At most `max` tokens to follow the stream: with a predicted reply, its next
 * tokens while the reply so far is the prediction's beginning, else what
 * follows the stream's last tokens in the prediction (predictionDraft); then
 * the tokens that followed the most recent earlier occurrence of the stream's
 * last n tokens (n from LOOKUP_NGRAM_MAX down to LOOKUP_NGRAM_MIN); none when
 * no tail of that length occurred before.
 */
export function lookupDraft(history: readonly number[], max: number, hints?: DraftHints): number[] {
  const len = history.length;
  if (max < 1) return [];
  if (hints?.prediction) {
    const predicted = predictionDraft(history, max, hints.replyFrom, hints.prediction);
    if (predicted.length > 0) return predicted;
  }
  for (let n = Math.min(LOOKUP_NGRAM_MAX, len - 1); n >= LOOKUP_NGRAM_MIN; n--) {
    const tail = len - n;
    for (let start = tail - 1; start >= 0; start--) {
      let j = 0;
      while (j < n && history[start + j] === history[tail + j]) j++;
      if (j === n) return history.slice(start + n, Math.min(len, start + n + max));
    }
  }
  return [];
}

/**
 * A draft from a predicted reply. While the reply so far is the prediction's
 * beginning, the prediction's next tokens. Once it departed from it (an edit),
 * the stream's last n tokens are looked up in the prediction, and of their
 * occurrences the one nearest the reply's own position wins (an edited file
 * keeps its order, so where the reply is in it tracks how long the reply is).
 */
export function predictionDraft(
  history: readonly number[],
  max: number,
  replyFrom: number,
  prediction: readonly number[],
): number[] {
  const reply = Math.max(0, history.length - replyFrom);
  let same = 0;
  while (same < reply && same < prediction.length && prediction[same] === history[replyFrom + same]) same++;
  if (same === reply) return prediction.slice(reply, reply + max);
  const len = history.length;
  for (let n = Math.min(LOOKUP_NGRAM_MAX, reply); n >= LOOKUP_NGRAM_MIN; n--) {
    const tail = len - n;
    let best = -1;
    for (let start = 0; start + n < prediction.length; start++) {
      let j = 0;
      while (j < n && prediction[start + j] === history[tail + j]) j++;
      if (j === n && (best < 0 || Math.abs(start + n - reply) < Math.abs(best + n - reply))) best = start;
    }
    if (best >= 0) return prediction.slice(best + n, best + n + max);
  }
  return [];
}

/**
 * After a draft the model rejected whole, lookup rests for 2^misses tokens
 * (at most this many), so text that never repeats costs a check now and then,
 * not every step; any accepted token ends the rest.
 */
export const LOOKUP_MAX_REST = 32;
/** The longest rest with a predicted reply: a reply that left it for an edit usually comes back to it soon. */
export const LOOKUP_MAX_REST_PREDICTED = 4;
