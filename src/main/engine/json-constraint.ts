/**
 * JSON mode (OpenAI's `response_format: {"type": "json_object"}`): the reply
 * must be one JSON object. A byte-level pushdown recogniser of JSON (RFC 8259)
 * says, for every token of the vocabulary, whether its bytes can extend the
 * reply so far into a prefix of a valid object; the sampler draws only among
 * those that can, so the distribution it samples is the model's, renormalised
 * over valid continuations. The reply ends as soon as the object closes.
 *
 * Strings accept any valid UTF-8 from 0x20 up except `"` and `\` (escapes are
 * checked); a multi-byte character may be split across tokens, so a byte-level
 * vocabulary's pieces of characters stay possible, but a string cannot close
 * with one cut short, nor take bytes that are no character's. Numbers that
 * JavaScript would read as ±Infinity are refused at the digit that makes them
 * so. Runs of whitespace outside strings are capped, so a model cannot pad the
 * reply with blank lines forever.
 */
import { CallConstraint, type CompiledCallGrammar } from './call-constraint';
import { CallOrJsonConstraint } from './call-or-json';
import {
  expDigit,
  expNegative,
  feedSchemaBytes,
  fracDigit,
  initialSchemaState,
  intDigit,
  MAX_NUMBER_DIGITS,
  type Magnitude,
  magnitudeZero,
  type SchemaNode,
  type SchemaState,
  UTF8_NEXT,
} from './json-schema';
import { type CompiledBudget, ReasoningBudget } from './reasoning-budget';

/** Lexer states. Containers live on the stack; these say where inside a value the recogniser is. */
enum S {
  /** Before the top-level object: `{` must come first. */
  Start,
  /** A value is expected (after `:` or `,` in an array, or `[`). */
  Value,
  /** After `[`: a value or `]`. */
  ArrayFirst,
  /** After `{`: a key or `}`. */
  ObjectFirst,
  /** After `,` in an object: a key. */
  Key,
  /** After a key: `:`. */
  Colon,
  /** After a value inside a container: `,` or the container's close. */
  After,
  String,
  Escape,
  Unicode1,
  Unicode2,
  Unicode3,
  Unicode4,
  /** After `-`. */
  Minus,
  /** A number that is `0` or `-0` so far. */
  Zero,
  Int,
  /** After `.`. */
  Dot,
  Frac,
  /** After `e` / `E`. */
  Exp,
  /** After the exponent's sign. */
  ExpSign,
  ExpDigits,
  /** Inside `true`, `false` or `null`; `literal` and `at` say where. */
  Literal,
  /** The top-level object is closed. */
  Done,
}

const OBJECT = 1;
const ARRAY = 2;
/**
 * Deepest nesting of objects and arrays a reply may open. It bounds the state, so trying a candidate token
 * costs the same at any depth (the open containers are bits of four words).
 */
export const MAX_DEPTH = 128;
const LITERALS = ['true', 'false', 'null'].map((w) => [...w].map((c) => c.charCodeAt(0)));

/** Longest run of whitespace bytes accepted between tokens of the JSON text. */
export const MAX_WHITESPACE_RUN = 32;

/** Held here: through an import binding (tsx: the tests, the CLI from source), each read would cost a call. */
const UTF8 = UTF8_NEXT;

const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

/** The recogniser's whole state: small, so a candidate token is tried on a copy. In a number, its Magnitude. */
export interface JsonState extends Magnitude {
  s: S;
  /** Open containers: bit i of the 128 set when container i (outermost 0) is an array. */
  arrays: Uint32Array;
  depth: number;
  /** Whether the string being read is an object key. */
  key: boolean;
  literal: number;
  /** Where in a literal; digits of a number's part; in a string, its UTF-8 state (UTF8_NEXT). */
  at: number;
  ws: number;
}

export function initialJsonState(): JsonState {
  return {
    s: S.Start,
    arrays: new Uint32Array(MAX_DEPTH / 32),
    depth: 0,
    key: false,
    literal: 0,
    at: 0,
    ws: 0,
    sig: 0,
    cmp: 0,
    scale: 0,
    exp: 0,
  };
}

/** Copies `src` into `dst` without allocating. */
function copyInto(dst: JsonState, src: JsonState): JsonState {
  dst.s = src.s;
  dst.key = src.key;
  dst.literal = src.literal;
  dst.at = src.at;
  dst.ws = src.ws;
  dst.depth = src.depth;
  dst.sig = src.sig;
  dst.cmp = src.cmp;
  dst.scale = src.scale;
  dst.exp = src.exp;
  dst.arrays.set(src.arrays);
  return dst;
}

