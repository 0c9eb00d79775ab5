/**
 * Structured output (OpenAI's `response_format: {"type": "json_schema"}`): the
 * reply is one compact JSON object that conforms to a JSON Schema. The schema
 * is compiled into a small tree of value kinds, and a byte-level recogniser
 * walks it: an object writes every property the schema lists, in its order
 * (an instance with all of them is valid whether or not they are required);
 * strings, numbers, integers, enums and constants, booleans and null, arrays
 * with item counts, nested objects, and anyOf / type lists whose branches begin
 * differently (`["string", "null"]`, an optional object). JSON has no
 * whitespace outside strings. Keywords that constrain values in ways the
 * recogniser cannot enforce (pattern, format, minimum, $ref, …) are refused
 * with the schema path, never ignored.
 *
 * No npm packages: the engine process imports this file.
 */

/** A schema the recogniser cannot enforce: `path` names the place (`properties.age.minimum`). */
export class SchemaError extends Error {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}

/** Compiled value kinds. */
export type SchemaNode =
  | { k: 'object'; keys: Uint8Array[]; values: SchemaNode[] }
  | { k: 'array'; item: SchemaNode; min: number; max: number }
  | { k: 'string' }
  | { k: 'number'; integer: boolean }
  /** Byte strings in byte order, without repeats: the values of an enum, const, boolean or null. */
  | { k: 'literals'; options: Uint8Array[] }
  | { k: 'union'; branches: SchemaNode[] };

/** Keywords that only describe: accepted and ignored. */
const ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  '$schema',
  '$id',
  '$comment',
  'deprecated',
  'readOnly',
  'writeOnly',
  'required',
  'additionalProperties',
  'strict',
  'type',
  'properties',
  'items',
  'minItems',
  'maxItems',
  'enum',
  'const',
  'anyOf',
  'oneOf',
]);

const utf8 = (s: string) => new TextEncoder().encode(s);

/** Deepest nesting of schemas compiled (each level is a stack frame here, and in the engine). */
export const MAX_SCHEMA_DEPTH = 64;
/** Most values an enum may list. */
export const MAX_ENUM_VALUES = 4096;

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return (a[i] as number) - (b[i] as number);
  return a.length - b.length;
}

/** Literal values as the recogniser reads them: JSON text in byte order, repeats removed. */
function literals(values: unknown[]): SchemaNode {
  const sorted = values.map((v) => utf8(JSON.stringify(v))).sort(compareBytes);
  return {
    k: 'literals',
    options: sorted.filter((o, i) => i === 0 || compareBytes(o, sorted[i - 1] as Uint8Array) !== 0),
  };
}

/** The JSON Schema type names a value has (an integer is also a number). */
function typesOf(v: unknown): string[] {
  if (v === null) return ['null'];
  if (Array.isArray(v)) return ['array'];
  if (typeof v === 'number') return Number.isInteger(v) ? ['integer', 'number'] : ['number'];
  return [typeof v];
}

/** Keywords that shape a value, which const, enum and anyOf / oneOf must not be mixed with. */
const SHAPING = ['type', 'properties', 'items', 'minItems', 'maxItems', 'enum', 'const', 'anyOf', 'oneOf'];

/** Bytes a value of this node can start with (branches of a union must not share one). */
function firstBytes(node: SchemaNode): Set<number> {
  switch (node.k) {
    case 'object':
      return new Set([0x7b]);
    case 'array':
      return new Set([0x5b]);
    case 'string':
      return new Set([0x22]);
    case 'number':
      return new Set([0x2d, ...Array.from({ length: 10 }, (_, i) => 0x30 + i)]);
    case 'literals':
      return new Set(node.options.map((o) => o[0] as number));
    case 'union':
      return new Set(node.branches.flatMap((b) => [...firstBytes(b)]));
  }
}

