/**
 * Reading a gpt-oss reply (OpenAI's Harmony format) as it streams. The prompt ends with `<|start|>assistant`;
 * the reply is one or more messages, each a header, `<|message|>`, a body and `<|end|>` (the last one ends with
 * `<|return|>` or `<|call|>`, end tokens the text never holds), the next one opened by `<|start|>`:
 *
 *     <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…
 *
 * A header names the message's channel (`<|channel|>analysis`) and who it is for (`to=functions.get_weather`).
 * The analysis channel's bodies are the reasoning; final's and commentary's (a preamble before calls) the answer;
 * a body sent to a function (`to=functions.NAME`) is that call's JSON arguments, given to the answer as a call
 * in kvdesk's Hermes form (`<tool_call>{"name": …, "arguments": …}</tool_call>`) for the tool-call reader; a body
 * sent to one of gpt-oss's built-in tools (browser, python), which kvdesk does not run, is reasoning. A reply
 * that never writes a header (a model prompted another way) is all answer.
 */
import {
  type AnswerPart,
  partialSuffix,
  type ReasoningPush,
  type ReasoningSplitter,
  type ReasoningState,
} from './reasoning-splitter';

const MESSAGE = '<|message|>';
/** What ends a body: the message's end, a call's or the reply's (should the text hold them), the next start. */
const BODY_ENDS = ['<|end|>', '<|call|>', '<|return|>', '<|start|>'] as const;
/** Headers are short and on one line: held text past this, or a line break, is no header. */
const HEADER_MAX = 256;

type Kind = 'reasoning' | 'content' | 'call';

/**
 * `inside`: the prompt opened the analysis message (the reply starts in its body); `answering`: it opened the
 * final one (after an empty analysis, for a reply told not to think), or — `continuing` — ended inside its text
 * (a prefill the reply continues: its leading whitespace is the model's). Otherwise the reply starts with a header.
 */
export function createHarmonySplitter(opts: {
  inside: boolean;
  answering?: boolean;
  continuing?: boolean;
}): ReasoningSplitter {
  // header: reading a header; body: a message's body; plain: the reply is no Harmony (all answer).
  let phase: 'header' | 'body' | 'plain' = opts.inside || opts.answering ? 'body' : 'header';
  let kind: Kind = opts.inside ? 'reasoning' : 'content';
  // Text not yet given out: a header being read, or a body's possible end marker and trailing whitespace.
  let held = '';
  // Whether any message began (a header was read, or the prompt opened one).
  let began = opts.inside || opts.answering === true;
  // Whether the current message's body has given text; whether each side has.
  let bodyStarted = opts.answering === true && opts.continuing === true;
  const given = { reasoning: false, content: false };
  // Whether the call being read has written any of its arguments.
  let callArgs = false;

  /**
   * Answer text: what the model wrote, kvdesk's markup around a call, or its line between messages (see
   * {@link ReasoningPush.parts}).
   */
  const answer = (out: ReasoningPush, kind: AnswerPart['kind'], text: string): void => {
    if (text.length === 0) return;
    out.content += text;
    out.parts?.push({ kind, text });
  };

  const push = (text: string): ReasoningPush => {
    const out: ReasoningPush = { reasoning: '', content: '', parts: [] };
    held += text;
    for (;;) {
      if (phase === 'plain') {
        answer(out, 'text', held);
        held = '';
        return out;
      }
      if (phase === 'header') {
        const at = held.indexOf(MESSAGE);
        // The reply's first header decides whether it is Harmony at all.
        const header = at >= 0 ? held.slice(0, at) : held.slice(0, held.length - partialSuffix(held, MESSAGE));
        if (!began && (header.includes('\n') || header.length > HEADER_MAX)) {
          phase = 'plain';
          continue;
        }
        if (at < 0) return out;
        begin(header, out);
        held = held.slice(at + MESSAGE.length);
        continue;
      }
      // body
      let at = -1;
      let end = '';
      for (const marker of BODY_ENDS) {
        const i = held.indexOf(marker);
        if (i >= 0 && (at < 0 || i < at)) {
          at = i;
          end = marker;
        }
      }
      if (at >= 0) {
        give(held.slice(0, at).trimEnd(), out);
        finish(out);
        // `<|start|>` opens the next header; the end markers are dropped.
        held = held.slice(end === '<|start|>' ? at : at + end.length);
        phase = 'header';
        continue;
      }
      // Hold back what could be the start of an end marker, and whitespace that may turn out to end the body.
      const partial = Math.max(...BODY_ENDS.map((m) => partialSuffix(held, m)));
      const keep = held.slice(0, held.length - partial).trimEnd().length;
      give(held.slice(0, keep), out);
      held = held.slice(keep);
      return out;
    }
  };

  /** A header read: the body that follows goes where its channel and recipient say. */
  function begin(header: string, out: ReasoningPush): void {
    began = true;
    phase = 'body';
    bodyStarted = false;
    const channel = /<\|channel\|>\s*([^\s<]+)/.exec(header)?.[1];
    const to = /\bto=([^\s<]+)/.exec(header)?.[1];
    if (to?.startsWith('functions.')) {
      kind = 'call';
      callArgs = false;
      const name = to.slice('functions.'.length);
      answer(out, 'open', `${given.content ? '\n' : ''}<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `);
      given.content = true;
      bodyStarted = true;
      return;
    }
    kind = to !== undefined && to !== 'assistant' ? 'reasoning' : channel === 'analysis' ? 'reasoning' : 'content';
  }

  /** Body text: leading whitespace of a body is dropped, and a blank line parts bodies of the same side. */
  function give(text: string, out: ReasoningPush): void {
    if (kind === 'call') {
      answer(out, 'args', text);
      if (text.trim() !== '') callArgs = true;
      return;
    }
    const body = bodyStarted ? text : text.trimStart();
    if (body.length === 0) return;
    const side = kind === 'reasoning' ? 'reasoning' : 'content';
    const join = !bodyStarted && given[side] ? '\n\n' : '';
    if (side === 'content') {
      answer(out, 'join', join);
      answer(out, 'text', body);
    } else out.reasoning += join + body;
    given[side] = true;
    bodyStarted = true;
  }

  /** The end of a body: a call's arguments are closed (a call without any, `{}`). */
  function finish(out: ReasoningPush): void {
    if (kind === 'call') {
      // A call without arguments has none: `{}` is kvdesk's, not the model's.
      answer(out, 'close', `${callArgs ? '' : '{}'}}\n</tool_call>`);
    }
    kind = 'content';
    bodyStarted = false;
  }

  return {
    push,
    flush() {
      const out: ReasoningPush = { reasoning: '', content: '', parts: [] };
      if (phase === 'body') {
        give(held.trimEnd(), out);
        finish(out);
      } else if (phase === 'header' && !began) {
        answer(out, 'text', held);
      }
      held = '';
      phase = 'header';
      return out;
    },
    get state(): ReasoningState {
      if (phase === 'plain') return 'content';
      if (phase === 'body') return kind === 'reasoning' ? 'inside' : 'content';
      return began ? 'after' : 'start';
    },
  };
}
