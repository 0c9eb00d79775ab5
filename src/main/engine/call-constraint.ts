/**
 * Tool calls the model chooses to make (tool_choice "auto"), held to the tools' schemas once it makes one: a
 * lazy constraint, as llama.cpp's lazy grammars are. The reply is free text until it writes the call form's
 * opening (Hermes' `<tool_call>`, Mistral's `[TOOL_CALLS]`, …; for a form whose call is a bare JSON object, a
 * `{` that begins the reply). From there it must write the call as the form has it: a JSON object naming a
 * listed tool with arguments that conform to that tool's schema (json-schema.ts's recogniser over the anyOf of
 * the tools' calls), or the tool's name and a marker then its arguments (`[TOOL_CALLS]name[ARGS]{…}`), one
 * call or a JSON array of them, then the form's closing text. After that the reply is free again, and the next
 * opening starts another call.
 *
 * The opening is found in the bytes the reply has written (a Knuth–Morris–Pratt automaton over them), whether
 * the model writes it as one special token or in pieces; a token that completes it and goes on is allowed only
 * when the rest is a valid start of the call. While a call is being written, special tokens (the end of the
 * reply among them) are refused, except where the form's own text is one (`[ARGS]`, a closing tag). The JSON
 * is structured output's (one space at most after a colon, a comma or the opening brace). A call's object may
 * close inside a token whose rest is what follows the call.
 *
 * No npm packages: the engine process imports this file.
 */
import type { ReplyConstraint, TokenTable } from './json-constraint';
import { compileSchema, feedSchemaBytes, initialSchemaState, type SchemaNode, type SchemaState } from './json-schema';

/** What the host asks of a reply's calls (sent in the generate command). */
export interface CallGrammar {
  /** Text that opens a call; '' when a call is a bare JSON object, recognised only at the reply's start. */
  trigger: string;
  /** After the opening comes a JSON array of calls (`[{…}, {…}]`), not one. */
  array: boolean;
  /** An array of one call only (parallel_tool_calls false): after its first call, the array closes. */
  single?: boolean;
  /** Text that must close the call (or the array) before the reply goes on; '' when none. */
  close: string;
  /**
   * The calls it may make: the text written before the call's JSON object (the tool's name and a marker;
   * '' when the object names the tool itself), and the object's schema.
   */
  calls: Array<{ head: string; schema: Record<string, unknown> }>;
  /**
   * Qwen3-Coder's XML form instead of JSON (`calls` then empty): after the opening, `<function=NAME>`, then
   * `<parameter=KEY>`value`</parameter>` for keys of that tool, then `</function>`. Values are plain text.
   */
  xml?: { tools: Array<{ name: string; params: string[] }> };
  /**
   * A thinking model's reasoning comes first and holds no call: the grammar starts after its closing marker.
   * `inside`: the prompt opened the reasoning; else a reply that begins with `open` (after white space) reasons
   * first, and one that does not is read from its start.
   */
  reasoning?: { open: string; close: string; inside: boolean };
}

/** The XML form's literals (see CallGrammar.xml); its heads are each tool's `<function=name>`. */
interface XmlGrammar {
  /** Per tool: `<parameter=key>` for each of its keys, then `</function>` (last). */
  bodies: Uint8Array[][];
  /** `</parameter>`, and its KMP failure function. */
  valueEnd: Uint8Array;
  valueFail: Int32Array;
  /** The KMP failure function of the grammar's close: a value may not hold that text (the call would end). */
  closeFail: Int32Array;
}

/** A grammar ready to run: bytes, the opening's automaton, compiled schemas. */
export interface CompiledCallGrammar {
  trigger: Uint8Array;
  /** KMP failure function of `trigger`: fail[i] = the longest proper border of trigger[0, i]. */
  fail: Int32Array;
  atStart: boolean;
  array: boolean;
  single: boolean;
  close: Uint8Array;
  heads: Uint8Array[];
  schemas: SchemaNode[];
  xml?: XmlGrammar;
  /** The reasoning before the reply (see CallGrammar.reasoning): its markers, the close's failure function. */
  reasoning?: { open: Uint8Array; close: Uint8Array; closeFail: Int32Array; inside: boolean };
}

const utf8 = (s: string) => new TextEncoder().encode(s);