function union(branches: SchemaNode[], path: string): SchemaNode {
  if (branches.length === 1) return branches[0] as SchemaNode;
  const seen = new Set<number>();
  for (const b of branches) {
    for (const byte of firstBytes(b)) {
      if (seen.has(byte)) {
        throw new SchemaError(
          path,
          `two alternatives can begin with "${String.fromCharCode(byte)}"; kvdesk picks an alternative by its first character, so they must begin differently (e.g. an object or null, a string or a number)`,
        );
      }
      seen.add(byte);
    }
  }
  return { k: 'union', branches };
}

function typeNode(type: string, schema: Record<string, unknown>, path: string, depth: number): SchemaNode {
  switch (type) {
    case 'object': {
      const props = schema.properties ?? {};
      if (typeof props !== 'object' || props === null || Array.isArray(props)) {
        throw new SchemaError(`${path}.properties`, 'must be an object of schemas');
      }
      const entries = Object.entries(props as Record<string, unknown>);
      const required = schema.required ?? [];
      if (!Array.isArray(required) || required.some((r) => typeof r !== 'string')) {
        throw new SchemaError(`${path}.required`, 'must be a list of property names');
      }
      const missing = (required as string[]).findIndex((r) => !Object.hasOwn(props as object, r));
      if (missing >= 0) {
        throw new SchemaError(
          `${path}.required[${missing}]`,
          `${JSON.stringify(required[missing])} is required but not among the properties; kvdesk writes the properties listed`,
        );
      }
      return {
        k: 'object',
        keys: entries.map(([key], i) => utf8(`${i === 0 ? '' : ','}${JSON.stringify(key)}:`)),
        values: entries.map(([key, value]) => compileNode(value, `${path}.properties.${key}`, depth + 1)),
      };
    }
    case 'array': {
      const min = schema.minItems ?? 0;
      const max = schema.maxItems ?? Number.POSITIVE_INFINITY;
      if (!Number.isInteger(min) || (min as number) < 0)
        throw new SchemaError(`${path}.minItems`, 'must be a whole number');
      if (max !== Number.POSITIVE_INFINITY && (!Number.isInteger(max) || (max as number) < (min as number))) {
        throw new SchemaError(`${path}.maxItems`, 'must be a whole number ≥ minItems');
      }
      if (schema.items === undefined) throw new SchemaError(`${path}.items`, 'is required for an array');
      return {
        k: 'array',
        item: compileNode(schema.items, `${path}.items`, depth + 1),
        min: min as number,
        max: max as number,
      };
    }
    case 'string':
      return { k: 'string' };
    case 'number':
    case 'integer':
      return { k: 'number', integer: type === 'integer' };
    case 'boolean':
      return literals([false, true]);
    case 'null':
      return literals([null]);
    default:
      throw new SchemaError(`${path}.type`, `unknown type ${JSON.stringify(type)}`);
  }
}

