import Ajv from 'ajv';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { constraintFor, tokenTable } from '../../../src/main/engine/json-constraint';
import {
  compileSchema,
  feedSchemaByte,
  initialSchemaState,
  MAX_ENUM_VALUES,
  MAX_SCHEMA_DEPTH,
  type SchemaNode,
  type SchemaState,
} from '../../../src/main/engine/json-schema';
import { createRng } from '../../../src/main/engine/sampling';

type Schema = Record<string, unknown>;

/** An independent check: ajv, a full JSON Schema validator. */
const ajv = new Ajv({ strict: false });
const conforms = (v: unknown, s: Schema): boolean => ajv.validate(s, v) as boolean;

const PERSON: Schema = {
  type: 'object',
  properties: {
    name: { type: 'string', description: 'who' },
    age: { type: 'integer' },
    score: { type: 'number' },
    ok: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string' }, maxItems: 3 },
    color: { enum: ['red', 'green', 1, null] },
    nested: { type: 'object', properties: { x: { type: ['number', 'null'] }, k: { const: 'v' } } },
    maybe: { anyOf: [{ type: 'object', properties: { a: { type: 'integer' } } }, { type: 'null' }] },
  },
  required: ['name', 'age'],
  additionalProperties: false,
};
const EMPTY: Schema = { type: 'object', properties: {} };
const PAIR: Schema = {
  type: 'object',
  properties: { list: { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 2 }, n: { type: 'null' } },
};
const SCHEMAS = [PERSON, EMPTY, PAIR];

function feedAll(root: SchemaNode, text: string): { accepted: number; total: number; done: boolean } {
  const bytes = Buffer.from(text, 'utf8');
  let st: SchemaState | null = initialSchemaState();
  for (const [i, b] of bytes.entries()) {
    st = feedSchemaByte(root, st as SchemaState, b);
    if (!st) return { accepted: i, total: bytes.length, done: false };
  }
  return { accepted: bytes.length, total: bytes.length, done: (st as SchemaState).done };
}

/** A value that conforms to `s`, with every property in schema order (as the recogniser writes them). */
function instance(s: Schema, rnd: () => number): unknown {
  if ('const' in s) return s.const;
  if ('enum' in s) return (s.enum as unknown[])[Math.floor(rnd() * (s.enum as unknown[]).length)];
  const alternatives = (s.anyOf ?? s.oneOf) as Schema[] | undefined;
  if (alternatives) return instance(alternatives[Math.floor(rnd() * alternatives.length)] as Schema, rnd);
  const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
  const t = types[Math.floor(rnd() * types.length)];
  switch (t) {
    case 'string':
      return ['', 'a b', 'é "quoted" \\ \n', '中文'][Math.floor(rnd() * 4)];
    case 'number':
      return [0, -1.5, 3e-7, 123456789.25][Math.floor(rnd() * 4)];
    case 'integer':
      return [0, -7, 42][Math.floor(rnd() * 3)];
    case 'boolean':
      return rnd() < 0.5;
    case 'null':
      return null;
    case 'array': {
      const min = (s.minItems as number) ?? 0;
      const max = Math.min((s.maxItems as number) ?? 4, 4);
      const n = min + Math.floor(rnd() * (max - min + 1));
      return Array.from({ length: n }, () => instance(s.items as Schema, rnd));
    }
    default: {
      const props = (s.properties ?? {}) as Record<string, Schema>;
      return Object.fromEntries(Object.entries(props).map(([k, p]) => [k, instance(p, rnd)]));
    }
  }
}

