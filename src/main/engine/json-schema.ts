/**
 * Structured output (OpenAI's `response_format: {"type": "json_schema"}`): the
 * reply is one JSON object that conforms to a JSON Schema. The schema
 * is compiled into a small tree of value kinds, and a byte-level recogniser
 * walks it: an object writes the properties the schema lists, in its order,
 * each of those its `required` names and any of the others (an optional one may
 * be left out, never moved; one whose properties are all optional may be `{}`;
 * keys it does not list are never written, whatever `additionalProperties`
 * says); strings, numbers, integers, enums and constants, booleans and null,
 * arrays with item counts, nested objects, and unions (anyOf, oneOf, type
 * lists). Free-form values: the empty schema (any JSON value), and an object that
 * lists no properties (any keys, each value conforming to its
 * `additionalProperties` schema, or any value), nesting up to MAX_VALUE_NESTING
 * open values. Outside strings, JSON has one space at most after a colon, a comma or
 * an opening brace (`{"a": 1, "b": [1, 2]}`, as Python's json.dumps and chat
 * templates' `tojson` write the calls models learn from), and no other white
 * space. Keywords that constrain
 * values in ways the recogniser cannot enforce (pattern, format, a number's
 * minimum, …) are refused with the schema path, never ignored. A `$ref` inside
 * the schema (`#/$defs/Name`, as Pydantic writes nested models; `#name`, a
 * schema's `$anchor`; an embedded schema's `$id`) is compiled as the schema it
 * points at, read against the `$id` of the schema it is written in (JSON Schema
 * 2020-12's base URI); a recursive one, another document's and `$dynamicRef` are
 * refused. An
 * integer's bounds (minimum, maximum and their exclusive forms, up to ±(2^53 − 1):
 * zod writes those two for every `.int()`) are enforced digit by digit.
 *
 * Optional properties: where the next key may be one of several (the next
 * optional property, any later one up to the next required one, or the closing
 * brace once only optional ones are left), the object's frame keeps them all:
 * it reads "a key among these", narrowed byte by byte as an enum's values are
 * (keys are distinct JSON strings, so no key's text is a prefix of another's:
 * `"a":` and `"ab":` part at the closing quote). That is one path, not a fork.
 *
 * Unions: the recogniser follows every alternative that still fits. Its state
 * is a set of paths, each a stack of frames (one per open value); at the start
 * of a union's value it forks into every alternative that accepts the byte, a
 * path that cannot take a byte dies, and when none is left the bytes cannot
 * continue a conforming reply. Paths that become the same (the alternatives of
 * `anyOf: [integer, number]` once the number ends) are merged, so the number of
 * paths is bounded by the schema, not by the reply's length. Alternatives that
 * begin differently (`["string", "null"]`, an optional object) never run side
 * by side. `anyOf` alternatives may overlap freely. `oneOf` needs exactly one
 * alternative to match, which a recogniser that accepts what any of them
 * accepts cannot check in general: kvdesk accepts a oneOf only when it can see
 * that no value matches two alternatives (they begin differently, they are
 * constants with no value in common, or they are objects with a required
 * property whose const / enum values they do not share: a discriminated union).
 * Work per byte grows with the paths alive, so schemas that could keep more than
 * MAX_SCHEMA_PATHS alive at once, or list more than MAX_UNION_ALTERNATIVES
 * alternatives in one union, are refused. The root is an object, or a union of
 * objects (one per tool of a tool call).
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
  | {
      k: 'object';
      /** The properties' values, in schema order. */
      values: SchemaNode[];
      /** Each property's key as written, `"key":`, sorted by bytes (no repeats, none a prefix of another). */
      keys: Uint8Array[];
      /** index[s]: the property (its place in schema order) whose key is keys[s]. */
      index: number[];
      /**
       * need[i] (i from 0 to values.length): the first required property at or after property i, values.length
       * when none is. After property i - 1 (or the opening brace), the next key is one of properties i to
       * need[i] (the last one there is), or the closing brace when need[i] is values.length.
       */
      need: number[];
    }
  | { k: 'array'; item: SchemaNode; min: number; max: number }
  | { k: 'string' }
  /** lo, hi: an integer's bounds (whole numbers, or ∓Infinity); a number (not an integer) has none. */
  | { k: 'number'; integer: boolean; lo: number; hi: number }
  /** Byte strings in byte order, without repeats: the values of an enum, const, boolean or null. */
  | { k: 'literals'; options: Uint8Array[] }
  /**
   * Alternatives, none of them a union and at most one of them literals. `first[b]` lists those whose value
   * can begin with byte b (null when none): a value that begins with b is read along each of them.
   */
  | { k: 'union'; branches: SchemaNode[]; first: (SchemaNode[] | null)[] }
  /**
   * An object whose keys are any strings (a free-form object: no `properties`, `additionalProperties` not false),
   * each value conforming to `value` (its `additionalProperties` schema; any value where it has none).
   */
  | { k: 'map'; value: SchemaNode }
  /** Any JSON value (the empty schema `{}`, `true`, a schema of descriptions alone). */
  | { k: 'any' };

type MapNode = Extract<SchemaNode, { k: 'map' }>;

/** Any JSON value: its kinds, read as the schema's own are (compact white space, finite numbers, UTF-8). */
export const ANY: SchemaNode = { k: 'any' };
const ANY_OBJECT: MapNode = { k: 'map', value: ANY };
const ANY_ARRAY: SchemaNode = { k: 'array', item: ANY, min: 0, max: Number.POSITIVE_INFINITY };
const ANY_STRING: SchemaNode = { k: 'string' };
const ANY_NUMBER: SchemaNode = {
  k: 'number',
  integer: false,
  lo: Number.NEGATIVE_INFINITY,
  hi: Number.POSITIVE_INFINITY,
};

/**
 * Deepest nesting of objects and arrays a reply may reach, as JSON mode's MAX_DEPTH (a path's stack holds one
 * frame more at most: the key, string, number or literal read inside the deepest): a compiled schema nests at
 * most MAX_SCHEMA_DEPTH levels, but any value (`{}`) and a free-form object's values may nest without end.
 */
export const MAX_VALUE_NESTING = 128;

/** The bound keywords, in the order an error names them. */
const BOUNDS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'] as const;

/** Keywords that only describe, or that typeNode reads: accepted here. */
const ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  '$schema',
  '$id',
  // Names for `$ref` ("#name"), read where the document's resources are indexed.
  '$anchor',
  '$dynamicAnchor',
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
  // OpenAPI's (Pydantic writes it beside a oneOf): which property tells the alternatives apart, which a oneOf's
  // check proves for itself.
  'discriminator',
  // An integer's bounds (typeNode reads them; on a number they are refused there).
  ...BOUNDS,
]);

const utf8 = (s: string) => new TextEncoder().encode(s);

/** Deepest nesting of schemas compiled (each level is a stack frame here, and in the engine). */
export const MAX_SCHEMA_DEPTH = 64;
/** Most values an enum may list. */
export const MAX_ENUM_VALUES = 4096;
/** Most alternatives one anyOf or oneOf may list. */
export const MAX_UNION_ALTERNATIVES = 64;
/**
 * Most paths (readings of the reply so far, one per alternative that still fits) a schema may keep alive at
 * once. Checking a byte costs about one step per path, and the mask checks every token of the vocabulary.
 */
export const MAX_SCHEMA_PATHS = 256;

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return (a[i] as number) - (b[i] as number);
  return a.length - b.length;
}

/** Byte strings in byte order, repeats removed. */
function literalOptions(options: Uint8Array[]): SchemaNode {
  const sorted = options.slice().sort(compareBytes);
  return {
    k: 'literals',
    options: sorted.filter((o, i) => i === 0 || compareBytes(o, sorted[i - 1] as Uint8Array) !== 0),
  };
}

/** Literal values as the recogniser reads them: JSON text in byte order, repeats removed. */
function literals(values: unknown[]): SchemaNode {
  return literalOptions(values.map((v) => utf8(JSON.stringify(v))));
}

/** A value's JSON text with object keys sorted: equal for values JSON Schema deems equal. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/** The JSON Schema type names a value has (an integer is also a number). */
function typesOf(v: unknown): string[] {
  if (v === null) return ['null'];
  if (Array.isArray(v)) return ['array'];
  if (typeof v === 'number') return Number.isInteger(v) ? ['integer', 'number'] : ['number'];
  return [typeof v];
}

/**
 * Keywords that shape a value, which const, enum and anyOf / oneOf must not be mixed with (an object's `required` and
 * `additionalProperties: false` too: beside a union they would have to hold in each of its objects, and dropped they
 * let a reply through that breaks them).
 */
const SHAPING = [
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'minItems',
  'maxItems',
  'enum',
  'const',
  'anyOf',
  'oneOf',
  ...BOUNDS,
];

/** Bytes a value of this node can start with. */
function firstBytes(node: SchemaNode): Set<number> {
  switch (node.k) {
    case 'object':
      return new Set([0x7b]);
    case 'array':
      return new Set([0x5b]);
    case 'string':
      return new Set([0x22]);
    case 'number': {
      // (An integer's bounds may leave out the sign, 0 or some first digits.)
      const bytes = new Set<number>();
      if (node.lo <= 0) bytes.add(0x2d);
      for (let d = 0; d <= 9; d++) if (reachable(d, false, node.lo, node.hi, d > 0)) bytes.add(0x30 + d);
      return bytes;
    }
    case 'literals':
      return new Set(node.options.map((o) => o[0] as number));
    case 'union':
      return new Set(node.branches.flatMap((b) => [...firstBytes(b)]));
    case 'map':
      return new Set([0x7b]);
    case 'any':
      return ANY_FIRST;
  }
}

/** Bytes any value can start with. */
const ANY_FIRST = new Set([
  0x7b,
  0x5b,
  0x22,
  0x2d,
  0x74,
  0x66,
  0x6e,
  ...Array.from({ length: 10 }, (_, d) => 0x30 + d),
]);

/**
 * Paths a value of each node can keep alive at once (unions record theirs; see `width`). Objects and arrays keep
 * theirs once counted: a definition a `$ref` names is one node wherever it is used, and counting its uses again
 * would take time exponential in how deep such uses nest.
 */