function compileNode(schema: unknown, path: string, depth: number): SchemaNode {
  if (depth > MAX_SCHEMA_DEPTH)
    throw new SchemaError(path, `schemas nested deeper than ${MAX_SCHEMA_DEPTH} are not supported`);
  if (schema === true || (typeof schema === 'object' && schema !== null && Object.keys(schema).length === 0)) {
    throw new SchemaError(path, 'an empty schema (any value) is not supported: give its type');
  }
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new SchemaError(path, 'must be a schema object');
  }
  const s = schema as Record<string, unknown>;
  for (const key of Object.keys(s)) {
    if (!ANNOTATIONS.has(key)) throw new SchemaError(`${path}.${key}`, `"${key}" is not supported by kvdesk`);
  }
  if (s.additionalProperties !== undefined && typeof s.additionalProperties !== 'boolean') {
    throw new SchemaError(`${path}.additionalProperties`, 'only true or false is supported');
  }
  // const, enum and anyOf / oneOf stand alone (with a type only where every literal has it).
  const alone = ['const', 'enum', 'anyOf', 'oneOf'].filter((k) => s[k] !== undefined);
  if (alone.length > 0) {
    const name = alone[0] as string;
    const beside = SHAPING.filter(
      (k) => k !== name && s[k] !== undefined && !(k === 'type' && name !== 'anyOf' && name !== 'oneOf'),
    );
    if (beside.length > 0) {
      throw new SchemaError(
        `${path}.${beside[0]}`,
        `"${beside[0]}" beside "${name}" is not supported: give one of them`,
      );
    }
  }
  if (s.const !== undefined || s.enum !== undefined) {
    const name = s.const !== undefined ? 'const' : 'enum';
    const values = s.const !== undefined ? [s.const] : s.enum;
    if (!Array.isArray(values) || values.length === 0)
      throw new SchemaError(`${path}.enum`, 'must be a non-empty array');
    if (values.length > MAX_ENUM_VALUES) {
      throw new SchemaError(`${path}.enum`, `lists ${values.length} values; at most ${MAX_ENUM_VALUES} are supported`);
    }
    if (s.type !== undefined) {
      const allowed = Array.isArray(s.type) ? s.type : [s.type];
      const bad = values.findIndex((v) => !typesOf(v).some((t) => allowed.includes(t)));
      if (bad >= 0) {
        throw new SchemaError(
          `${path}.${name}`,
          `${JSON.stringify(values[bad])} is not of type ${JSON.stringify(s.type)}`,
        );
      }
    }
    try {
      return literals(values);
    } catch {
      throw new SchemaError(`${path}.${name}`, 'a value is too deeply nested');
    }
  }
  const alternatives = s.anyOf ?? s.oneOf;
  if (alternatives !== undefined) {
    const name = s.anyOf !== undefined ? 'anyOf' : 'oneOf';
    if (!Array.isArray(alternatives) || alternatives.length === 0) {
      throw new SchemaError(`${path}.${name}`, 'must be a non-empty array of schemas');
    }
    return union(
      alternatives.map((a, i) => compileNode(a, `${path}.${name}[${i}]`, depth + 1)),
      `${path}.${name}`,
    );
  }
  if (s.type === undefined) throw new SchemaError(`${path}.type`, 'is required (or enum, const, anyOf)');
  const listed = Array.isArray(s.type) ? s.type : [s.type];
  if (listed.length === 0 || listed.some((t) => typeof t !== 'string')) {
    throw new SchemaError(`${path}.type`, 'must be a type name or a list of them');
  }
  // Every integer is a number: with both, the type is number.
  const types = listed.includes('number') ? listed.filter((t) => t !== 'integer') : listed;
  return union(
    (types as string[]).map((t) => typeNode(t, s, path, depth)),
    `${path}.type`,
  );
}

/** Compiles a schema whose root is an object; throws SchemaError naming what it cannot enforce. */
export function compileSchema(schema: unknown): SchemaNode {
  const root = compileNode(schema, 'schema', 0);
  if (root.k !== 'object') throw new SchemaError('schema.type', 'the root must be an object');
  return root;
}

/** Where the recogniser is inside one value. Frames are never changed: a step makes new ones. */
type Frame =
  /** An object: `step` even → writing literal step/2 (`at` bytes done); odd → value (step-1)/2 is being read. */
  | { k: 'object'; node: Extract<SchemaNode, { k: 'object' }>; step: number; at: number }
  /** An array: `count` items so far; `after` when an item just ended. */
  | { k: 'array'; node: Extract<SchemaNode, { k: 'array' }>; count: number; after: boolean; item: boolean }
  | { k: 'string'; esc: number }
  | { k: 'number'; integer: boolean; s: number }
  /** Options[lo, hi) (sorted) share the `at` bytes read so far; a complete one comes first. */
  | { k: 'literals'; options: Uint8Array[]; lo: number; hi: number; at: number };

// Number states: 1 after '-', 2 zero, 3 integer digits, 4 after '.', 5 fraction, 6 after 'e', 7 after its sign, 8 exponent.
const NUMBER_COMPLETE = new Set([2, 3, 5, 8]);
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

/**
 * The options of sorted[lo, hi) (which share their first `at` bytes) whose next byte is b, as a frame; null
 * when none. Two binary searches: an enum of thousands costs what one of three does.
 */