/** Opens a container; false beyond MAX_DEPTH. */
function push(st: JsonState, kind: number): boolean {
  if (st.depth === MAX_DEPTH) return false;
  const word = st.depth >>> 5;
  const bit = 1 << (st.depth & 31);
  st.arrays[word] = kind === ARRAY ? (st.arrays[word] as number) | bit : (st.arrays[word] as number) & ~bit;
  st.depth++;
  st.s = kind === ARRAY ? S.ArrayFirst : S.ObjectFirst;
  return true;
}

/** The innermost open container (0 when none). */
function top(st: JsonState): number {
  if (st.depth === 0) return 0;
  const i = st.depth - 1;
  return ((st.arrays[i >>> 5] as number) >>> (i & 31)) & 1 ? ARRAY : OBJECT;
}

/** Whether the state is complete: the top-level object closed. */
export function jsonDone(st: JsonState): boolean {
  return st.s === S.Done;
}

/** A value just ended: back to the container, or done at the top. */
function endValue(st: JsonState): void {
  st.s = st.depth === 0 ? S.Done : S.After;
}

/** Starts a value with byte `b`; false when no value starts with it. */
function startValue(st: JsonState, b: number): boolean {
  if (b === 0x7b) return push(st, OBJECT);
  if (b === 0x5b) return push(st, ARRAY);
  if (b === 0x22) {
    st.s = S.String;
    st.key = false;
    st.at = 0;
  } else if (b === 0x2d || isDigit(b)) {
    magnitudeZero(st);
    if (b === 0x2d) st.s = S.Minus;
    else if (b === 0x30) st.s = S.Zero;
    else {
      digitsBegin(st, S.Int);
      intDigit(st, b - 0x30);
    }
  } else {
    const literal = LITERALS.findIndex((w) => w[0] === b);
    if (literal < 0) return false;
    st.s = S.Literal;
    st.literal = literal;
    st.at = 1;
  }
  return true;
}

/** Closes the innermost container with `b` (`}` or `]`) if it is the right one. */
function close(st: JsonState, b: number): boolean {
  const open = top(st);
  if (!((b === 0x7d && open === OBJECT) || (b === 0x5d && open === ARRAY))) return false;
  st.depth--;
  endValue(st);
  return true;
}

/** Feeds one byte; false (and the state is then undefined) when the text can no longer be valid JSON. */
export function feedByte(st: JsonState, b: number): boolean {
  // Whitespace between tokens, capped; the reply starts with its `{`.
  if (isWs(b) && st.s !== S.String && st.s < S.Minus && st.s !== S.Start) {
    if (st.s >= S.Escape && st.s <= S.Unicode4) return false;
    st.ws++;
    return st.ws <= MAX_WHITESPACE_RUN;
  }
  if (st.s !== S.String) st.ws = 0;
  switch (st.s) {
    case S.Start:
      return b === 0x7b && push(st, OBJECT);
    case S.Value:
      return startValue(st, b);
    case S.ArrayFirst:
      return b === 0x5d ? close(st, b) : startValue(st, b);
    case S.ObjectFirst:
    case S.Key:
      if (b === 0x7d && st.s === S.ObjectFirst) return close(st, b);
      if (b !== 0x22) return false;
      st.s = S.String;
      st.key = true;
      st.at = 0;
      return true;
    case S.Colon:
      if (b !== 0x3a) return false;
      st.s = S.Value;
      return true;
    case S.After:
      if (b === 0x2c) {
        st.s = top(st) === OBJECT ? S.Key : S.Value;
        return true;
      }
      return close(st, b);
    case S.String:
      if (b >= 0x80) {
        st.at = UTF8[(st.at << 8) | b] as number;
        return st.at >= 0;
      }
      // Not inside a character (not one cut short).
      if (st.at !== 0) return false;
      if (b === 0x22) {
        if (st.key) st.s = S.Colon;
        else endValue(st);
        return true;
      }
      if (b === 0x5c) {
        st.s = S.Escape;
        return true;
      }
      return b >= 0x20;
    case S.Escape:
      if (b === 0x75) {
        st.s = S.Unicode1;
        return true;
      }
      if (!'"\\/bfnrt'.includes(String.fromCharCode(b))) return false;
      st.s = S.String;
      return true;
    case S.Unicode1:
    case S.Unicode2:
    case S.Unicode3:
    case S.Unicode4:
      if (!isHex(b)) return false;
      st.s = st.s === S.Unicode4 ? S.String : st.s + 1;
      return true;
    case S.Minus:
      if (b === 0x30) st.s = S.Zero;
      else if (isDigit(b)) {
        digitsBegin(st, S.Int);
        intDigit(st, b - 0x30);
      } else return false;
      return true;
    case S.Zero:
    case S.Int:
      // Digits that would make the number ±Infinity are refused.
      if (isDigit(b) && st.s === S.Int) return anotherDigit(st, MAX_NUMBER_DIGITS.int) && intDigit(st, b - 0x30);
      if (b === 0x2e) st.s = S.Dot;
      else if (b === 0x65 || b === 0x45) st.s = S.Exp;
      else return afterNumber(st, b);
      return true;
    case S.Dot:
      if (!isDigit(b)) return false;
      digitsBegin(st, S.Frac);
      fracDigit(st, b - 0x30);
      return true;
    case S.Frac:
      if (isDigit(b)) {
        if (!anotherDigit(st, MAX_NUMBER_DIGITS.frac)) return false;
        fracDigit(st, b - 0x30);
        return true;
      }
      if (b === 0x65 || b === 0x45) {
        st.s = S.Exp;
        return true;
      }
      return afterNumber(st, b);
    case S.Exp:
      if (b === 0x2b || b === 0x2d) {
        st.s = S.ExpSign;
        if (b === 0x2d) expNegative(st);
        return true;
      }
      if (!isDigit(b)) return false;
      digitsBegin(st, S.ExpDigits);
      return expDigit(st, b - 0x30);
    case S.ExpSign:
      if (!isDigit(b)) return false;
      digitsBegin(st, S.ExpDigits);
      return expDigit(st, b - 0x30);
    case S.ExpDigits:
      if (!isDigit(b)) return afterNumber(st, b);
      return anotherDigit(st, MAX_NUMBER_DIGITS.exp) && expDigit(st, b - 0x30);
    case S.Literal: {
      const word = LITERALS[st.literal] as number[];
      if (word[st.at] !== b) return false;
      st.at++;
      if (st.at === word.length) endValue(st);
      return true;
    }
    case S.Done:
      return false;
  }
  return false;
}

