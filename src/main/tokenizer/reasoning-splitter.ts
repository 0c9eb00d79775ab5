import type { ReasoningSpec } from '../../shared/reasoning';

/** Text of a reply split into the model's reasoning and its answer. */
export interface ReasoningPush {
  reasoning: string;
  content: string;
  /**
   * The answer in order, where the splitter writes text of its own (Harmony's calls, given in kvdesk's Hermes
   * form, and the blank line between two answer messages): `text` and a call's `args` are what the model wrote,
   * `open` and `close` kvdesk's markup around the call (so stop strings are not matched against it, nor is it
   * given back as text), `join` kvdesk's line break between messages (text, but not the model's: stop strings
   * are not matched against it). `content` is all of them.
   */
  parts?: AnswerPart[];
}

export interface AnswerPart {
  kind: 'text' | 'args' | 'open' | 'close' | 'join';
  text: string;
}

/**
 * Splits a reply's streamed text into reasoning and answer, across any chunking: the reasoning is what comes
 * between the markers (the prompt may have opened them already), the answer what follows the closing one.
 * Whitespace around the reasoning and before the answer is dropped, as the markers' own line breaks are.
 */
export interface ReasoningSplitter {
  push(text: string): ReasoningPush;
  /** End of the reply: what was held back (a reply cut inside its reasoning keeps that reasoning). */
  flush(): ReasoningPush;
  /**
   * Where the text pushed so far ends: before anything was written (`start`: whitespace, or the start of the
   * opening marker), inside the reasoning, after it (before the answer's first character), or in the answer.
   */
  readonly state: ReasoningState;
}

export type ReasoningState = 'start' | 'inside' | 'after' | 'content';
type State = ReasoningState;

/**
 * `inside`: the prompt ended with the opening marker (DeepSeek-R1's template writes it), so the reply starts
 * with reasoning. Otherwise a reply that opens with the marker (after whitespace) reasons first; a marker later
 * in the answer is text.
 */
export function createReasoningSplitter(
  spec: Pick<ReasoningSpec, 'open' | 'close'>,
  opts: { inside: boolean },
): ReasoningSplitter {
  let state: State = opts.inside ? 'inside' : 'start';
  // Text not yet given out: a possible start of a marker, or whitespace that may turn out to end the reasoning.
  let held = '';
  // Whether reasoning text has been given out (leading whitespace of the reasoning is dropped).
  let reasoned = false;

  const push = (text: string): ReasoningPush => {
    const out: ReasoningPush = { reasoning: '', content: '' };
    held += text;
    for (;;) {
      if (state === 'start') {
        const body = held.trimStart();
        if (body.length === 0) return out;
        if (body.startsWith(spec.open)) {
          held = body.slice(spec.open.length);
          state = 'inside';
          continue;
        }
        if (spec.open.startsWith(body)) return out;
        state = 'content';
        continue;
      }
      if (state === 'inside') {
        const at = held.indexOf(spec.close);
        if (at >= 0) {
          give(held.slice(0, at).trimEnd());
          held = held.slice(at + spec.close.length);
          state = 'after';
          continue;
        }
        // Hold back what could be the start of the closing marker, and the whitespace before it.
        const end = held.slice(0, held.length - partialSuffix(held, spec.close)).trimEnd().length;
        give(held.slice(0, end));
        held = held.slice(end);
        return out;
      }
      if (state === 'after') {
        held = held.trimStart();
        if (held.length === 0) return out;
        state = 'content';
        continue;
      }
      out.content += held;
      held = '';
      return out;
    }

    function give(reasoning: string): void {
      const text = reasoned ? reasoning : reasoning.trimStart();
      if (text.length === 0) return;
      out.reasoning += text;
      reasoned = true;
    }
  };

  return {
    push,
    flush() {
      const out: ReasoningPush = { reasoning: '', content: '' };
      if (state === 'inside') {
        const rest = held.trimEnd();
        out.reasoning = reasoned ? rest : rest.trimStart();
      } else if (state === 'start') {
        out.content = held;
      }
      held = '';
      return out;
    },
    get state() {
      return state;
    },
  };
}

/** The length of the longest proper prefix of `marker` that `text` ends with. */
export function partialSuffix(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}

/** Whether a rendered prompt leaves the reply inside the reasoning (it ends with the opening marker). */
export function promptOpensReasoning(prompt: string, spec: Pick<ReasoningSpec, 'open'>): boolean {
  return prompt.trimEnd().endsWith(spec.open);
}