/** Compiles a grammar (throws SchemaError for a schema the recogniser cannot enforce: the host checked them). */
export function compileCallGrammar(g: CallGrammar): CompiledCallGrammar {
  if (g.calls.length === 0 && !g.xml?.tools.length) throw new Error('a call grammar needs at least one call');
  if (g.trigger === '' && (g.array || g.xml || g.calls.some((c) => c.head !== ''))) {
    throw new Error('a call that is a bare JSON object has no array, no head and no XML');
  }
  const trigger = utf8(g.trigger);
  const valueEnd = utf8('</parameter>');
  return {
    trigger,
    fail: failureOf(trigger),
    atStart: g.trigger === '',
    array: g.array,
    single: g.single === true,
    close: utf8(g.close),
    heads: g.xml ? g.xml.tools.map((t) => utf8(`<function=${t.name}>`)) : g.calls.map((c) => utf8(c.head)),
    schemas: g.calls.map((c) => compileSchema(c.schema)),
    ...(g.reasoning
      ? {
          reasoning: {
            open: utf8(g.reasoning.open),
            close: utf8(g.reasoning.close),
            closeFail: failureOf(utf8(g.reasoning.close)),
            inside: g.reasoning.inside,
          },
        }
      : {}),
    ...(g.xml
      ? {
          xml: {
            bodies: g.xml.tools.map((t) => [...t.params.map((k) => utf8(`<parameter=${k}>`)), utf8('</function>')]),
            valueEnd,
            valueFail: failureOf(valueEnd),
            closeFail: failureOf(utf8(g.close)),
          },
        }
      : {}),
  };
}

/** KMP failure function: fail[i] = the longest proper border of t[0, i]. */
export function failureOf(t: Uint8Array): Int32Array {
  const fail = new Int32Array(t.length);
  for (let i = 1, k = 0; i < t.length; i++) {
    while (k > 0 && t[i] !== t[k]) k = fail[k - 1] as number;
    if (t[i] === t[k]) k++;
    fail[i] = k;
  }
  return fail;
}

/** A KMP automaton's step: with n bytes of `t` matched (`fail` its failure function), how many after byte b. */
export function matchStep(t: Uint8Array, fail: Int32Array, n: number, b: number): number {
  while (n > 0 && b !== t[n]) n = fail[n - 1] as number;
  return b === t[n] ? n + 1 : n;
}

/**
 * Among byte strings `alts`, one that agrees with alts[cur]'s first n bytes (cur < 0: any, at n 0) and has b at
 * n; -1 when none (alternatives that share the bytes read all do).
 */
function nextAlternative(alts: readonly Uint8Array[], cur: number, n: number, b: number): number {
  for (let j = 0; j < alts.length; j++) {
    const h = alts[j] as Uint8Array;
    if (h.length <= n || h[n] !== b) continue;
    if (cur >= 0 && n > 0 && !samePrefix(h, alts[cur] as Uint8Array, n)) continue;
    return j;
  }
  return -1;
}

/** Where the reply is. */
enum P {
  /** Free text; `n` bytes of the opening matched. */
  Free,
  /** Free text for good (a bare-JSON form whose reply did not begin with `{`, or after its call). */
  Rest,
  /** A bare-JSON form's reply before its first byte that is not white space; `n` white-space bytes. */
  Start,
  /** After the opening: white space, then `[` for an array, else the call. */
  Lead,
  /** In an array, before a call: white space. */
  Item,
  /** The call's head (a name and marker, or the XML form's `<function=name>`); `n` bytes of heads[head] read. */
  Head,
  /** After the head: white space, then `{`. */
  PreObject,
  /** Inside the call's object (obj), whose schema is schemas[head]. */
  Object,
  /** In an array, after a call: white space, then `,` or `]`. */
  After,
  /** White space before the closing text. */
  CloseSpace,
  /** The closing text; `n` bytes of it read. */
  Close,
  /** XML form, in tool head's call, between its parts: white space (`n` bytes). */
  XmlSpace,
  /** XML form, in tool head's call: `<parameter=key>` or `</function>` (`n` bytes of alternative alt read). */
  XmlBody,
  /**
   * XML form: a parameter's value, free text up to `</parameter>` (`n` bytes of that matched), without the
   * form's close (`alt` bytes of it matched).
   */
  XmlValue,
  /** Before the reply's first byte that is not white space, where a reasoning may open; `n` bytes of it read. */
  Opening,
  /** Inside the reasoning, which holds no call; `n` bytes of its close matched. */
  Thinking,
}

/** The constraint's state: never changed (a step makes a new one), so a candidate token is tried on it. */
export interface CallState {
  readonly p: P;
  readonly n: number;
  readonly head: number;
  readonly obj: SchemaState | null;
  /** XmlBody: the alternative of the tool's body being read (-1 before its first byte). */
  readonly alt: number;
}

/** Longest run of white space around a call's parts (a model cannot pad a call with blank lines forever). */
export const MAX_CALL_WHITESPACE = 32;