const widths = new WeakMap<SchemaNode, number>();

/**
 * Most paths the recogniser can follow at once inside a value of this node. The bytes of a JSON text say
 * where each value begins and ends whichever alternative reads them, so paths inside a value differ only in
 * the alternatives they took at unions within it: an object or array reads one child value at a time, and
 * once that value ends its paths are merged back into one (the frames below them are the same). A union that
 * a byte can begin along several alternatives adds up theirs.
 */
function width(node: SchemaNode): number {
  const known = widths.get(node);
  if (known !== undefined || node.k === 'union') return known ?? 1;
  if (node.k !== 'object' && node.k !== 'array' && node.k !== 'map') return 1;
  const w =
    node.k === 'object'
      ? node.values.reduce((most, v) => Math.max(most, width(v)), 1)
      : width(node.k === 'map' ? node.value : node.item);
  widths.set(node, w);
  return w;
}

/**
 * The union of alternatives (flattened, their literals merged into one); refused when it could keep too many
 * paths alive.
 */
function union(alternatives: SchemaNode[], path: string): SchemaNode {
  const branches: SchemaNode[] = [];
  const options: Uint8Array[] = [];
  for (const a of alternatives) {
    for (const b of a.k === 'union' ? a.branches : [a]) {
      if (b.k === 'literals') options.push(...b.options);
      else branches.push(b);
    }
  }
  if (options.length > 0) branches.push(literalOptions(options));
  if (branches.length === 1) return branches[0] as SchemaNode;
  const first: (SchemaNode[] | null)[] = Array.from({ length: 256 }, () => null);
  for (const b of branches) {
    for (const byte of firstBytes(b)) {
      const list = first[byte];
      if (list) list.push(b);
      else first[byte] = [b];
    }
  }
  let most = 1;
  for (const list of first) {
    const alike = list ? list.reduce((w, b) => w + width(b), 0) : 0;
    if (alike > most) most = alike;
  }
  if (most > MAX_SCHEMA_PATHS) {
    throw new SchemaError(
      path,
      `values of these alternatives that begin alike could be read ${most} ways at once; kvdesk follows at most ${MAX_SCHEMA_PATHS}: list fewer alternatives that begin alike (objects all begin with "{")`,
    );
  }
  const node: SchemaNode = { k: 'union', branches, first };
  widths.set(node, most);
  return node;
}

/** The const / enum values (canonical text) of each required property of an object schema that has them. */
function discriminators(schema: unknown): Map<string, Set<string>> {
  const tags = new Map<string, Set<string>>();
  const s = schema as Record<string, unknown>;
  if (s.type !== 'object' || !Array.isArray(s.required)) return tags;
  const props = (s.properties ?? {}) as Record<string, Record<string, unknown>>;
  for (const name of s.required as string[]) {
    const p = props[name] as Record<string, unknown>;
    const values = p.const !== undefined ? [p.const] : Array.isArray(p.enum) ? p.enum : null;
    if (values) tags.set(name, new Set(values.map(canonical)));
  }
  return tags;
}

/** The values a literal-only schema (const, enum, boolean, null) allows, as canonical text; null for others. */
function literalValues(schema: unknown): Set<string> | null {
  const s = schema as Record<string, unknown>;
  if (s.const !== undefined) return new Set([canonical(s.const)]);
  if (Array.isArray(s.enum)) return new Set(s.enum.map(canonical));
  if (s.type === 'boolean') return new Set(['false', 'true']);
  if (s.type === 'null') return new Set(['null']);
  return null;
}

const disjoint = (a: Set<string>, b: Set<string>) => ![...a].some((v) => b.has(v));

/**
 * oneOf needs exactly one alternative to match, and the recogniser accepts what any alternative accepts: refuses
 * alternatives unless no value can match two of them. Two are seen apart when they begin differently, when both
 * are constants (const, enum, boolean, null) with no value in common, or when both are objects that require one
 * property whose const / enum values they do not share (a discriminated union).
 */
function requireDisjoint(schemas: unknown[], nodes: SchemaNode[], path: string): void {
  const firsts = nodes.map(firstBytes);
  const tags = schemas.map(discriminators);
  const values = schemas.map(literalValues);
  for (let i = 0; i < nodes.length; i++) {
    for (let j = 0; j < i; j++) {
      const shared = [...(firsts[i] as Set<number>)].find((b) => (firsts[j] as Set<number>).has(b));
      if (shared === undefined) continue;
      const vi = values[i];
      const vj = values[j];
      if (vi && vj && disjoint(vi, vj)) continue;
      const ti = tags[i] as Map<string, Set<string>>;
      const tj = tags[j] as Map<string, Set<string>>;
      if ([...ti].some(([name, set]) => tj.has(name) && disjoint(set, tj.get(name) as Set<string>))) continue;
      throw new SchemaError(
        path,
        `alternatives ${j} and ${i} can both begin with "${String.fromCharCode(shared)}" and kvdesk cannot tell that no value matches both (oneOf needs exactly one to match): use anyOf, or give each object alternative a required property with a const (or enum) value of its own, e.g. "type": {"const": "a"}`,
      );
    }
  }
}

function typeNode(type: string, schema: Record<string, unknown>, path: string, depth: number, refs: Refs): SchemaNode {
  switch (type) {
    case 'object': {
      const extra = schema.additionalProperties;
      // Extra keys' values: their schema's, where additionalProperties gives one (also where properties are
      // listed: compiled so a schema kvdesk cannot hold is refused, though only listed keys are written then).
      const extraNode = isPlainObject(extra)
        ? compileNode(extra, `${path}.additionalProperties`, depth + 1, refs)
        : undefined;
      // A free-form object: any keys — none required: a required name needs its property listed.
      if (freeFormObject(schema)) {
        const required = schema.required ?? [];
        if (!Array.isArray(required) || required.some((r) => typeof r !== 'string')) {
          throw new SchemaError(`${path}.required`, 'must be a list of property names');
        }
        if (required.length > 0) {
          throw new SchemaError(
            `${path}.required[0]`,
            `${JSON.stringify(required[0])} is required but not among the properties; kvdesk writes only the properties listed`,
          );
        }
        return extraNode ? { k: 'map', value: extraNode } : ANY_OBJECT;
      }
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
          `${JSON.stringify(required[missing])} is required but not among the properties; kvdesk writes only the properties listed`,
        );
      }
      const values = entries.map(([key, value]) => compileNode(value, `${path}.properties.${key}`, depth + 1, refs));
      const written = entries.map(([key]) => utf8(`${JSON.stringify(key)}:`));
      const index = written
        .map((_, i) => i)
        .sort((x, y) => compareBytes(written[x] as Uint8Array, written[y] as Uint8Array));
      const isRequired = new Set(required as string[]);
      const need = new Array<number>(entries.length + 1);
      need[entries.length] = entries.length;
      for (let i = entries.length - 1; i >= 0; i--) {
        need[i] = isRequired.has((entries[i] as [string, unknown])[0]) ? i : (need[i + 1] as number);
      }
      return { k: 'object', values, keys: index.map((i) => written[i] as Uint8Array), index, need };
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
        item: compileNode(schema.items, `${path}.items`, depth + 1, refs),
        min: min as number,
        max: max as number,
      };
    }
    case 'string':
      return { k: 'string' };
    case 'number':
    case 'integer': {
      const integer = type === 'integer';
      const given = BOUNDS.find((k) => schema[k] !== undefined);
      if (given !== undefined && !integer) {
        throw new SchemaError(
          `${path}.${given}`,
          `"${given}" on a number is not supported by kvdesk (only an integer's bounds are): use "type": "integer", or leave the bound to the description`,
        );
      }
      const [lo, hi] = integerBounds(schema, path);
      return { k: 'number', integer, lo, hi };
    }
    case 'boolean':
      return literals([false, true]);
    case 'null':
      return literals([null]);
    default:
      throw new SchemaError(`${path}.type`, `unknown type ${JSON.stringify(type)}`);
  }
}

/**
 * Whether an object schema takes keys it does not list, and lists none: no `properties` (or `{}` beside an
 * `additionalProperties` that allows others), `additionalProperties` not false — a free-form object (a map).
 */
export function freeFormObject(schema: Record<string, unknown>): boolean {
  const extra = schema.additionalProperties;
  if (extra === false) return false;
  const props = schema.properties;
  return (
    props === undefined || (isPlainObject(props) && Object.keys(props as object).length === 0 && extra !== undefined)
  );
}

/**
 * Whether an object schema lists properties and allows others beside them (`additionalProperties` true or a
 * schema): kvdesk writes the listed ones only.
 */
export function listsBesideOthers(schema: Record<string, unknown>): boolean {
  const extra = schema.additionalProperties;
  const props = schema.properties;
  return isPlainObject(props) && Object.keys(props as object).length > 0 && extra !== undefined && extra !== false;
}

/** Largest bound an integer may have (zod writes ±this for every `.int()`); past it doubles skip integers. */
const MAX_BOUND = Number.MAX_SAFE_INTEGER;

/**
 * An integer schema's bounds as the least and greatest whole number it allows (∓Infinity where it sets none).
 * `exclusiveMinimum` / `exclusiveMaximum` may be numbers (JSON Schema 6 on) or booleans on the inclusive one
 * (draft 4, as OpenAPI 3.0 writes them).
 */
