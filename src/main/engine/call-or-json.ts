/**
 * Tools the model may call (tool_choice "auto") beside JSON output (response_format json_object or json_schema,
 * Ollama's `format`): the reply is either tool calls, held as call-constraint.ts holds them, or one JSON value,
 * held as JSON mode holds it. An OpenAI Agents SDK agent with an output type and tools asks so on every turn:
 * call tools until done, then answer in the output type.
 *
 * Both readings are followed from the reply's first byte while both can be, and the first token only one of them
 * takes decides: from there that one's constraint runs alone. Each begins the reply, as JSON mode's object does
 * (no white space before it): a call's opening (`<tool_call>`, `[TOOL_CALLS]`) or, in a form whose call is a bare
 * JSON object, that object, which the JSON reading follows too (the object's close ends the reply; the host reads
 * it as a call where it names a listed tool). Before either reading has begun, the end of the reply is refused,
 * and special tokens are allowed only as (part of) a call's opening.
 *
 * No npm packages: the engine process imports this file.
 */
import {
  CallConstraint,
  type CallState,
  type CompiledCallGrammar,
  feedCallBytes,
  initialCallState,
  takesSpecial,
} from './call-constraint';
import type { Recogniser, ReplyConstraint, TokenTable } from './json-constraint';

/** The call reading of a reply that may still be JSON. */
interface CallPath {
  /** Bytes of the call's opening read (the trigger, or the bare form's `{`). */
  readonly lead: number;
  /** The call grammar's state once the opening is read whole (before that, its initial state). */
  readonly st: CallState;
}

const BRACE = new Uint8Array([0x7b]);

/** A reply that is tool calls or one JSON value (see the file's comment). */
export class CallOrJsonConstraint<S> implements ReplyConstraint {
  /** Null once the reply cannot be a call. */
  private call: CallPath | null;
  /** Null once the reply cannot be the JSON value. */
  private json: S | null;
  /** The reading the reply turned out to be, once only one goes on (its own constraint). */
  private decided: ReplyConstraint | null = null;
  /** What opens a call: the form's trigger, or `{` where a call is a bare JSON object. */
  private readonly opening: Uint8Array;

  constructor(
    private readonly table: TokenTable,
    private readonly grammar: CompiledCallGrammar,
    private readonly recogniser: Recogniser<S>,
    /** The JSON reading's own constraint, from the state it reached. */
    private readonly jsonFrom: (state: S) => ReplyConstraint,
  ) {
    // JSON output closes a thinking model's reasoning in the prompt (reasoning-plan.ts): none comes first here.
    if (grammar.reasoning) throw new Error('a reply that may be JSON has no reasoning before its calls');
    this.opening = grammar.atStart ? BRACE : grammar.trigger;
    this.call = { lead: 0, st: initialCallState(grammar) };
    this.json = recogniser.initial();
  }

  /** The JSON value closed (a call's reply ends when the model ends it). */
  get done(): boolean {
    if (this.decided) return this.decided.done;
    return this.json !== null && this.recogniser.done(this.json);
  }

  /** The call reading after bytes[from, to), or null where they cannot continue a call that begins the reply. */
  private callAfter(path: CallPath, bytes: Uint8Array, from: number, to: number): CallPath | null {
    const g = this.grammar;
    const opening = this.opening;
    let { lead, st } = path;
    let i = from;
    while (i < to && lead < opening.length) {
      if (bytes[i] !== opening[lead]) return null;
      i++;
      if (++lead === opening.length) {
        const begun = feedCallBytes(g, st, opening, 0, opening.length);
        if (!begun) return null;
        st = begun;
      }
    }
    if (i < to) {
      const next = feedCallBytes(g, st, bytes, i, to);
      if (!next) return null;
      st = next;
    }
    return { lead, st };
  }

  allows(id: number): boolean {
    if (this.decided) return this.decided.allows(id);
    const { bytes, offsets, special } = this.table;
    if (id < 0 || id >= offsets.length - 1) return false;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    // Nothing written yet that either reading ends with: the end of the reply (often a token without bytes) waits.
    if (from === to) return false;
    const isSpecial = special.has(id);
    const call = this.call;
    if (call && (!isSpecial || takesSpecial(call.st)) && this.callAfter(call, bytes, from, to)) return true;
    return !isSpecial && this.json !== null && this.recogniser.accepts(this.json, bytes, from, to);
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
    const isSpecial = special.has(id);
    const call =
      this.call && (!isSpecial || takesSpecial(this.call.st)) ? this.callAfter(this.call, bytes, from, to) : null;
    const json = this.json !== null && !isSpecial ? this.recogniser.advance(this.json, bytes, from, to) : null;
    if (!call && json === null) throw new Error(`token ${id} begins neither a tool call nor the JSON reply`);
    this.call = call;
    this.json = json;
    // One reading left: its own constraint from here. A call only once its opening is whole (before, the reply
    // could still write anything after it).
    if (json !== null && !call) this.decided = this.jsonFrom(json);
    else if (call && json === null && call.lead === this.opening.length) {
      this.decided = new CallConstraint(this.table, this.grammar, call.st);
    }
  }
}