const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const LBRACE = 0x7b;
const RBRACE = 0x7d;

/** Phases where the reply is free text (special tokens, an empty token and the end of the reply are allowed). */
const isFree = (p: P) => p === P.Free || p === P.Rest || p === P.Start || p === P.Opening || p === P.Thinking;

/** Where the reply is read from once any reasoning is over. */
const replyStart = (g: CompiledCallGrammar) => (g.atStart ? P.Start : P.Free);

/**
 * Feeds bytes[from, to) to state `st`; the new state, or null when no reply of the grammar can continue with
 * them (`st` unchanged).
 */
export function feedCallBytes(
  g: CompiledCallGrammar,
  st: CallState,
  bytes: Uint8Array,
  from: number,
  to: number,
): CallState | null {
  let { p, n, head, obj, alt } = st;
  // After a call (or the close): free, or for good in the bare-JSON form.
  const freeAgain = () => {
    p = g.atStart ? P.Rest : P.Free;
    n = 0;
    obj = null;
  };
  const afterCall = () => {
    obj = null;
    n = 0;
    if (g.array) p = P.After;
    else if (g.close.length > 0) p = P.CloseSpace;
    else freeAgain();
  };
  // The call's head begins: a head of '' (the object names its tool) goes straight to the object.
  const toHead = () => {
    n = 0;
    if (g.heads.length === 1 && (g.heads[0] as Uint8Array).length === 0) {
      head = 0;
      p = P.PreObject;
    } else {
      head = -1;
      p = P.Head;
    }
  };
  let i = from;
  while (i < to) {
    const b = bytes[i] as number;
    switch (p) {
      case P.Opening: {
        const open = (g.reasoning as NonNullable<CompiledCallGrammar['reasoning']>).open;
        if (n === 0 && isWs(b)) {
          i++;
        } else if (b === open[n]) {
          i++;
          if (++n === open.length) {
            p = P.Thinking;
            n = 0;
          }
        } else {
          // No reasoning: the reply is read from its start, the part of the marker it wrote included.
          const read = n;
          p = replyStart(g);
          n = 0;
          if (p === P.Free) for (let k = 0; k < read; k++) n = matchStep(g.trigger, g.fail, n, open[k] as number);
          else if (read > 0) p = P.Rest;
        }
        continue;
      }
      case P.Thinking: {
        const r = g.reasoning as NonNullable<CompiledCallGrammar['reasoning']>;
        n = matchStep(r.close, r.closeFail, n, b);
        i++;
        if (n === r.close.length) {
          p = replyStart(g);
          n = 0;
        }
        continue;
      }
      case P.Rest:
        return { p, n: 0, head: 0, obj: null, alt: -1 };
      case P.Free: {
        n = matchStep(g.trigger, g.fail, n, b);
        i++;
        if (n === g.trigger.length) {
          p = P.Lead;
          n = 0;
        }
        continue;
      }
      case P.Start:
        if (isWs(b)) {
          if (++n > MAX_CALL_WHITESPACE) return null;
          i++;
        } else if (b === LBRACE) {
          head = 0;
          p = P.Object;
          obj = initialSchemaState();
        } else {
          p = P.Rest;
        }
        continue;
      case P.Lead:
      case P.Item:
      case P.PreObject:
      case P.After:
      case P.CloseSpace:
      case P.XmlSpace:
        if (isWs(b)) {
          if (++n > MAX_CALL_WHITESPACE) return null;
          i++;
          continue;
        }
        if (p === P.XmlSpace) {
          p = P.XmlBody;
          n = 0;
          alt = -1;
        } else if (p === P.Lead) {
          if (g.array) {
            if (b !== 0x5b) return null;
            p = P.Item;
            n = 0;
            i++;
          } else toHead();
        } else if (p === P.Item) {
          toHead();
        } else if (p === P.PreObject) {
          if (b !== LBRACE) return null;
          p = P.Object;
          obj = initialSchemaState();
        } else if (p === P.After) {
          if (b === 0x2c && !g.single) {
            p = P.Item;
            n = 0;
          } else if (b === 0x5d) {
            if (g.close.length > 0) {
              p = P.CloseSpace;
              n = 0;
            } else freeAgain();
          } else return null;
          i++;
        } else {
          if (b !== g.close[0]) return null;
          p = P.Close;
          n = 1;
          i++;
          if (n === g.close.length) freeAgain();
        }
        continue;
      case P.Close:
        if (b !== g.close[n]) return null;
        n++;
        i++;
        if (n === g.close.length) freeAgain();
        continue;
      case P.Head: {
        // A head consistent with the bytes so far that goes on with b (any other consistent one shares them).
        const next = nextAlternative(g.heads, head, n, b);
        if (next < 0) return null;
        head = next;
        n++;
        i++;
        if (n === (g.heads[head] as Uint8Array).length) {
          // The XML form's head is its `<function=name>`; the JSON forms' is followed by the arguments object.
          p = g.xml ? P.XmlSpace : P.PreObject;
          n = 0;
        }
        continue;
      }
      case P.XmlBody: {
        const x = g.xml as XmlGrammar;
        const alts = x.bodies[head] as Uint8Array[];
        const next = nextAlternative(alts, alt, n, b);
        if (next < 0) return null;
        alt = next;
        n++;
        i++;
        if (n === (alts[alt] as Uint8Array).length) {
          n = 0;
          // The last alternative is `</function>`: the call is over; the others open a parameter's value.
          if (alt === alts.length - 1) {
            alt = -1;
            if (g.close.length > 0) p = P.CloseSpace;
            else freeAgain();
          } else {
            alt = 0;
            p = P.XmlValue;
          }
        }
        continue;
      }
      case P.XmlValue: {
        const x = g.xml as XmlGrammar;
        // `alt` counts the bytes of the close matched: a value that writes it would end the call unfinished.
        if (g.close.length > 0) {
          alt = matchStep(g.close, x.closeFail, alt, b);
          if (alt === g.close.length) return null;
        }
        n = matchStep(x.valueEnd, x.valueFail, n, b);
        i++;
        if (n === x.valueEnd.length) {
          p = P.XmlSpace;
          n = 0;
          alt = -1;
        }
        continue;
      }
      case P.Object: {
        const schema = g.schemas[head] as SchemaNode;
        const whole = feedSchemaBytes(schema, obj as SchemaState, bytes, i, to);
        if (whole !== null) {
          if (whole.done) afterCall();
          else obj = whole;
          i = to;
          continue;
        }
        // The object may close inside the token, its rest being what comes after the call.
        let closedAt = -1;
        for (let k = i + 1; k < to; k++) {
          if (bytes[k - 1] !== RBRACE) continue;
          if (feedSchemaBytes(schema, obj as SchemaState, bytes, i, k)?.done) {
            closedAt = k;
            break;
          }
        }
        if (closedAt < 0) return null;
        afterCall();
        i = closedAt;
        continue;
      }
    }
  }
  return { p, n, head, obj, alt };
}