function integerBounds(schema: Record<string, unknown>, path: string): [number, number] {
  let lo = Number.NEGATIVE_INFINITY;
  let hi = Number.POSITIVE_INFINITY;
  for (const key of BOUNDS) {
    const v = schema[key];
    if (v === undefined || typeof v === 'boolean') {
      if (typeof v === 'boolean' && (key === 'minimum' || key === 'maximum')) {
        throw new SchemaError(`${path}.${key}`, 'must be a number');
      }
      continue;
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new SchemaError(`${path}.${key}`, 'must be a number');
    if (Math.abs(v) > MAX_BOUND) {
      throw new SchemaError(
        `${path}.${key}`,
        `${v} is beyond what kvdesk enforces (±${MAX_BOUND}, Number.MAX_SAFE_INTEGER): leave the bound out, or use one within it`,
      );
    }
    const exclusive =
      key.startsWith('exclusive') || schema[`exclusive${key[0]?.toUpperCase()}${key.slice(1)}`] === true;
    if (key === 'minimum' || key === 'exclusiveMinimum')
      lo = Math.max(lo, exclusive ? Math.floor(v) + 1 : Math.ceil(v));
    else hi = Math.min(hi, exclusive ? Math.ceil(v) - 1 : Math.floor(v));
  }
  for (const flag of ['exclusiveMinimum', 'exclusiveMaximum'] as const) {
    const v = schema[flag];
    if (typeof v === 'boolean' && schema[flag === 'exclusiveMinimum' ? 'minimum' : 'maximum'] === undefined) {
      throw new SchemaError(
        `${path}.${flag}`,
        `true or false needs a ${flag === 'exclusiveMinimum' ? 'minimum' : 'maximum'} beside it`,
      );
    }
  }
  if (lo > hi) {
    throw new SchemaError(
      path,
      `no integer is within its bounds (from ${lo} to ${hi}): check its minimum, maximum and their exclusive forms`,
    );
  }
  return [lo, hi];
}

/**
 * Whether an integer whose digits so far read v (negative when `neg`) can end within [lo, hi]: as it is, or, when
 * `more` digits may follow, as v·10^j + r (0 ≤ r < 10^j) for some j. v is never 0 with `more` (a JSON integer
 * begins with 0 only when it is 0).
 */
function reachable(v: number, neg: boolean, lo: number, hi: number, more: boolean): boolean {
  // The bounds of its magnitude.
  const least = neg ? -hi : lo;
  const most = neg ? -lo : hi;
  if (!more) return v >= least && v <= most;
  if (most === Number.POSITIVE_INFINITY) return true;
  for (let scale = 1; v * scale <= most; scale *= 10) if ((v + 1) * scale - 1 >= least) return true;
  return false;
}

const isPlainObject = (v: unknown): boolean => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A schema resource: the root, or a schema with an `$id` that is an address (its own document embedded in the
 * other, as kvdesk gives each tool's parameters inside a call's schema). `uri` is its `$id` read against the
 * enclosing resource's (the root's, where it has none, a stand-in address); `anchors` the schemas named in it by
 * `$anchor` (draft 6/7: an `$id` of `"#name"`; a `$dynamicAnchor` is a name for `$ref` too), each with its place,
 * or null where two schemas take the same name.
 */
interface Resource {
  schema: object;
  path: string;
  uri: string;
  anchors: Map<string, { schema: unknown; path: string } | null>;
  /** The resource it is embedded in (none for the root). */
  outer?: Resource;
}

/**
 * The resources of one schema document: by their address (each resource that takes it, in the order met: two
 * tools' parameters inside one call's schema may take the same), and for each schema in the document the resource
 * it is written in (the nearest enclosing one: its `$ref`s are read against that resource's address).
 */
interface ResourceIndex {
  root: Resource;
  byUri: Map<string, Resource[]>;
  scope: Map<object, Resource>;
}

/**
 * The address a root without an `$id` reads relative addresses against (a stand-in: the root itself takes no
 * address, so that an embedded `"$id": "schema.json"`, which this reads to the same, is no second root).
 */
const ROOT_URI = 'https://kvdesk.invalid/schema.json';

/** Keywords whose value is data, not schemas: an `$id` or `$anchor` inside is not one. */
const DATA = new Set(['const', 'enum', 'default', 'examples']);
/** Keywords whose value maps names to schemas (a property called "enum" is a schema). */
const NAMED_SCHEMAS = new Set(['properties', '$defs', 'definitions', 'patternProperties', 'dependentSchemas']);

/** `ref` read against `base`, without its fragment, and the fragment (decoded; '' where there is none). */
function splitUri(ref: string, base: string): { uri: string; fragment: string } {
  const hash = ref.indexOf('#');
  const raw = hash < 0 ? '' : ref.slice(hash + 1);
  let fragment: string;
  try {
    fragment = decodeURIComponent(raw);
  } catch {
    fragment = raw;
  }
  const before = hash < 0 ? ref : ref.slice(0, hash);
  if (before === '') return { uri: base, fragment };
  let uri: string;
  try {
    const url = new URL(before, base);
    url.hash = '';
    uri = url.href;
  } catch {
    // A base that is no hierarchy (`urn:…`) reads no relative address: the text as written.
    uri = before;
  }
  return { uri, fragment };
}

/** A key's place after `path`, as a pointer's places are named (`.key`, `["a b"]`, `[0]`). */
function placeOf(path: string, key: string, inArray: boolean): string {
  if (inArray) return `${path}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** Whether a schema starts a resource of its own: an `$id` that is an address (draft 6/7's `"#name"` is a name). */
const startsResource = (s: Record<string, unknown>) => typeof s.$id === 'string' && !s.$id.startsWith('#');

/** What an `$anchor` may be (JSON Schema 2020-12: an XML name without colons). */
const ANCHOR_NAME = /^[A-Za-z_][-A-Za-z0-9._]*$/;

/** Names a schema by `$anchor`, `$dynamicAnchor` or a draft 6/7 `$id` of `"#name"`, in `resource`. */
function addAnchors(s: Record<string, unknown>, path: string, resource: Resource): void {
  const names: unknown[] = [s.$anchor, s.$dynamicAnchor];
  if (typeof s.$id === 'string' && s.$id.startsWith('#') && s.$id.length > 1) names.push(s.$id.slice(1));
  for (const name of names) {
    if (typeof name !== 'string' || name === '') continue;
    const known = resource.anchors.get(name);
    if (known === undefined) resource.anchors.set(name, { schema: s, path });
    else if (known !== null && known.schema !== s) resource.anchors.set(name, null);
  }
}

/** The resources of the document `root` (read once per compile: one walk of the whole document). */
function indexOf(root: unknown): ResourceIndex {
  const doc = (typeof root === 'object' && root !== null ? root : {}) as Record<string, unknown>;
  const rootResource: Resource = {
    schema: doc,
    path: 'schema',
    uri: startsResource(doc) ? splitUri(doc.$id as string, ROOT_URI).uri : ROOT_URI,
    anchors: new Map(),
  };
  const index: ResourceIndex = { root: rootResource, byUri: new Map(), scope: new Map() };
  // Each value with its place, the resource around it, and whether its keys are names (of properties, definitions).
  const todo: Array<[unknown, string, Resource, boolean]> = [[doc, 'schema', rootResource, false]];
  while (todo.length > 0) {
    const [value, path, outer, names] = todo.pop() as [unknown, string, Resource, boolean];
    if (typeof value !== 'object' || value === null || index.scope.has(value)) continue;
    let resource = outer;
    if (!Array.isArray(value) && !names) {
      const s = value as Record<string, unknown>;
      if (s === doc) resource = rootResource;
      else if (startsResource(s)) {
        resource = { schema: s, path, uri: splitUri(s.$id as string, outer.uri).uri, anchors: new Map(), outer };
      }
      if (resource !== outer || (s === doc && startsResource(doc))) {
        const taking = index.byUri.get(resource.uri);
        if (!taking) index.byUri.set(resource.uri, [resource]);
        else if (!taking.includes(resource)) taking.push(resource);
      }
      addAnchors(s, path, resource);
    }
    index.scope.set(value, resource);
    const inArray = Array.isArray(value);
    for (const [key, child] of Object.entries(value)) {
      if (!inArray && !names && DATA.has(key)) continue;
      todo.push([child, placeOf(path, key, inArray), resource, !inArray && !names && NAMED_SCHEMAS.has(key)]);
    }
  }
  return index;
}

/**
 * The document's resources; the definitions being followed (a definition met again among them is a recursive
 * schema); those compiled already (a definition used in several places, however its references spell it, is
 * compiled once), with how many levels they nest; and the deepest level the compile has reached.
 */
interface Refs {
  index: ResourceIndex;
  active: unknown[];
  compiled: Map<unknown, { node: SchemaNode; height: number }>;
  deepest: number;
}

/** A compile's references, read in `root`. */
const refsIn = (root: unknown): Refs => ({ index: indexOf(root), active: [], compiled: new Map(), deepest: 0 });

/**
 * Keywords that only describe (definitions among them: read through `$ref` only): a schema of nothing else allows
 * any value, and they may stand beside a `$ref` (Pydantic writes a field's description there; zod-to-json-schema a
 * root reference with its definitions beside it).
 */
const DESCRIBING = new Set([
  'title',
  'description',
  'default',
  'examples',
  '$comment',
  'deprecated',
  'readOnly',
  'writeOnly',
  '$schema',
  '$id',
  '$anchor',
  '$dynamicAnchor',
  '$defs',
  'definitions',
]);

/** A reference: what it says, where it is written (for messages), and the keyword that holds it. */
interface Reference {
  ref: unknown;
  key: string;
  keyword: '$ref' | 'allOf';
  /** The schema the `$ref` is written in (its resource's address is what the reference is read against). */
  holder: Record<string, unknown>;
}

/**
 * The reference a schema stands for: its `$ref`, or the one schema of an `allOf` that holds nothing else (Pydantic
 * 1 and Pydantic 2 before 2.9 wrap a `$ref` with a description beside it so); undefined for other schemas.
 */
function referenceOf(s: Record<string, unknown>): Reference | undefined {
  if (s.$ref !== undefined) return { ref: s.$ref, key: '$ref', keyword: '$ref', holder: s };
  const all = s.allOf;
  if (Array.isArray(all) && all.length === 1 && isPlainObject(all[0])) {
    const only = all[0] as Record<string, unknown>;
    if (only.$ref !== undefined && Object.keys(only).every((k) => k === '$ref' || DESCRIBING.has(k))) {
      return { ref: only.$ref, key: 'allOf[0].$ref', keyword: 'allOf', holder: only };
    }
  }
  return undefined;
}

/**
 * Where a `$ref` written in `from` points inside the schema: read against the address of the resource `from` is
 * written in (the nearest enclosing schema with an `$id`), a JSON pointer (`#/$defs/Name`, `#/definitions/Name`)
 * from that resource's root, or the one a name (`#node`) names by `$anchor` in it; an address (`item.json`,
 * `item.json#/properties/a`) names the resource embedded with that `$id`. The schema there and its place. Throws
 * SchemaError for another document's reference, a name no schema takes, or a pointer to nothing.
 */