function narrow(options: Uint8Array[], lo: number, hi: number, at: number, b: number): Frame | null {
  // Byte `at` of each option, -1 for one that ends there (those sort first); non-decreasing over the range.
  const key = (i: number) => ((options[i] as Uint8Array).length > at ? ((options[i] as Uint8Array)[at] as number) : -1);
  const bound = (target: number) => {
    let a = lo;
    let z = hi;
    while (a < z) {
      const m = (a + z) >>> 1;
      if (key(m) < target) a = m + 1;
      else z = m;
    }
    return a;
  };
  const from = bound(b);
  const to = bound(b + 1);
  return from < to ? { k: 'literals', options, lo: from, hi: to, at: at + 1 } : null;
}

/** The frame of a value that starts with byte b, or null. */
function start(node: SchemaNode, b: number): Frame | null {
  switch (node.k) {
    case 'object':
      return b === 0x7b ? { k: 'object', node, step: 0, at: 1 } : null;
    case 'array':
      return b === 0x5b ? { k: 'array', node, count: 0, after: false, item: false } : null;
    case 'string':
      return b === 0x22 ? { k: 'string', esc: 0 } : null;
    case 'number':
      if (b === 0x2d) return { k: 'number', integer: node.integer, s: 1 };
      if (b === 0x30) return { k: 'number', integer: node.integer, s: 2 };
      return isDigit(b) ? { k: 'number', integer: node.integer, s: 3 } : null;
    case 'literals':
      return narrow(node.options, 0, node.options.length, 0, b);
    case 'union':
      for (const branch of node.branches) {
        const f = start(branch, b);
        if (f) return f;
      }
      return null;
  }
}

/** What one byte does to the top frame. */
type Step =
  | { t: 'stay'; frame: Frame }
  /** The frame stays (as `frame`) and a child value starts above it. */
  | { t: 'push'; frame: Frame; child: Frame }
  /** The frame's value ended with this byte. */
  | { t: 'end' }
  /** The frame's value ended before this byte: the byte belongs to the frame below. */
  | { t: 'endBefore' }
  | null;

/** An object's literal `i`: the key (with its comma) of value i, or the closing brace after the last value. */
function objectLiteral(node: Extract<SchemaNode, { k: 'object' }>, i: number): Uint8Array {
  if (i < node.keys.length) {
    const key = node.keys[i] as Uint8Array;
    // The opening brace is the frame's first byte: literal 0 is `{` + key 0 (or `{}`).
    return i === 0 ? new Uint8Array([0x7b, ...key]) : key;
  }
  return node.keys.length === 0 ? new Uint8Array([0x7b, 0x7d]) : new Uint8Array([0x7d]);
}