function samePrefix(a: Uint8Array, b: Uint8Array, n: number): boolean {
  for (let k = 0; k < n; k++) if (a[k] !== b[k]) return false;
  return true;
}

/** The state a reply begins in. */
export function initialCallState(g: CompiledCallGrammar): CallState {
  const p = g.reasoning ? (g.reasoning.inside ? P.Thinking : P.Opening) : replyStart(g);
  return { p, n: 0, head: 0, obj: null, alt: -1 };
}

/**
 * Whether a special token may come in this state: free text's, or the form's own text (a head's marker, a tag) —
 * never inside a JSON object or an XML value.
 */
export function takesSpecial(st: CallState): boolean {
  return st.p !== P.Object && st.p !== P.XmlValue;
}

/** Whether a reply in this state is inside a call (free text otherwise). */
export function inCall(st: CallState): boolean {
  return !isFree(st.p);
}

/** One row's lazy constraint over its tool calls. */
export class CallConstraint implements ReplyConstraint {
  private state: CallState;

  constructor(
    private readonly table: TokenTable,
    private readonly grammar: CompiledCallGrammar,
  ) {
    this.state = initialCallState(grammar);
  }

  /** A reply with calls ends when the model ends it (never because a call closed). */
  get done(): boolean {
    return false;
  }

  /** Whether the reply is inside a call now. */
  get inCall(): boolean {
    return inCall(this.state);
  }

  allows(id: number): boolean {
    const { bytes, offsets, special } = this.table;
    if (id < 0 || id >= offsets.length - 1) return false;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    // A token without bytes (an end token, often) writes nothing a call could take.
    if (from === to) return isFree(this.state.p);
    if (special.has(id) && !takesSpecial(this.state)) return false;
    return feedCallBytes(this.grammar, this.state, bytes, from, to) !== null;
  }

  // TokenConstraint's loop: each class keeps its own, so `allows` stays a direct call (a shared helper taking
  // it as a closure doubled the mask's time in bench/constraints.ts).
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
    const { bytes, offsets } = this.table;
    const next = feedCallBytes(this.grammar, this.state, bytes, offsets[id] as number, offsets[id + 1] as number);
    if (!next) throw new Error(`token ${id} does not continue the reply's tool call`);
    this.state = next;
  }
}