function resolveRef(ref: unknown, at: string, from: unknown, index: ResourceIndex): { schema: unknown; path: string } {
  if (typeof ref !== 'string') {
    throw new SchemaError(at, `must be a string ("#/$defs/Name" or "#name"), not ${JSON.stringify(ref)}`);
  }
  const scope = (typeof from === 'object' && from !== null && index.scope.get(from)) || index.root;
  const { uri, fragment } = splitUri(ref, scope.uri);
  // A fragment alone (`#/$defs/Name`, `#name`) is read in the resource the `$ref` is written in, whatever other
  // resource takes its address; an address names the nearest resource that takes it.
  const resource = ref === '' || ref.startsWith('#') ? scope : nearest(index.byUri.get(uri), scope);
  if (!resource) {
    throw new SchemaError(
      at,
      `${JSON.stringify(ref)} refers to another document, and kvdesk reads only references inside the schema: put that schema under "$defs" and refer to it as "#/$defs/Name"`,
    );
  }
  if (fragment !== '' && !fragment.startsWith('/')) {
    const named = resource.anchors.get(fragment);
    if (named === undefined) {
      throw new SchemaError(
        at,
        `${JSON.stringify(ref)} names no schema: no "$anchor": ${JSON.stringify(fragment)} in ${resource.path}`,
      );
    }
    if (named === null) {
      throw new SchemaError(
        at,
        `${JSON.stringify(ref)} is ambiguous: two schemas in ${resource.path} take the "$anchor" ${JSON.stringify(fragment)}`,
      );
    }
    return named;
  }
  let node: unknown = resource.schema;
  let where = resource.path;
  // (Percent-decoded once, as a whole, by splitUri: `%2525` is a key's `%25`.)
  for (const raw of fragment === '' ? [] : fragment.slice(1).split('/')) {
    const part = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    const next =
      typeof node === 'object' && node !== null && Object.hasOwn(node, part)
        ? (node as Record<string, unknown>)[part]
        : undefined;
    if (next === undefined) throw new SchemaError(at, `${JSON.stringify(ref)} points at nothing in the schema`);
    where = placeOf(where, part, Array.isArray(node));
    node = next;
  }
  return { schema: node, path: where };
}

/**
 * Of the resources that take one address, the one a reference written in `scope` names: `scope` or the resource
 * around it that takes it, else one inside the nearest of those around it (a tool's own, before another tool's).
 */
function nearest(taking: Resource[] | undefined, scope: Resource): Resource | undefined {
  if (!taking || taking.length < 2) return taking?.[0];
  const within = (r: Resource, around: Resource) => {
    for (let o: Resource | undefined = r; o; o = o.outer) if (o === around) return true;
    return false;
  };
  for (let around: Resource | undefined = scope; around; around = around.outer) {
    if (taking.includes(around)) return around;
    const inside = taking.find((r) => within(r, around));
    if (inside) return inside;
  }
  return taking[0];
}

/**
 * For the document `doc`: the resource (a schema object) a `$ref` written in `holder` reads its fragment in — the
 * one it is written in for a fragment alone, the one its address names — or undefined where none here takes it.
 */
export function refResources(doc: unknown): (ref: string, holder: object) => object | undefined {
  const index = indexOf(doc);
  return (ref, holder) => {
    const scope = index.scope.get(holder) ?? index.root;
    if (ref === '' || ref.startsWith('#')) return scope.schema;
    return nearest(index.byUri.get(splitUri(ref, scope.uri).uri), scope)?.schema;
  };
}

/** A schema with its references followed (for what reads schemas as written: a oneOf's alternatives). */
function derefed(schema: unknown, refs: Refs): unknown {
  let s = schema;
  for (let hops = 0; hops <= MAX_SCHEMA_DEPTH && isPlainObject(s); hops++) {
    const reference = referenceOf(s as Record<string, unknown>);
    if (!reference) return s;
    try {
      s = resolveRef(reference.ref, 'schema', reference.holder, refs.index).schema;
    } catch {
      return s;
    }
  }
  return s;
}

/**
 * `schema` with its references followed in `root` (a tool's parameters, say: what reads a schema as written, as
 * the XML tool-call forms read a parameter's type); as it is where one cannot be followed.
 */
export function followRefs(schema: unknown, root: unknown): unknown {
  return derefed(schema, refsIn(root));
}

/**
 * A reference (with only descriptions beside it): the schema it points at, compiled once however many places use
 * it — each of which must still leave room for its levels under MAX_SCHEMA_DEPTH.
 */
function compileRef(
  s: Record<string, unknown>,
  reference: Reference,
  path: string,
  depth: number,
  refs: Refs,
): SchemaNode {
  const beside = Object.keys(s).find((k) => k !== reference.keyword && !DESCRIBING.has(k));
  if (beside !== undefined) {
    throw new SchemaError(
      `${path}.${beside}`,
      `"${beside}" beside "$ref" is not supported: move it into the definition`,
    );
  }
  const target = resolveRef(reference.ref, `${path}.${reference.key}`, reference.holder, refs.index);
  const known = refs.compiled.get(target.schema);
  if (known) {
    if (depth + 1 + known.height > MAX_SCHEMA_DEPTH) {
      throw new SchemaError(path, `schemas nested deeper than ${MAX_SCHEMA_DEPTH} are not supported`);
    }
    refs.deepest = Math.max(refs.deepest, depth + 1 + known.height);
    return known.node;
  }
  if (refs.active.includes(target.schema)) {
    throw new SchemaError(
      `${path}.${reference.key}`,
      `${JSON.stringify(reference.ref)} refers back to itself (a recursive schema), which kvdesk cannot hold: give the nesting a fixed depth`,
    );
  }
  refs.active.push(target.schema);
  const outer = refs.deepest;
  refs.deepest = depth + 1;
  try {
    const node = compileNode(target.schema, target.path, depth + 1, refs);
    refs.compiled.set(target.schema, { node, height: refs.deepest - (depth + 1) });
    return node;
  } finally {
    refs.deepest = Math.max(outer, refs.deepest);
    refs.active.pop();
  }
}

function compileNode(schema: unknown, path: string, depth: number, refs: Refs): SchemaNode {
  if (depth > MAX_SCHEMA_DEPTH)
    throw new SchemaError(path, `schemas nested deeper than ${MAX_SCHEMA_DEPTH} are not supported`);
  if (depth > refs.deepest) refs.deepest = depth;
  // The empty schema (Pydantic's Any, a free-form field) allows any value.
  if (schema === true || (typeof schema === 'object' && schema !== null && Object.keys(schema).length === 0)) {
    return ANY;
  }
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new SchemaError(path, 'must be a schema object');
  }
  const s = schema as Record<string, unknown>;
  for (const key of ['$anchor', '$dynamicAnchor'] as const) {
    const name = s[key];
    if (name !== undefined && (typeof name !== 'string' || !ANCHOR_NAME.test(name))) {
      throw new SchemaError(
        `${path}.${key}`,
        `must be a name (a letter or "_", then letters, digits, "-", "_" or "."), not ${JSON.stringify(name)}`,
      );
    }
  }
  if (s.$dynamicRef !== undefined || s.$recursiveRef !== undefined) {
    const key = s.$dynamicRef !== undefined ? '$dynamicRef' : '$recursiveRef';
    throw new SchemaError(
      `${path}.${key}`,
      `"${key}" is not supported by kvdesk (it extends a recursive schema, which kvdesk cannot hold): use "$ref" to a schema of fixed depth`,
    );
  }
  const reference = referenceOf(s);
  if (reference) return compileRef(s, reference, path, depth, refs);
  for (const key of Object.keys(s)) {
    // Definitions are read through $ref only (Pydantic's and zod-to-json-schema's, often unused or empty).
    if ((key === '$defs' || key === 'definitions') && isPlainObject(s[key])) continue;
    if (!ANNOTATIONS.has(key)) throw new SchemaError(`${path}.${key}`, `"${key}" is not supported by kvdesk`);
  }
  const extra = s.additionalProperties;
  if (extra !== undefined && typeof extra !== 'boolean' && !isPlainObject(extra)) {
    throw new SchemaError(`${path}.additionalProperties`, 'must be true, false or a schema');
  }
  // const, enum and anyOf / oneOf stand alone (with a type only where every literal has it).
  const alone = ['const', 'enum', 'anyOf', 'oneOf'].filter((k) => s[k] !== undefined);
  if (alone.length > 0) {
    const name = alone[0] as string;
    const beside = SHAPING.filter(
      (k) =>
        k !== name &&
        s[k] !== undefined &&
        !(k === 'type' && name !== 'anyOf' && name !== 'oneOf') &&
        // Any other property allowed is what a union or a literal says anyway.
        !(k === 'additionalProperties' && s[k] === true),
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
    if (alternatives.length > MAX_UNION_ALTERNATIVES) {
      throw new SchemaError(
        `${path}.${name}`,
        `lists ${alternatives.length} alternatives; at most ${MAX_UNION_ALTERNATIVES} are supported`,
      );
    }
    const nodes = alternatives.map((a, i) => compileNode(a, `${path}.${name}[${i}]`, depth + 1, refs));
    if (name === 'oneOf') {
      requireDisjoint(
        alternatives.map((a) => derefed(a, refs)),
        nodes,
        `${path}.oneOf`,
      );
    }
    return union(nodes, `${path}.${name}`);
  }
  if (s.type === undefined) {
    // Descriptions alone (Pydantic writes a title for an Any field): any value.
    if (Object.keys(s).every((k) => DESCRIBING.has(k))) return ANY;
    throw new SchemaError(`${path}.type`, 'is required (or enum, const, anyOf)');
  }
  const listed = Array.isArray(s.type) ? s.type : [s.type];
  if (listed.length === 0 || listed.some((t) => typeof t !== 'string')) {
    throw new SchemaError(`${path}.type`, 'must be a type name or a list of them');
  }
  // Every integer is a number: with both, the type is number.
  const types = listed.includes('number') ? listed.filter((t) => t !== 'integer') : listed;
  // A bound on a schema of no number type would bind nothing: most likely another keyword was meant.
  const bound = BOUNDS.find((k) => s[k] !== undefined);
  if (bound !== undefined && !types.some((t) => t === 'integer' || t === 'number')) {
    const hint =
      s.type === 'string'
        ? ` (a string's length is "minLength" / "maxLength", which kvdesk does not hold)`
        : s.type === 'array'
          ? ` (an array's count of items is "minItems" / "maxItems")`
          : '';
    throw new SchemaError(
      `${path}.${bound}`,
      `"${bound}" bounds numbers, and this schema's type is ${JSON.stringify(s.type)}: leave it out${hint}`,
    );
  }
  return union(
    (types as string[]).map((t) => typeNode(t, s, path, depth, refs)),
    `${path}.type`,
  );
}

