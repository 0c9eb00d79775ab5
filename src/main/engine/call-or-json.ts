/**
 * Tools the model may call (tool_choice "auto") beside JSON output (response_format json_object or json_schema,
 * Ollama's `format`): the reply is either tool calls, held as call-constraint.ts holds them, or one JSON value,
 * held as JSON mode holds it. An OpenAI Agents SDK agent with an output type and tools asks so on every turn:
 * call tools until done, then answer in the output type.
 *
 * Both readings are followed from the reply's first byte while both can be, and the first token only one of them
 * takes decides. Each begins the reply, as JSON mode's object does (no white space before it): a call's opening
 * (`<tool_call>`, `[TOOL_CALLS]`) or, in a form whose call is a bare JSON object, that object, which the JSON
 * reading follows too (the object's close ends the reply; the host reads it as a call where the call's grammar
 * took it). Before either reading has begun, the end of the reply is refused, and special tokens are allowed only
 * as (part of) a call's opening.
 *
 * A reply of calls is calls only, as OpenAI's: after a call comes white space, another call's opening (not in the
 * bare form, whose grammar takes one call) or the end — never text, which a client that asked for JSON would try
 * to parse.
 *
 * No npm packages: the engine process imports this file.
 */
import {
  type CallState,
  type CompiledCallGrammar,
  feedCallBytes,
  inCall,
  initialCallState,
  MAX_CALL_WHITESPACE,
  takesSpecial,
} from './call-constraint';
import type { Recogniser, ReplyConstraint, TokenTable } from './json-constraint';

/** The call reading: before a call's opening is whole, how far it is; then the call grammar's state. */
interface CallPath {
  /** Bytes of the call's opening read (the trigger, or the bare form's `{`). */
  readonly lead: number;
  /** White-space bytes before the opening (after a call only). */
  readonly ws: number;
  /** The call grammar's state: its state before the opening until the opening is whole. */
  readonly st: CallState;
  /** Calls closed so far: after one, the reply is calls (white space between them, then the end). */
  readonly calls: number;
}

const BRACE = new Uint8Array([0x7b]);
const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

/** A reply that is tool calls or one JSON value (see the file's comment). */
export class CallOrJsonConstraint<S> implements ReplyConstraint {
  /** Null once the reply cannot be (more) calls. */
  private call: CallPath | null;
  /** Null once the reply cannot be the JSON value. */
  private json: S | null;
  /** The JSON value's own constraint, once only it goes on. */
  private decided: ReplyConstraint | null = null;
  /** What opens a call: the form's trigger, or `{` where a call is a bare JSON object. */
  private readonly opening: Uint8Array;

  constructor(
    private readonly table: TokenTable,
    private readonly grammar: CompiledCallGrammar,
    private readonly recogniser: Recogniser<S>,
    /** The JSON value's own constraint, from the state it reached. */
    private readonly jsonFrom: (state: S) => ReplyConstraint,
    /** The tokens that end the reply (the table may give them their text: `<|im_end|>`). */
    private readonly ends: ReadonlySet<number> = new Set(),
  ) {
    // A thinking model's reasoning before JSON output is read around this constraint (reasoning-budget.ts, held).
    if (grammar.reasoning) throw new Error('a reply that may be JSON has no reasoning before its calls');
    this.opening = grammar.atStart ? BRACE : grammar.trigger;
    this.call = { lead: 0, ws: 0, st: initialCallState(grammar), calls: 0 };
    this.json = recogniser.initial();
  }

  /** The JSON value closed (a reply of calls ends when the model ends it). */
  get done(): boolean {
    if (this.decided) return this.decided.done;
    return this.json !== null && this.recogniser.done(this.json);
  }