/** The first digit of a number's part (`at` counts its digits: MAX_NUMBER_DIGITS bounds them). */
function digitsBegin(st: JsonState, s: S): void {
  st.s = s;
  st.at = 1;
}

function anotherDigit(st: JsonState, most: number): boolean {
  if (st.at >= most) return false;
  st.at++;
  return true;
}

/** A number ends at the byte after it (never at the top level: the reply is an object). */
function afterNumber(st: JsonState, b: number): boolean {
  st.s = S.After;
  if (isWs(b)) {
    st.ws = 1;
    return true;
  }
  return feedByte(st, b);
}

/**
 * Feeds bytes[from, to) to `st` copied into `into`; returns `into`, or null when they cannot continue valid
 * JSON (then `into` holds garbage).
 */
export function feedBytes(
  st: JsonState,
  bytes: Uint8Array,
  from: number,
  to: number,
  into = initialJsonState(),
): JsonState | null {
  const next = copyInto(into, st);
  for (let i = from; i < to; i++) if (!feedByte(next, bytes[i] as number)) return null;
  return next;
}

/** Every token's bytes, packed: token i is bytes[offsets[i], offsets[i+1]). */
export interface TokenTable {
  bytes: Uint8Array;
  offsets: Uint32Array;
  /** Ids that are not text (special tokens): never part of a JSON reply. */
  special: ReadonlySet<number>;
}

/** Packs each id's bytes (the host knows them; the engine has no tokenizer). */
export function packTokens(pieces: readonly (readonly number[])[]): { bytes: Uint8Array; offsets: Uint32Array } {
  const offsets = new Uint32Array(pieces.length + 1);
  let total = 0;
  for (const [i, p] of pieces.entries()) {
    offsets[i] = total;
    total += p.length;
  }
  offsets[pieces.length] = total;
  const bytes = new Uint8Array(total);
  for (const [i, p] of pieces.entries()) bytes.set(p, offsets[i] as number);
  return { bytes, offsets };
}

/** A table from each id's bytes and the special ids. */
export function tokenTable(pieces: readonly (readonly number[])[], special: readonly number[]): TokenTable {
  return { ...packTokens(pieces), special: new Set(special) };
}

/** A byte-level recogniser a token constraint runs on. */
export interface Recogniser<S> {
  initial(): S;
  /** Whether bytes[from, to) can follow state `st` (st unchanged). */
  accepts(st: S, bytes: Uint8Array, from: number, to: number): boolean;
  /** The state after bytes[from, to), or null when they cannot follow `st` (st unchanged). */
  advance(st: S, bytes: Uint8Array, from: number, to: number): S | null;
  done(st: S): boolean;
}