/**
 * Compiles a schema whose root is an object, or an anyOf / oneOf of objects; throws SchemaError naming what it
 * cannot enforce.
 */
export function compileSchema(schema: unknown): SchemaNode {
  const root = compileNode(schema, 'schema', 0, refsIn(schema));
  const isObject = (n: SchemaNode) => n.k === 'object' || n.k === 'map';
  if (!isObject(root) && !(root.k === 'union' && root.branches.every(isObject))) {
    const s = schema as Record<string, unknown>;
    throw new SchemaError(
      s.anyOf !== undefined ? 'schema.anyOf' : s.oneOf !== undefined ? 'schema.oneOf' : 'schema.type',
      'the root must be an object, or an anyOf / oneOf whose alternatives are all objects',
    );
  }
  return root;
}

/** Where the recogniser is inside one value. Frames are never changed: a step makes new ones. */
type Frame =
  /**
   * An object. `at` VALUE (VALUE_SPACED after one space): property i's value comes next (or is being read,
   * above this frame). AFTER: property i - 1 has been written: a comma or the closing brace comes next. Else a
   * key is being read (`at` bytes of it so far; at 0, after the opening brace or a comma, KEY_SPACED after one
   * space there): one of properties i to need[i], among the keys of keys[lo, hi) (those that begin with the
   * bytes read), at least one of which is one of them.
   */
  | { k: 'object'; node: Extract<SchemaNode, { k: 'object' }>; i: number; at: number; lo: number; hi: number }
  /**
   * An array: `count` items so far; `after` when an item just ended; `item` when one must come (after a comma);
   * both after a comma and one space.
   */
  | { k: 'array'; node: Extract<SchemaNode, { k: 'array' }>; count: number; after: boolean; item: boolean }
  /** `esc`: 0 between characters, 1 after a backslash, 2 to 5 in a `\u` escape, UTF8_ESC + u in a character. */
  | { k: 'string'; esc: number }
  /**
   * `n`: digits so far of the number's current part (its integer part, fraction or exponent). lo, hi: an
   * integer's bounds (see SchemaNode); then `v` is what its digits read so far and `neg` whether it has a `-`.
   */
  | ({
      k: 'number';
      integer: boolean;
      s: number;
      n: number;
      lo: number;
      hi: number;
      v: number;
      neg: boolean;
    } & Magnitude)
  /** Options[lo, hi) (sorted) share the `at` bytes read so far; a complete one comes first. */
  | { k: 'literals'; options: Uint8Array[]; lo: number; hi: number; at: number }
  /** A free-form object: where it is (one of the MAP_ states); its key or value is read above it. */
  | { k: 'map'; node: MapNode; at: number };

// A map frame's `at`: after `{` (a key or `}`), after it and one space (a key), after a comma (a key), after it and
// one space (a key), a key being read (above), after a key (`:`), after the colon (a value), after it and one space
// (a value), a value being read (above), after a value (`,` or `}`).
const MAP_OPEN = 0;
const MAP_OPEN_SPACED = 1;
const MAP_COMMA = 2;
const MAP_COMMA_SPACED = 3;
const MAP_KEY = 4;
const MAP_COLON = 5;
const MAP_VALUE = 6;
const MAP_VALUE_SPACED = 7;
const MAP_IN_VALUE = 8;
const MAP_AFTER = 9;
const mapFrame = (node: MapNode, at: number): Frame => ({ k: 'map', node, at });

type ObjectFrame = Extract<Frame, { k: 'object' }>;
type ArrayFrame = Extract<Frame, { k: 'array' }>;

// Frames are built by these (not by spreading), so each kind keeps one shape.
const objectFrame = (node: ObjectFrame['node'], i: number, at: number, lo: number, hi: number): Frame => ({
  k: 'object',
  node,
  i,
  at,
  lo,
  hi,
});
/** An object frame's `at` while a value is next or being read (see Frame). */
const VALUE = -2;
/** An object frame's `at` after a value (see Frame). */
const AFTER = -1;
/** An object frame's `at` after its value's colon and one space: the value comes next, without another. */
const VALUE_SPACED = -3;
/** An object frame's `at` after its comma (or opening brace) and one space: a key's quote comes next. */
const KEY_SPACED = -4;
/** The object frame below a value of property `parent.i` once that value has ended. */
const afterValue = (parent: ObjectFrame): Frame => objectFrame(parent.node, parent.i + 1, AFTER, 0, 0);
/** The frame below a value (or a free-form object's key) once it has ended. */
function afterChild(parent: Frame): Frame {
  if (parent.k === 'object') return afterValue(parent);
  if (parent.k === 'map') return mapFrame(parent.node, parent.at === MAP_KEY ? MAP_COLON : MAP_AFTER);
  return parent;
}
const arrayFrame = (node: ArrayFrame['node'], count: number, after: boolean, item: boolean): Frame => ({
  k: 'array',
  node,
  count,
  after,
  item,
});
type NumberFrame = Extract<Frame, { k: 'number' }>;
const numberFrame = (
  integer: boolean,
  s: number,
  n: number,
  m: Magnitude,
  lo: number,
  hi: number,
  v: number,
  neg: boolean,
): NumberFrame => ({
  k: 'number',
  integer,
  s,
  n,
  sig: m.sig,
  cmp: m.cmp,
  scale: m.scale,
  exp: m.exp,
  lo,
  hi,
  v,
  neg,
});
/** Whether a number frame has bounds to hold. */
const bounded = (f: { lo: number; hi: number }) =>
  f.lo !== Number.NEGATIVE_INFINITY || f.hi !== Number.POSITIVE_INFINITY;
const ZERO: Magnitude = { sig: 0, cmp: 0, scale: 0, exp: 0 };

/**
 * Most digits a number's parts may have (JSON sets none), so a model gone astray cannot run on with digits: 309
 * before the point (a finite double has no more; `intDigit` stops most numbers sooner), 24 after it, 3 in the
 * exponent. Every number JSON.stringify writes fits.
 */
export const MAX_NUMBER_DIGITS = { int: 309, frac: 24, exp: 3 } as const;
const DIGITS_OF_STATE: Record<number, number> = {
  3: MAX_NUMBER_DIGITS.int,
  5: MAX_NUMBER_DIGITS.frac,
  8: MAX_NUMBER_DIGITS.exp,
};

/**
 * The digits of 2^1024 - 2^970, the least value a double rounds to Infinity (half way from Number.MAX_VALUE to
 * 2^1024; the tie goes to the even one, 2^1024): 309 of them, the last not 0.
 */
const INFINITY_DIGITS = Uint8Array.from((2n ** 1024n - 2n ** 970n).toString(), (c) => c.charCodeAt(0) - 0x30);

/**
 * Enough of a number to tell whether JavaScript reads it as ±Infinity (JSON.parse would, and JSON.stringify
 * then writes null): its significant digits D (`sig` of them) make 0.D × 10^(scale + exp). D itself is not
 * kept, only how it compares with INFINITY_DIGITS, so the state stays small however many digits come.
 */
export interface Magnitude {
  sig: number;
  /** -1, 0 or 1: D against the first `sig` of INFINITY_DIGITS (0 beyond the last). */
  cmp: number;
  /** The decimal point's place in D: the digits before it, or minus the zeros after it before D begins. */
  scale: number;
  /** The exponent's digits so far (a negative exponent only shrinks the value: it sets sig to 0 instead). */
  exp: number;
}

/** The magnitude of a number before its first digit (or its `-`): zero. */
export function magnitudeZero(m: Magnitude): void {
  m.sig = 0;
  m.cmp = 0;
  m.scale = 0;
  m.exp = 0;
}

/** Whether m, with the point at `scale`, is at least 2^1024 - 2^970. */
function overflows(m: Magnitude, scale: number): boolean {
  if (m.sig === 0 || scale < INFINITY_DIGITS.length) return false;
  return scale > INFINITY_DIGITS.length || m.cmp > 0 || (m.cmp === 0 && m.sig >= INFINITY_DIGITS.length);
}

function significant(m: Magnitude, d: number): void {
  if (m.cmp === 0) {
    const t = m.sig < INFINITY_DIGITS.length ? (INFINITY_DIGITS[m.sig] as number) : 0;
    m.cmp = d < t ? -1 : d > t ? 1 : 0;
  }
  m.sig++;
}

/** Digit d of the integer part (past its leading zero, if any); false when the number then reads as Infinity. */
export function intDigit(m: Magnitude, d: number): boolean {
  significant(m, d);
  m.scale++;
  return !overflows(m, m.scale);
}

/**
 * Digit d after the point. It never makes a finite number infinite: the least infinite value is an integer
 * (so an integer part below it stays below with any fraction).
 */
export function fracDigit(m: Magnitude, d: number): void {
  if (m.sig === 0 && d === 0) m.scale--;
  else significant(m, d);
}

/** Digit d of the exponent; false when the number then reads as Infinity. */
export function expDigit(m: Magnitude, d: number): boolean {
  m.exp = m.exp * 10 + d;
  return !overflows(m, m.scale + m.exp);
}

/** A `-` after the `e`: the value can only shrink now (to 0 at worst, which JSON keeps). */
export function expNegative(m: Magnitude): void {
  m.sig = 0;
}