function stepFrame(f: Frame, b: number): Step {
  switch (f.k) {
    case 'object': {
      if (f.step % 2 === 1) {
        // A property's value: the frame stays as it is until the value ends (then the next literal).
        const child = start(f.node.values[(f.step - 1) / 2] as SchemaNode, b);
        return child ? { t: 'push', frame: f, child } : null;
      }
      const lit = objectLiteral(f.node, f.step / 2);
      if (lit[f.at] !== b) return null;
      const at = f.at + 1;
      if (at < lit.length) return { t: 'stay', frame: { ...f, at } };
      // The literal is written: the closing brace ends the object, a key is followed by its value.
      return f.step / 2 === f.node.keys.length ? { t: 'end' } : { t: 'stay', frame: { ...f, step: f.step + 1, at: 0 } };
    }
    case 'array': {
      const { min, max } = f.node;
      if (f.after) {
        if (b === 0x2c && f.count < max) return { t: 'stay', frame: { ...f, after: false, item: true } };
        if (b === 0x5d && f.count >= min) return { t: 'end' };
        return null;
      }
      if (!f.item && b === 0x5d && min === 0) return { t: 'end' };
      if (f.count >= max) return null;
      const child = start(f.node.item, b);
      return child ? { t: 'push', frame: { ...f, count: f.count + 1, after: true, item: false }, child } : null;
    }
    case 'string':
      if (f.esc === 0) {
        if (b === 0x22) return { t: 'end' };
        if (b === 0x5c) return { t: 'stay', frame: { k: 'string', esc: 1 } };
        return b >= 0x20 ? { t: 'stay', frame: f } : null;
      }
      if (f.esc === 1) {
        if (b === 0x75) return { t: 'stay', frame: { k: 'string', esc: 2 } };
        return '"\\/bfnrt'.includes(String.fromCharCode(b)) ? { t: 'stay', frame: { k: 'string', esc: 0 } } : null;
      }
      if (!isHex(b)) return null;
      return { t: 'stay', frame: { k: 'string', esc: f.esc === 5 ? 0 : f.esc + 1 } };
    case 'number': {
      const to = (s: number): Step => ({ t: 'stay', frame: { ...f, s } });
      switch (f.s) {
        case 1:
          return b === 0x30 ? to(2) : isDigit(b) ? to(3) : null;
        case 2:
        case 3:
          if (isDigit(b) && f.s === 3) return to(3);
          if (!f.integer && b === 0x2e) return to(4);
          if (!f.integer && (b === 0x65 || b === 0x45)) return to(6);
          break;
        case 4:
          return isDigit(b) ? to(5) : null;
        case 5:
          if (isDigit(b)) return to(5);
          if (b === 0x65 || b === 0x45) return to(6);
          break;
        case 6:
          return b === 0x2b || b === 0x2d ? to(7) : isDigit(b) ? to(8) : null;
        case 7:
          return isDigit(b) ? to(8) : null;
        case 8:
          if (isDigit(b)) return to(8);
          break;
      }
      return NUMBER_COMPLETE.has(f.s) ? { t: 'endBefore' } : null;
    }
    case 'literals': {
      const next = narrow(f.options, f.lo, f.hi, f.at, b);
      if (next) return { t: 'stay', frame: next };
      return (f.options[f.lo] as Uint8Array).length === f.at ? { t: 'endBefore' } : null;
    }
  }
}

/** The recogniser's state: open frames, outermost first; empty once the root object has closed. */
export interface SchemaState {
  stack: Frame[];
  done: boolean;
}

export function initialSchemaState(): SchemaState {
  return { stack: [], done: false };
}

/** Feeds one byte; the new state, or null when no conforming reply can continue with it. */
export function feedSchemaByte(root: SchemaNode, st: SchemaState, b: number): SchemaState | null {
  if (st.done) return null;
  if (st.stack.length === 0) {
    const f = start(root, b);
    return f ? { stack: [f], done: false } : null;
  }
  const stack = st.stack.slice();
  for (;;) {
    const top = stack[stack.length - 1];
    if (top === undefined) return null;
    const r = stepFrame(top, b);
    if (r === null) return null;
    if (r.t === 'stay') {
      stack[stack.length - 1] = r.frame;
      return { stack, done: false };
    }
    if (r.t === 'push') {
      stack[stack.length - 1] = r.frame;
      stack.push(r.child);
      return { stack, done: false };
    }
    stack.pop();
    const parent = stack[stack.length - 1];
    if (parent === undefined) {
      // Only the root object ends here, and it ends with its own closing brace.
      return r.t === 'end' ? { stack, done: true } : null;
    }
    // A value inside an object ended: the object goes on to its next literal.
    if (parent.k === 'object') stack[stack.length - 1] = { ...parent, step: parent.step + 1, at: 0 };
    if (r.t === 'end') return { stack, done: false };
    // endBefore: the byte is the parent's.
  }
}

/** Feeds bytes[from, to); the new state, or null when no conforming reply can continue with them. */
export function feedSchemaBytes(
  root: SchemaNode,
  st: SchemaState,
  bytes: Uint8Array,
  from: number,
  to: number,
): SchemaState | null {
  let next: SchemaState | null = st;
  for (let i = from; i < to && next; i++) {
    const b = bytes[i] as number;
    // Most bytes of a string change nothing: no new state (the mask tries every token of the vocabulary).
    const top = next.stack[next.stack.length - 1];
    if (top?.k === 'string' && top.esc === 0 && b >= 0x20 && b !== 0x22 && b !== 0x5c) continue;
    next = feedSchemaByte(root, next, b);
  }
  return next;
}