  /**
   * The call reading after bytes[from, to), or null where they cannot go on with calls: before a call, its opening
   * (after a call, white space first: the bare form's grammar takes one call); in a call, what its grammar takes,
   * up to its close, after which the rest is read as between calls.
   */
  private callAfter(path: CallPath, bytes: Uint8Array, from: number, to: number): CallPath | null {
    const g = this.grammar;
    const opening = this.opening;
    let { lead, ws, st, calls } = path;
    let i = from;
    for (;;) {
      while (i < to && lead < opening.length) {
        const b = bytes[i] as number;
        if (calls > 0 && lead === 0 && isWs(b)) {
          if (++ws > MAX_CALL_WHITESPACE) return null;
        } else if (calls > 0 && g.atStart) {
          return null;
        } else if (b === opening[lead]) {
          if (++lead === opening.length) {
            const begun = feedCallBytes(g, st, opening, 0, opening.length);
            if (!begun) return null;
            st = begun;
          }
        } else {
          return null;
        }
        i++;
      }
      if (i === to) return { lead, ws, st, calls };
      // In the call: its grammar takes the rest of the token, unless the call closes inside it — then what follows
      // is between calls. A token that ends in a call may still have closed one and opened the next (with text
      // between, which the grammar's free state would take): only one with the opening's first byte can.
      const next = feedCallBytes(g, st, bytes, i, to);
      if (!next) return null;
      if (inCall(next) && (g.atStart || bytes.subarray(i, to).indexOf(opening[0] as number) < 0)) {
        return { lead, ws, st: next, calls };
      }
      // Where the call closes (the shortest part that closes it), if it does.
      let k = i + 1;
      let closed = feedCallBytes(g, st, bytes, i, k);
      while (closed && inCall(closed) && k < to) closed = feedCallBytes(g, st, bytes, i, ++k);
      if (!closed) return null;
      if (inCall(closed)) return { lead, ws, st: closed, calls };
      st = closed;
      i = k;
      lead = 0;
      ws = 0;
      calls++;
    }
  }

  allows(id: number): boolean {
    if (this.decided) return this.decided.allows(id);
    const { bytes, offsets, special } = this.table;
    if (id < 0 || id >= offsets.length - 1) return false;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    const call = this.call;
    // A token without bytes (the end of the reply, often): after calls, between them; never before either reading.
    if (from === to) return call !== null && this.between(call);
    const isSpecial = special.has(id);
    if (call && (!isSpecial || takesSpecial(call.st)) && this.callAfter(call, bytes, from, to)) return true;
    if (isSpecial) return this.ends.has(id) && call !== null && this.between(call);
    return this.json !== null && this.recogniser.accepts(this.json, bytes, from, to);
  }

  /** After a call and before the next one's opening: where the reply may end. */
  private between(call: CallPath): boolean {
    return call.calls > 0 && call.lead === 0;
  }

  // TokenConstraint's loop (each class keeps its own: see CallConstraint.mask).
  mask(x: Float32Array, vocab: number): number {
    let allowed = 0;
    for (let id = 0; id < vocab; id++) {
      if (x[id] === Number.NEGATIVE_INFINITY) continue;
      if (this.allows(id)) allowed++;
      else x[id] = Number.NEGATIVE_INFINITY;
    }
    return allowed;
  }

  accept(id: number): void {
    if (this.decided) {
      this.decided.accept(id);
      return;
    }
    const { bytes, offsets, special } = this.table;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    // The end of the reply (allowed after calls), a token without bytes: nothing to read.
    if (from === to) return;
    const isSpecial = special.has(id);
    const before = this.call;
    let call = before && (!isSpecial || takesSpecial(before.st)) ? this.callAfter(before, bytes, from, to) : null;
    // The end token between calls (where the table gives it text): nothing to read.
    if (!call && this.ends.has(id) && before && this.between(before)) call = before;
    const json = this.json !== null && !isSpecial ? this.recogniser.advance(this.json, bytes, from, to) : null;
    if (!call && json === null) throw new Error(`token ${id} continues neither the reply's calls nor its JSON`);
    this.call = call;
    this.json = json;
    // Only the JSON goes on: its own constraint from here.
    if (json !== null && !call) this.decided = this.jsonFrom(json);
  }
}