/**
 * UTF-8 in strings (RFC 3629): UTF8_NEXT[u << 8 | b] is the state after byte b ≥ 0x80 in state u, -1 when no
 * valid text goes on so. State 0: between characters; 1, 2: that many continuation bytes to come; 3 to 7 (after
 * E0, ED, F0, F1–F3, F4): the next one is from a narrower range (no overlong forms, no surrogates, nothing past
 * U+10FFFF), then 1 or 2 more. A byte-level vocabulary has tokens that are pieces of characters (and bytes
 * that are none): these keep a reply from writing what would decode to U+FFFD.
 */
export const UTF8_NEXT = new Int8Array(8 << 8).fill(-1);
for (const [u, lo, hi, next] of [
  [0, 0xc2, 0xdf, 1],
  [0, 0xe0, 0xe0, 3],
  [0, 0xe1, 0xec, 2],
  [0, 0xed, 0xed, 4],
  [0, 0xee, 0xef, 2],
  [0, 0xf0, 0xf0, 5],
  [0, 0xf1, 0xf3, 6],
  [0, 0xf4, 0xf4, 7],
  [1, 0x80, 0xbf, 0],
  [2, 0x80, 0xbf, 1],
  [3, 0xa0, 0xbf, 1],
  [4, 0x80, 0x9f, 1],
  [5, 0x90, 0xbf, 2],
  [6, 0x80, 0xbf, 2],
  [7, 0x80, 0x8f, 2],
] as const) {
  UTF8_NEXT.fill(next, (u << 8) | lo, ((u << 8) | hi) + 1);
}

/** A string frame's `esc` inside a character: UTF8_ESC + its UTF-8 state (1 to 7). */
const UTF8_ESC = 5;
/** String frames hold nothing but `esc`: one of each serves every string. */
const STRING_FRAMES: Frame[] = Array.from({ length: UTF8_ESC + 8 }, (_, esc) => ({ k: 'string', esc }));

// Number states: 1 after '-', 2 zero, 3 integer digits, 4 after '.', 5 fraction, 6 after 'e', 7 after its sign, 8 exponent.
const NUMBER_COMPLETE = new Set([2, 3, 5, 8]);
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

// Hot paths define no functions inside functions: each would be a new closure per call (and tsx names each one).

/**
 * The first of sorted options[lo, hi) (which share their first `at` bytes) whose byte `at` is ≥ target, an
 * option that ends there counting as -1 (those sort first; the bytes are non-decreasing over the range).
 */
function bound(options: Uint8Array[], lo: number, hi: number, at: number, target: number): number {
  let a = lo;
  let z = hi;
  while (a < z) {
    const m = (a + z) >>> 1;
    const o = options[m] as Uint8Array;
    if ((o.length > at ? (o[at] as number) : -1) < target) a = m + 1;
    else z = m;
  }
  return a;
}

/**
 * The options of sorted[lo, hi) (which share their first `at` bytes) whose next byte is b, as a frame; null
 * when none. Two binary searches: an enum of thousands costs what one of three does.
 */
function narrow(options: Uint8Array[], lo: number, hi: number, at: number, b: number): Frame | null {
  const from = bound(options, lo, hi, at, b);
  const to = bound(options, from, hi, at, b + 1);
  return from < to ? { k: 'literals', options, lo: from, hi: to, at: at + 1 } : null;
}

/**
 * The frame of a value that starts with byte b, or null; at a union whose alternatives can both begin with b,
 * one frame per alternative (the value forks).
 */
function start(node: SchemaNode, b: number): Frame | Frame[] | null {
  switch (node.k) {
    case 'object':
      return b === 0x7b ? objectFrame(node, 0, 0, 0, node.keys.length) : null;
    case 'array':
      return b === 0x5b ? arrayFrame(node, 0, false, false) : null;
    case 'string':
      return b === 0x22 ? (STRING_FRAMES[0] as Frame) : null;
    case 'number': {
      const { integer, lo, hi } = node;
      if (b === 0x2d) return lo <= 0 ? numberFrame(integer, 1, 1, ZERO, lo, hi, 0, true) : null;
      if (b === 0x30)
        return reachable(0, false, lo, hi, false) ? numberFrame(integer, 2, 1, ZERO, lo, hi, 0, false) : null;
      if (!isDigit(b) || !reachable(b - 0x30, false, lo, hi, true)) return null;
      const f = numberFrame(integer, 3, 1, ZERO, lo, hi, b - 0x30, false);
      intDigit(f, b - 0x30);
      return f;
    }
    case 'literals':
      return narrow(node.options, 0, node.options.length, 0, b);
    case 'map':
      return b === 0x7b ? mapFrame(node, MAP_OPEN) : null;
    case 'any':
      return start(
        b === 0x7b
          ? ANY_OBJECT
          : b === 0x5b
            ? ANY_ARRAY
            : b === 0x22
              ? ANY_STRING
              : isNumberStart(b)
                ? ANY_NUMBER
                : ANY_LITERALS,
        b,
      );
    case 'union': {
      // Branches are never unions, so each start below is one frame (and not null: `first` says they begin so).
      const branches = node.first[b];
      if (!branches) return null;
      if (branches.length === 1) return start(branches[0] as SchemaNode, b);
      const frames: Frame[] = [];
      for (const branch of branches) {
        const f = start(branch, b) as Frame | null;
        if (f) frames.push(f);
      }
      return frames.length > 1 ? frames : (frames[0] ?? null);
    }
  }
}

const isNumberStart = (b: number) => b === 0x2d || isDigit(b);
/** true, false and null, as any value's literals. */
const ANY_LITERALS = literals([true, false, null]);

/** What one byte does to the top frame. */
type Step =
  | { t: 'stay'; frame: Frame }
  /** The frame stays (as `frame`) and a child value starts above it (several: one path for each). */
  | { t: 'push'; frame: Frame; child: Frame | Frame[] }
  /** The root value starts (the stack was empty). */
  | { t: 'open'; child: Frame | Frame[] }
  /** The frame's value ended with this byte. */
  | { t: 'end' }
  /** The frame's value ended before this byte: the byte belongs to the frame below. */
  | { t: 'endBefore' }
  | null;

const END: Step = { t: 'end' };
const END_BEFORE: Step = { t: 'endBefore' };
const stay = (frame: Frame): Step => ({ t: 'stay', frame });

/**
 * Byte b of an object's key (after its quote): the keys of keys[lo, hi) whose next byte is b, while one of
 * them is a property the object may write next (i to need[i]); the value once the key (with its colon) is
 * written, for only one key is then left (none is a prefix of another).
 */
function stepKey(f: ObjectFrame, b: number): Step {
  const { node, i, at } = f;
  const keys = node.keys;
  let lo = f.lo;
  let hi = f.hi;
  if (hi - lo === 1) {
    // One key left (the usual case once a key's first bytes are read): it is one the object may write.
    if ((keys[lo] as Uint8Array)[at] !== b) return null;
  } else {
    // Byte `at` of keys[lo, hi) rises from the first to the last (none ends before it): most bytes a mask
    // tries fall outside, and cost two tests.
    if (b < ((keys[lo] as Uint8Array)[at] as number) || b > ((keys[hi - 1] as Uint8Array)[at] as number)) return null;
    if (hi - lo <= 8) {
      // (The last key's byte is at least b: this stops there at the latest.)
      while (((keys[lo] as Uint8Array)[at] as number) < b) lo++;
      if ((keys[lo] as Uint8Array)[at] !== b) return null;
      let end = lo + 1;
      while (end < hi && (keys[end] as Uint8Array)[at] === b) end++;
      hi = end;
    } else {
      lo = bound(keys, lo, hi, at, b);
      hi = bound(keys, lo, hi, at, b + 1);
      if (lo === hi) return null;
    }
    // Some key left must be one the object may write next.
    const index = node.index;
    const last = node.need[i] as number;
    let s = lo;
    while ((index[s] as number) < i || (index[s] as number) > last) if (++s === hi) return null;
  }
  if (at + 1 === (keys[lo] as Uint8Array).length) return stay(objectFrame(node, node.index[lo] as number, VALUE, 0, 0));
  return stay(objectFrame(node, i, at + 1, lo, hi));
}

/** A number's next state after byte b; 0 when the byte is not the number's (it may end there), -1 when wrong. */
function numberStep(s: number, integer: boolean, b: number): number {
  switch (s) {
    case 1:
      return b === 0x30 ? 2 : isDigit(b) ? 3 : -1;
    case 2:
    case 3:
      if (isDigit(b) && s === 3) return 3;
      if (!integer && b === 0x2e) return 4;
      if (!integer && (b === 0x65 || b === 0x45)) return 6;
      return 0;
    case 4:
      return isDigit(b) ? 5 : -1;
    case 5:
      if (isDigit(b)) return 5;
      if (b === 0x65 || b === 0x45) return 6;
      return 0;
    case 6:
      return b === 0x2b || b === 0x2d ? 7 : isDigit(b) ? 8 : -1;
    case 7:
      return isDigit(b) ? 8 : -1;
    default:
      return isDigit(b) ? 8 : 0;
  }
}