/** Any JSON object (JSON mode). */
function objectRecogniser(): Recogniser<JsonState> {
  // Trials run on one scratch state, so the mask allocates nothing per token.
  const scratch = initialJsonState();
  return {
    initial: initialJsonState,
    accepts: (st, bytes, from, to) => feedBytes(st, bytes, from, to, scratch) !== null,
    advance: (st, bytes, from, to) => feedBytes(st, bytes, from, to),
    done: jsonDone,
  };
}

/** A JSON object that conforms to a compiled schema (structured output). */
function schemaRecogniser(root: SchemaNode): Recogniser<SchemaState> {
  return {
    initial: initialSchemaState,
    accepts: (st, bytes, from, to) => feedSchemaBytes(root, st, bytes, from, to) !== null,
    advance: (st, bytes, from, to) => feedSchemaBytes(root, st, bytes, from, to),
    done: (st) => st.done,
  };
}

/** What the sampler asks of a row's constraint. */
export interface ReplyConstraint {
  /** True once the reply is complete (the row ends). */
  readonly done: boolean;
  /** Whether token `id` can come next. */
  allows(id: number): boolean;
  /** Sets to -Infinity every logit in x[0, vocab) whose token cannot come next; how many stay possible. */
  mask(x: Float32Array, vocab: number): number;
  /** Advances past the token that was picked (one the mask allowed). */
  accept(id: number): void;
}

/** One row's constraint: which tokens may come next, and the state after the one that came. */
export class TokenConstraint<S> implements ReplyConstraint {
  private state: S;

  constructor(
    private readonly table: TokenTable,
    private readonly recogniser: Recogniser<S>,
    /** Where the reply is (one that could also have been a tool call until now: call-or-json.ts). */
    state: S = recogniser.initial(),
  ) {
    this.state = state;
  }

  /** True once the reply is complete: its object closed. */
  get done(): boolean {
    return this.recogniser.done(this.state);
  }

  /** Whether token `id` can continue the reply (the mask's test for one token). */
  allows(id: number): boolean {
    const { bytes, offsets, special } = this.table;
    if (id < 0 || id >= offsets.length - 1 || special.has(id)) return false;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    return from < to && this.recogniser.accepts(this.state, bytes, from, to);
  }

  /**
   * Sets to -Infinity every logit in x[0, vocab) whose token cannot continue the reply (special tokens,
   * empty tokens, and ids the table lacks included). Returns how many tokens stay possible.
   */
  mask(x: Float32Array, vocab: number): number {
    let allowed = 0;
    for (let id = 0; id < vocab; id++) {
      if (x[id] === Number.NEGATIVE_INFINITY) continue;
      if (this.allows(id)) allowed++;
      else x[id] = Number.NEGATIVE_INFINITY;
    }
    return allowed;
  }

  /** Advances past the token that was picked (one the mask allowed). */
  accept(id: number): void {
    const { bytes, offsets } = this.table;
    const next = this.recogniser.advance(this.state, bytes, offsets[id] as number, offsets[id + 1] as number);
    if (!next) throw new Error(`token ${id} does not continue the JSON reply`);
    this.state = next;
  }
}

/**
 * What a job asks of its replies' form, with the vocabulary's bytes: one JSON object (conforming to a compiled
 * schema for structured output), free text whose tool calls follow a call grammar, or (both) tool calls or the
 * JSON object.
 */
export interface ReplyForm {
  table: TokenTable;
  /** JSON mode (a JSON object; conforming to `schema` when there is one). */
  json?: boolean;
  schema?: SchemaNode;
  calls?: CompiledCallGrammar;
  /** A thinking model's reasoning around the rest: its budget, or (held) the answer's constraint after it. */
  budget?: CompiledBudget;
  /**
   * The tokens that end the reply (with `calls` beside JSON output: the end of a reply of calls; held after a
   * reasoning: refused before the answer).
   */
  ends?: ReadonlySet<number>;
}

/** A new row's constraint for a job's reply form (undefined: the reply is free). */
export function constraintFor(form: ReplyForm): ReplyConstraint | undefined {
  const { table, calls } = form;
  const json = (form.schema ? schemaRecogniser(form.schema) : form.json ? objectRecogniser() : undefined) as
    | Recogniser<unknown>
    | undefined;
  const make = (): ReplyConstraint | undefined =>
    calls && json
      ? new CallOrJsonConstraint(table, calls, json, (at) => new TokenConstraint(table, json, at), form.ends)
      : calls
        ? new CallConstraint(table, calls)
        : json
          ? new TokenConstraint(table, json)
          : undefined;
  const inner = make();
  if (!form.budget) return inner;
  // Held, the answer may be read from the reply's start while it might still open its reasoning (made anew then).
  const fresh = form.budget.held && inner ? () => make() as ReplyConstraint : undefined;
  return new ReasoningBudget(table, form.budget, inner, form.ends, fresh);
}