/** Walks random allowed bytes (leaning towards structure) to a closed object; null when it runs past 400 bytes. */
function walk(root: SchemaNode, seed: number): string | null {
  const rnd = createRng(seed);
  let st: SchemaState = initialSchemaState();
  const out: number[] = [];
  while (!st.done && out.length < 400) {
    const allowed: Array<{ b: number; next: SchemaState }> = [];
    for (let b = 0; b < 256; b++) {
      const next = feedSchemaByte(root, st, b);
      if (next) allowed.push({ b, next });
    }
    expect(allowed.length, Buffer.from(out).toString()).toBeGreaterThan(0);
    const closing = allowed.filter((a) => '"}],:0'.includes(String.fromCharCode(a.b)));
    const pool = closing.length > 0 && rnd() < 0.6 ? closing : allowed;
    const pick = pool[Math.floor(rnd() * pool.length)] as (typeof allowed)[number];
    out.push(pick.b);
    st = pick.next;
  }
  if (!st.done) return null;
  // Nothing may follow the closed object.
  for (let b = 0; b < 256; b++) expect(feedSchemaByte(root, st, b)).toBeNull();
  return Buffer.from(out).toString('utf8');
}

/** Schemas of kvdesk's subset, with the awkward cases: enums whose values are prefixes of others, consts of any JSON, odd keys, unions. */
const generatedSchema: fc.Arbitrary<Schema> = fc.letrec<{ node: Schema; object: Schema; array: Schema; union: Schema }>(
  (tie) => ({
    node: fc.oneof(
      { depthSize: 'small' },
      fc.constantFrom<Schema>(
        { type: 'string' },
        { type: 'integer' },
        { type: 'number' },
        { type: 'boolean' },
        { type: 'null' },
        { type: ['integer', 'number'] },
        { type: ['string', 'null'] },
        { type: 'integer', enum: [1, 12, 120, -1] },
        { enum: [1, 12, 1.5, 'a', 'ab', '', null, true, { x: [1] }, [[]]] },
      ),
      fc.jsonValue({ maxDepth: 2 }).map((v): Schema => ({ const: v })),
      tie('object'),
      tie('array'),
      tie('union'),
    ),
    object: fc
      .dictionary(fc.oneof(fc.string({ maxLength: 3 }), fc.constantFrom('1', '02', 'a"b', 'ключ', '\\')), tie('node'), {
        maxKeys: 4,
      })
      .map((properties): Schema => ({ type: 'object', properties })),
    array: fc
      .record({ items: tie('node'), min: fc.integer({ min: 0, max: 2 }), extra: fc.integer({ min: 0, max: 2 }) })
      .map(({ items, min, extra }): Schema => ({ type: 'array', items, minItems: min, maxItems: min + extra })),
    union: tie('object').map((o): Schema => ({ anyOf: [o, { type: 'null' }] })),
  }),
).object;