function stepFrame(f: Frame, b: number): Step {
  switch (f.k) {
    case 'object': {
      const { node, i, at } = f;
      if (at === VALUE || at === VALUE_SPACED) {
        // One space may follow the colon.
        if (b === 0x20 && at === VALUE) return stay(objectFrame(node, i, VALUE_SPACED, 0, 0));
        // A property's value: the frame stays as it is until the value ends (then afterValue).
        const child = start(node.values[i] as SchemaNode, b);
        return child ? { t: 'push', frame: f, child } : null;
      }
      const n = node.values.length;
      if (at === AFTER) {
        if (b === 0x2c) return i < n ? stay(objectFrame(node, i, 0, 0, node.keys.length)) : null;
        return b === 0x7d && node.need[i] === n ? END : null;
      }
      if (at === 0 || at === KEY_SPACED) {
        // Every key begins with its quote, after one space at most; the closing brace may follow the opening
        // one (not a comma, nor a space).
        if (b === 0x22) return i < n ? stay(objectFrame(node, i, 1, f.lo, f.hi)) : null;
        if (at === KEY_SPACED) return null;
        if (b === 0x20) return i < n ? stay(objectFrame(node, i, KEY_SPACED, f.lo, f.hi)) : null;
        return b === 0x7d && i === 0 && node.need[0] === n ? END : null;
      }
      return stepKey(f, b);
    }
    case 'array': {
      const { min, max } = f.node;
      // after and item together: a comma and one space were read, an item comes next.
      const spaced = f.after && f.item;
      if (f.after && !spaced) {
        if (b === 0x2c && f.count < max) return stay(arrayFrame(f.node, f.count, false, true));
        if (b === 0x5d && f.count >= min) return END;
        return null;
      }
      // One space may follow the comma.
      if (f.item && !spaced && b === 0x20) return stay(arrayFrame(f.node, f.count, true, true));
      if (!f.item && b === 0x5d && min === 0) return END;
      if (f.count >= max) return null;
      const child = start(f.node.item, b);
      return child ? { t: 'push', frame: arrayFrame(f.node, f.count + 1, true, false), child } : null;
    }
    case 'string':
      if (b >= 0x80) {
        // A character's byte (escapes are ASCII).
        if (f.esc !== 0 && f.esc <= UTF8_ESC) return null;
        const u = UTF8_NEXT[((f.esc === 0 ? 0 : f.esc - UTF8_ESC) << 8) | b] as number;
        return u < 0 ? null : stay(STRING_FRAMES[u === 0 ? 0 : UTF8_ESC + u] as Frame);
      }
      // Not inside a character (not one cut short).
      if (f.esc > UTF8_ESC) return null;
      if (f.esc === 0) {
        if (b === 0x22) return END;
        if (b === 0x5c) return stay(STRING_FRAMES[1] as Frame);
        return b >= 0x20 ? stay(f) : null;
      }
      if (f.esc === 1) {
        if (b === 0x75) return stay(STRING_FRAMES[2] as Frame);
        return '"\\/bfnrt'.includes(String.fromCharCode(b)) ? stay(STRING_FRAMES[0] as Frame) : null;
      }
      if (!isHex(b)) return null;
      return stay(STRING_FRAMES[f.esc === 5 ? 0 : f.esc + 1] as Frame);
    case 'number': {
      const s = numberStep(f.s, f.integer, b);
      if (s > 0) {
        const n = s === f.s ? f.n + 1 : 1;
        if (n > (DIGITS_OF_STATE[s] ?? 1)) return null;
        if (s <= 3 && bounded(f)) {
          // An integer's digit (or its 0): only one its bounds can still be met after.
          const v = s === 3 ? f.v * 10 + (b - 0x30) : 0;
          if (!reachable(v, f.neg, f.lo, f.hi, s === 3)) return null;
          const next = numberFrame(f.integer, s, n, f, f.lo, f.hi, v, f.neg);
          return s === 2 || intDigit(next, b - 0x30) ? stay(next) : null;
        }
        const next = numberFrame(f.integer, s, n, f, f.lo, f.hi, 0, f.neg);
        // Digits that would make the number ±Infinity are refused.
        if (s === 3) return intDigit(next, b - 0x30) ? stay(next) : null;
        if (s === 5) fracDigit(next, b - 0x30);
        else if (s === 8) return expDigit(next, b - 0x30) ? stay(next) : null;
        else if (b === 0x2d && s === 7) expNegative(next);
        return stay(next);
      }
      if (s !== 0 || !NUMBER_COMPLETE.has(f.s)) return null;
      return !bounded(f) || reachable(f.v, f.neg, f.lo, f.hi, false) ? END_BEFORE : null;
    }
    case 'literals': {
      const next = narrow(f.options, f.lo, f.hi, f.at, b);
      if (next) return stay(next);
      return (f.options[f.lo] as Uint8Array).length === f.at ? END_BEFORE : null;
    }
    case 'map':
      return stepMap(f, b);
  }
}

/** Byte b of a free-form object (as an object's, one space at most after its brace, a colon or a comma). */
function stepMap(f: Extract<Frame, { k: 'map' }>, b: number): Step {
  const { node, at } = f;
  switch (at) {
    case MAP_OPEN:
    case MAP_COMMA:
      if (b === 0x20) return stay(mapFrame(node, at + 1));
      if (b === 0x7d && at === MAP_OPEN) return END;
      return b === 0x22 ? { t: 'push', frame: mapFrame(node, MAP_KEY), child: STRING_FRAMES[0] as Frame } : null;
    case MAP_OPEN_SPACED:
    case MAP_COMMA_SPACED:
      return b === 0x22 ? { t: 'push', frame: mapFrame(node, MAP_KEY), child: STRING_FRAMES[0] as Frame } : null;
    case MAP_COLON:
      return b === 0x3a ? stay(mapFrame(node, MAP_VALUE)) : null;
    case MAP_VALUE:
    case MAP_VALUE_SPACED: {
      if (b === 0x20 && at === MAP_VALUE) return stay(mapFrame(node, MAP_VALUE_SPACED));
      const child = start(node.value, b);
      return child ? { t: 'push', frame: mapFrame(node, MAP_IN_VALUE), child } : null;
    }
    case MAP_AFTER:
      if (b === 0x2c) return stay(mapFrame(node, MAP_COMMA));
      return b === 0x7d ? END : null;
    default:
      // (A key or value is read above this frame.)
      return null;
  }
}

/**
 * The recogniser's state: `paths`, every reading of the reply so far that a conforming reply can continue,
 * each its open frames outermost first (usually one; an empty one before the first byte). Never changed: a
 * byte makes a new state. `done` once the root object has closed (then `paths` is empty).
 */
export interface SchemaState {
  readonly paths: readonly (readonly Frame[])[];
  readonly done: boolean;
}

export function initialSchemaState(): SchemaState {
  return { paths: [[]], done: false };
}

/**
 * The state once the root object has closed. When one path closes the root, every other one alive would close
 * it with the same byte: the bytes of a JSON text say where each value ends whichever alternative reads them,
 * so all paths agree on where the root ends (and nothing may follow it). Only the first to close is needed.
 */
const DONE: SchemaState = { paths: [], done: true };

// What `advance` did to a path.
const DEAD = 0;
const ALIVE = 1;
const CLOSED = 2;
/** Stacks a fork made besides the one `advance` was given (the first alternative stays on that one). */
const forked: Frame[][] = [];
/** Set by `advance` when a frame ended or a value forked: only then can two paths have become the same. */
let mayMerge = false;

/** Whether a child value is an object or array (a fork's alternatives all begin with the same byte). */
function opensContainer(child: Frame | Frame[]): boolean {
  const k = (Array.isArray(child) ? (child[0] as Frame) : child).k;
  return k === 'object' || k === 'array' || k === 'map';
}

/** Puts the child frame(s) of a `push` or `open` on the stack; a fork copies the stack for each other child. */
function pushChild(stack: Frame[], child: Frame | Frame[]): void {
  if (!Array.isArray(child)) {
    stack.push(child);
    return;
  }
  mayMerge = true;
  for (let i = 1; i < child.length; i++) forked.push([...stack, child[i] as Frame]);
  stack.push(child[0] as Frame);
}

/** Applies byte b to a stack the caller owns (changed in place) whose top frame's step is `r`. */
function advance(stack: Frame[], b: number, r: NonNullable<Step>): number {
  for (;;) {
    switch (r.t) {
      case 'stay':
        stack[stack.length - 1] = r.frame;
        return ALIVE;
      case 'push':
        // Any value and free-form objects nest as deep as the reply goes: bounded here.
        if (stack.length >= MAX_VALUE_NESTING + (opensContainer(r.child) ? 0 : 1)) return DEAD;
        stack[stack.length - 1] = r.frame;
        pushChild(stack, r.child);
        return ALIVE;
      case 'open':
        pushChild(stack, r.child);
        return ALIVE;
    }
    stack.pop();
    mayMerge = true;
    // Only the root object ends here, and it ends with its own closing brace.
    if (stack.length === 0) return r.t === 'end' ? CLOSED : DEAD;
    const parent = stack[stack.length - 1] as Frame;
    // A value inside an object ended: a comma or the object's closing brace comes next (a free-form object's key:
    // its colon).
    const next = afterChild(parent);
    stack[stack.length - 1] = next;
    if (r.t === 'end') return ALIVE;
    // endBefore: the byte is the parent's.
    const s = stepFrame(next, b);
    if (s === null) return DEAD;
    r = s;
  }
}

/**
 * Whether a stack whose top frame ends at byte b (step `r`) can take it, without changing the stack: a value
 * that ends before the byte hands it down, and most tokens a mask tries die there (a copy would be wasted).
 */
function survivesEnd(stack: readonly Frame[], b: number, r: NonNullable<Step>): boolean {
  for (let depth = stack.length - 1; ; depth--) {
    if (r.t !== 'end' && r.t !== 'endBefore') return true;
    if (depth === 0) return r.t === 'end';
    if (r.t === 'end') return true;
    const parent = stack[depth - 1] as Frame;
    const s = stepFrame(afterChild(parent), b);
    if (s === null) return false;
    r = s;
  }
}

/** The step byte b makes on a stack's top frame (the root's start on an empty stack). */
function stepTop(root: SchemaNode, stack: readonly Frame[], b: number): Step {
  // (Lengths are tested before indexing: reading index -1 of an array is slow.)
  if (stack.length > 0) return stepFrame(stack[stack.length - 1] as Frame, b);
  const child = start(root, b);
  return child ? { t: 'open', child } : null;
}

/** Whether byte b changes nothing on a stack: a plain ASCII byte inside a string, between characters. */
function inert(stack: readonly Frame[], b: number): boolean {
  if (b < 0x20 || b === 0x22 || b === 0x5c || b >= 0x80 || stack.length === 0) return false;
  const top = stack[stack.length - 1] as Frame;
  return top.k === 'string' && top.esc === 0;
}

/** Set by charRun: the string frame's `esc` after the bytes it read. */
let runEsc = 0;

/**
 * Reads bytes[i, to) from byte i (≥ 0x80) on while they are characters' bytes and plain ones of the string
 * that is the stack's top (if it is one, outside an escape): where it stopped (i itself when it read nothing),
 * -1 when a byte is no valid UTF-8 there. Frames are not made for each byte: a token of whole characters in a
 * string (most of a vocabulary, in many languages) costs a table lookup a byte, as ASCII ones cost a test.
 */
function charRun(stack: readonly Frame[], bytes: Uint8Array, i: number, to: number): number {
  if (stack.length === 0) return i;
  const top = stack[stack.length - 1] as Frame;
  if (top.k !== 'string' || (top.esc !== 0 && top.esc <= UTF8_ESC)) return i;
  let u = top.esc === 0 ? 0 : top.esc - UTF8_ESC;
  let j = i;
  for (; j < to; j++) {
    const c = bytes[j] as number;
    if (c >= 0x80) {
      u = UTF8_NEXT[(u << 8) | c] as number;
      if (u < 0) return -1;
    } else if (u !== 0 || c < 0x20 || c === 0x22 || c === 0x5c) break;
  }
  runEsc = u === 0 ? 0 : UTF8_ESC + u;
  return j;
}

// Merging paths: frames compare by content, schema nodes and option lists by identity.
function sameFrame(x: Frame, y: Frame): boolean {
  if (x === y) return true;
  switch (x.k) {
    case 'object':
      return y.k === 'object' && x.node === y.node && x.i === y.i && x.at === y.at && x.lo === y.lo && x.hi === y.hi;
    case 'array':
      return y.k === 'array' && x.node === y.node && x.count === y.count && x.after === y.after && x.item === y.item;
    case 'string':
      return y.k === 'string' && x.esc === y.esc;
    case 'number':
      return (
        y.k === 'number' &&
        x.integer === y.integer &&
        x.s === y.s &&
        x.lo === y.lo &&
        x.hi === y.hi &&
        x.v === y.v &&
        x.neg === y.neg
      );
    case 'literals':
      return y.k === 'literals' && x.options === y.options && x.lo === y.lo && x.hi === y.hi && x.at === y.at;
    case 'map':
      return y.k === 'map' && x.node === y.node && x.at === y.at;
  }
}

function samePath(a: readonly Frame[], b: readonly Frame[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  // Paths that differ mostly differ at the top.
  for (let i = a.length - 1; i >= 0; i--) if (!sameFrame(a[i] as Frame, b[i] as Frame)) return false;
  return true;
}

/** Small ids for schema nodes and option lists, for hashing frames. */
const ids = new WeakMap<object, number>();
let lastId = 0;
function idOf(o: object): number {
  let id = ids.get(o);
  if (id === undefined) {
    id = ++lastId;
    ids.set(o, id);
  }
  return id;
}

const mix = (h: number, v: number) => Math.imul(h ^ v, 0x01000193) >>> 0;

function frameHash(f: Frame): number {
  switch (f.k) {
    case 'object':
      return mix(mix(mix(mix(mix(1, idOf(f.node)), f.i), f.at), f.lo), f.hi);
    case 'array':
      return mix(mix(mix(2, idOf(f.node)), f.count), (f.after ? 1 : 0) + (f.item ? 2 : 0));
    case 'string':
      return mix(3, f.esc);
    case 'number':
      return mix(mix(4, f.integer ? 1 : 0), f.s);
    case 'literals':
      return mix(mix(mix(mix(5, idOf(f.options)), f.lo), f.hi), f.at);
    case 'map':
      return mix(mix(6, idOf(f.node)), f.at);
  }
}

/** A path's hash, from its length and its top frames (paths that differ mostly differ there; deep ones are long). */
function pathHash(p: readonly Frame[]): number {
  let h = p.length;
  for (let i = Math.max(0, p.length - 8); i < p.length; i++) h = mix(h, frameHash(p[i] as Frame));
  return h;
}

/** Paths up to this many are merged by comparing each pair; more, by hashing them first. */
const PAIRWISE_MERGE = 8;

/** Drops (in place) each path that is the same as an earlier one, and its `owned` entry. */
function merge(paths: Frame[][], owned: boolean[]): void {
  let n = 0;
  if (paths.length <= PAIRWISE_MERGE) {
    outer: for (let i = 0; i < paths.length; i++) {
      const p = paths[i] as Frame[];
      for (let j = 0; j < n; j++) if (samePath(paths[j] as Frame[], p)) continue outer;
      paths[n] = p;
      owned[n++] = owned[i] as boolean;
    }
  } else {
    const byHash = new Map<number, Frame[][]>();
    for (let i = 0; i < paths.length; i++) {
      const p = paths[i] as Frame[];
      const h = pathHash(p);
      const same = byHash.get(h);
      if (same?.some((q) => samePath(q, p))) continue;
      if (same) same.push(p);
      else byHash.set(h, [p]);
      paths[n] = p;
      owned[n++] = owned[i] as boolean;
    }
  }
  paths.length = n;
  owned.length = n;
}

/** Feeds one byte; the new state, or null when no conforming reply can continue with it. */
export function feedSchemaByte(root: SchemaNode, st: SchemaState, b: number): SchemaState | null {
  const one = new Uint8Array(1);
  one[0] = b;
  return feedSchemaBytes(root, st, one, 0, 1);
}

/** How many paths (readings of the reply so far) a state follows: 1 unless a union's alternatives begin alike. */
export function schemaPathCount(st: SchemaState): number {
  return st.paths.length;
}

/**
 * For states with several paths: per first byte, 0 not yet tried, 1 when no path can take it, 2 when one can
 * (the mask tries every token of the vocabulary on one state, and most die at their first byte on every path:
 * those then cost a lookup, not a step per path); then at IN_STRINGS, 1 when every path is inside a string.
 */
const firstByteFate = new WeakMap<SchemaState, Uint8Array>();
const IN_STRINGS = 256;

/** Whether every path's top frame is a string outside an escape (where a plain byte changes nothing). */
function allInStrings(paths: readonly (readonly Frame[])[]): boolean {
  for (const p of paths) {
    if (p.length === 0) return false;
    const top = p[p.length - 1] as Frame;
    if (top.k !== 'string' || top.esc !== 0) return false;
  }
  return true;
}

/**
 * Feeds bytes[from, to); the new state, or null when no conforming reply can continue with them. `st` is not
 * changed. The mask calls this for every token of the vocabulary, so with one path (the usual case) the stack
 * is copied once per token, and only when the token's first byte fits; bytes inside a string that change
 * nothing cost a test; a token that changes nothing returns `st` itself.
 */
export function feedSchemaBytes(
  root: SchemaNode,
  st: SchemaState,
  bytes: Uint8Array,
  from: number,
  to: number,
): SchemaState | null {
  if (from >= to) return st;
  if (st.done) return null;
  // With several paths: whether all are inside strings (kept up to date as `paths` changes).
  let strings = false;
  if (st.paths.length > 1) {
    const b = bytes[from] as number;
    let fate = firstByteFate.get(st);
    if (fate === undefined) {
      fate = new Uint8Array(257);
      fate[IN_STRINGS] = allInStrings(st.paths) ? 1 : 0;
      firstByteFate.set(st, fate);
    }
    strings = fate[IN_STRINGS] === 1;
    if (fate[b] === 0) {
      fate[b] = 2; // (so that the trial below steps the paths)
      fate[b] = feedSchemaBytes(root, st, new Uint8Array([b]), 0, 1) === null ? 1 : 2;
    }
    if (fate[b] === 1) return null;
  }
  // One path: `stack`, copied before its first change (`owned` after). Several: `paths`, each with its `owned`.
  let stack = st.paths[0] as Frame[];
  let owned = false;
  let paths: Frame[][] | null = st.paths.length > 1 ? (st.paths as Frame[][]) : null;
  let pathsOwned: boolean[] | null = null;
  for (let i = from; i < to; i++) {
    const b = bytes[i] as number;
    if (paths === null) {
      if (inert(stack, b)) continue;
      if (b >= 0x80) {
        const j = charRun(stack, bytes, i, to);
        if (j < 0) return null;
        if (j > i) {
          if (runEsc !== (stack[stack.length - 1] as Extract<Frame, { k: 'string' }>).esc) {
            if (!owned) stack = stack.slice();
            owned = true;
            stack[stack.length - 1] = STRING_FRAMES[runEsc] as Frame;
          }
          i = j - 1;
          continue;
        }
      }
      const r = stepTop(root, stack, b);
      if (r === null) return null;
      if (!owned) {
        if ((r.t === 'end' || r.t === 'endBefore') && !survivesEnd(stack, b, r)) return null;
        stack = stack.slice();
        owned = true;
      }
      const code = advance(stack, b, r);
      if (code === DEAD) return null;
      if (code === CLOSED) return i + 1 === to ? DONE : null;
      if (forked.length > 0) {
        paths = [stack, ...forked];
        pathsOwned = paths.map(() => true);
        forked.length = 0;
        merge(paths, pathsOwned);
        if (paths.length === 1) paths = null;
        else strings = allInStrings(paths);
      }
      continue;
    }
    if (strings && b >= 0x20 && b !== 0x22 && b !== 0x5c && b < 0x80) continue;
    let next: Frame[][] | null = null;
    let nextOwned: boolean[] = [];
    mayMerge = false;
    for (let j = 0; j < paths.length; j++) {
      let p = paths[j] as Frame[];
      let mine = pathsOwned?.[j] ?? false;
      if (!inert(p, b)) {
        const r = stepTop(root, p, b);
        if (r === null) continue;
        if (!mine) {
          if ((r.t === 'end' || r.t === 'endBefore') && !survivesEnd(p, b, r)) continue;
          p = p.slice();
          mine = true;
        }
        const code = advance(p, b, r);
        if (code === CLOSED) {
          forked.length = 0;
          return i + 1 === to ? DONE : null;
        }
        if (code === DEAD) continue;
      }
      if (next === null) {
        next = [];
        nextOwned = [];
      }
      next.push(p);
      nextOwned.push(mine);
      for (const f of forked) {
        next.push(f);
        nextOwned.push(true);
      }
      forked.length = 0;
    }
    if (next === null) return null;
    if (mayMerge) merge(next, nextOwned);
    if (next.length === 1) {
      stack = next[0] as Frame[];
      owned = nextOwned[0] as boolean;
      paths = null;
    } else {
      paths = next;
      pathsOwned = nextOwned;
      strings = allInStrings(paths);
    }
  }
  if (paths !== null) return paths === st.paths ? st : { paths, done: false };
  return stack === st.paths[0] && st.paths.length === 1 ? st : { paths: [stack], done: false };
}