describe('the schema recogniser', () => {
  it('accepts every conforming instance written compactly with its properties in schema order', () => {
    fc.assert(
      fc.property(fc.constantFrom(...SCHEMAS), fc.integer(), (schema, seed) => {
        const text = JSON.stringify(instance(schema, createRng(seed)));
        const r = feedAll(compileSchema(schema), text);
        expect(r, text).toEqual({ accepted: r.total, total: r.total, done: true });
      }),
      { numRuns: 300 },
    );
  });

  it('a random walk over the bytes it allows ends, when it ends, in an object ajv accepts (fixed and generated schemas)', () => {
    let finished = 0;
    let walks = 0;
    fc.assert(
      fc.property(fc.oneof(fc.constantFrom(...SCHEMAS), generatedSchema), fc.integer(), (schema, seed) => {
        walks++;
        const text = walk(compileSchema(schema), seed);
        if (text === null) return;
        finished++;
        expect(conforms(JSON.parse(text), schema), `${text} against ${JSON.stringify(schema)}`).toBe(true);
      }),
      { numRuns: 600 },
    );
    expect(finished / walks).toBeGreaterThan(0.4);
  });

  it('refuses what is not that schema: missing or reordered properties, wrong types, counts, whitespace', () => {
    const root = compileSchema(PAIR);
    for (const text of [
      '{"list":[1,2]}',
      '{"n":null,"list":[1,2]}',
      '{"list":[1],"n":null}',
      '{"list":[1,2,3],"n":null}',
      '{"list":[1,2.5],"n":null}',
      '{"list":[1,2], "n":null}',
      '{"list":[1,2],"n":0}',
      '[]',
    ]) {
      const r = feedAll(root, text);
      expect(r.accepted < r.total || !r.done, text).toBe(true);
    }
    expect(feedAll(root, '{"list":[1,-20],"n":null}').done).toBe(true);
    expect(feedAll(compileSchema(EMPTY), '{}').done).toBe(true);
  });

  it('refuses schemas it cannot enforce, naming the place', () => {
    const cases: Array<[Schema, string]> = [
      [{ type: 'object', properties: { a: { type: 'string', pattern: '^x' } } }, 'schema.properties.a.pattern'],
      [{ type: 'object', properties: { a: { type: 'integer', minimum: 0 } } }, 'schema.properties.a.minimum'],
      [{ type: 'object', properties: { a: { $ref: '#/$defs/x' } } }, 'schema.properties.a.$ref'],
      [{ type: 'object', properties: { a: {} } }, 'schema.properties.a'],
      [{ type: 'array', items: { type: 'string' } }, 'schema.type'],
      [
        {
          type: 'object',
          properties: {
            a: {
              anyOf: [
                { type: 'object', properties: {} },
                { type: 'object', properties: {} },
              ],
            },
          },
        },
        'schema.properties.a.anyOf',
      ],
      [{ type: 'object', properties: { a: { type: 'date' } } }, 'schema.properties.a.type'],
      // Keywords beside const, enum and anyOf are not silently dropped.
      [{ type: 'object', properties: { a: { type: 'string', enum: ['x', 1] } } }, 'schema.properties.a.enum'],
      [{ type: 'object', properties: { a: { type: 'integer', const: 1.5 } } }, 'schema.properties.a.const'],
      [{ type: 'object', properties: { a: { const: 'a', enum: ['b'] } } }, 'schema.properties.a.enum'],
      [
        { type: 'object', properties: { a: { type: 'string', anyOf: [{ type: 'null' }] } } },
        'schema.properties.a.type',
      ],
      [
        { type: 'object', properties: { a: { anyOf: [{ type: 'null' }], oneOf: [{ type: 'null' }] } } },
        'schema.properties.a.oneOf',
      ],
      [{ type: 'object', properties: { a: { type: 'string' } }, required: ['b'] }, 'schema.required[0]'],
      [
        { type: 'object', properties: { a: { enum: Array.from({ length: MAX_ENUM_VALUES + 1 }, (_, i) => i) } } },
        'schema.properties.a.enum',
      ],
    ];
    for (const [schema, path] of cases) {
      expect(() => compileSchema(schema), path).toThrow(expect.objectContaining({ path }));
    }
    // Nesting is bounded (each level is a stack frame): a deep schema is refused, not a crash.
    let deep: Schema = { type: 'string' };
    for (let i = 0; i < 2000; i++) deep = { type: 'array', items: deep };
    expect(() => compileSchema({ type: 'object', properties: { a: deep } })).toThrow(
      new RegExp(`deeper than ${MAX_SCHEMA_DEPTH}`),
    );
    // What the schema allows otherwise compiles: number with integer is a number; a typed enum whose values all fit.
    expect(() =>
      compileSchema({
        type: 'object',
        properties: { n: { type: ['integer', 'number'] }, e: { type: 'integer', enum: [1, 2] } },
        required: ['n'],
      }),
    ).not.toThrow();
  });
});

describe('a schema constraint over a vocabulary', () => {
  it('allows only the tokens that continue a conforming reply', () => {
    const pieces = ['{"', 'list', '":[', '1', ',', '2', '],"', 'n":', 'null', '}', '{}', ' ', '"'];
    const c = constraintFor({
      table: tokenTable(
        pieces.map((p) => [...Buffer.from(p)]),
        [],
      ),
      schema: compileSchema(PAIR),
    });
    const allowed = () => pieces.filter((_, id) => c.allows(id));
    expect(allowed()).toEqual(['{"']);
    for (const id of [0, 1, 2, 3]) c.accept(id);
    // After "[1": another digit, or the comma; not the closing bracket (two items are required).
    expect(allowed()).toEqual(['1', ',', '2']);
    for (const id of [4, 5, 6, 7, 8]) c.accept(id);
    expect(allowed()).toEqual(['}']);
    c.accept(9);
    expect(c.done).toBe(true);
  });
});
