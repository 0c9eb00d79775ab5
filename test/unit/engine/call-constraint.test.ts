import Ajv from 'ajv';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CallConstraint,
  type CallGrammar,
  compileCallGrammar,
  MAX_CALL_WHITESPACE,
} from '../../../src/main/engine/call-constraint';
import { constraintFor, type ReplyConstraint, tokenTable } from '../../../src/main/engine/json-constraint';
import { compileSchema } from '../../../src/main/engine/json-schema';
import { Sampler } from '../../../src/main/engine/sampling';
import { jsonValueEnd } from '../../../src/main/tokenizer/tool-calls';

const ajv = new Ajv({ strict: false });

// Tools whose arguments a random walk finishes: enums and booleans.
const weatherArgs = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Oslo'] }, hourly: { type: 'boolean' } },
  required: ['city'],
};
const lightsArgs = { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'] };
const envelope = (name: string, args: object) => ({
  type: 'object',
  properties: { name: { const: name }, arguments: args },
  required: ['name', 'arguments'],
});
const CALL_SCHEMA = { anyOf: [envelope('get_weather', weatherArgs), envelope('set_lights', lightsArgs)] };

const HERMES: CallGrammar = {
  trigger: '<tool_call>',
  array: false,
  close: '</tool_call>',
  calls: [{ head: '', schema: CALL_SCHEMA }],
};
const MISTRAL: CallGrammar = {
  trigger: '[TOOL_CALLS]',
  array: true,
  close: '',
  calls: [{ head: '', schema: CALL_SCHEMA }],
};
const NAMED: CallGrammar = {
  trigger: '[TOOL_CALLS]',
  array: false,
  close: '',
  calls: [
    { head: 'get_a[ARGS]', schema: weatherArgs },
    { head: 'get_ab[ARGS]', schema: lightsArgs },
  ],
};
const BARE: CallGrammar = { trigger: '', array: false, close: '', calls: [{ head: '', schema: CALL_SCHEMA }] };
const QWEN_XML: CallGrammar = {
  trigger: '<tool_call>',
  array: false,
  close: '</tool_call>',
  calls: [],
  xml: {
    tools: [
      { name: 'get_weather', params: ['city', 'hourly'] },
      { name: 'now', params: [] },
    ],
  },
};

// A vocabulary: every printable ASCII byte and white space alone, some longer pieces, and special tokens.
const SPECIAL = ['', '<|im_end|>', '[TOOL_CALLS]', '[ARGS]'];
const PIECES = [
  ...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)),
  '\n',
  '\t',
  '<tool_call>',
  '</tool_call>',
  '<tool',
  '_call>',
  '<tool_call>{"',
  '<tool_call>x',
  '{"',
  '"}',
  '}}',
  '}}\n',
  '}}</tool_call>',
  '"name":"',
  '","arguments":{"',
  'get_weather',
  'set_lights',
  'Paris',
  'true',
  'false',
  ' [',
  'hello',
  ' world',
  '\n\n',
  '<function=',
  '<parameter=',
  '</parameter>',
  '</function>',
  'city>',
  'get_weather>',
];
const VOCAB = [...SPECIAL, ...PIECES];
const table = tokenTable(
  VOCAB.map((p) => [...Buffer.from(p, 'utf8')]),
  SPECIAL.map((_, i) => i),
);
const EOS = 0;
const idOf = (piece: string, from = 0) => {
  const id = VOCAB.indexOf(piece, from);
  if (id < 0) throw new Error(`no token ${JSON.stringify(piece)}`);
  return id;
};
/** The ordinary (not special) token for a piece, where a special one has the same text. */
const plain = (piece: string) => idOf(piece, SPECIAL.length);

function constraintOf(g: CallGrammar): CallConstraint {
  return new CallConstraint(table, compileCallGrammar(g));
}

/** Feeds pieces (ids or texts, each one token); returns the constraint. Throws if one is refused. */
function write(g: CallGrammar, parts: Array<string | number>): CallConstraint {
  const c = constraintOf(g);
  for (const part of parts) {
    const id = typeof part === 'number' ? part : plain(part);
    if (!c.allows(id)) throw new Error(`refused ${JSON.stringify(VOCAB[id])} after ${JSON.stringify(parts)}`);
    c.accept(id);
  }
  return c;
}

const chars = (s: string) => [...s];
const skipWs = (text: string, i: number) => {
  while (i < text.length && /\s/.test(text[i] as string)) i++;
  return i;
};

describe('lazy tool-call constraint', () => {
  it('leaves free text free: every token, special or empty, until the opening', () => {
    const c = write(HERMES, ['hello', ' world', '\n']);
    // All but the one that opens a call and goes on with what no call can begin with.
    for (let id = 0; id < VOCAB.length; id++) expect(c.allows(id)).toBe(VOCAB[id] !== '<tool_call>x');
    expect(c.inCall).toBe(false);
    expect(c.done).toBe(false);
  });

  it('after the opening, written whole or in pieces, allows only a valid start of the call', () => {
    // (A `<` before it starts the match again: `<<tool_call>` opens a call.)
    for (const opening of [['<tool_call>'], ['<tool', '_call>'], chars('<tool_call>'), ['<', '<tool_call>']]) {
      const c = write(HERMES, ['hello', ...opening]);
      expect(c.inCall).toBe(true);
      expect(c.allows(plain('{"'))).toBe(true);
      expect(c.allows(plain('\n'))).toBe(true);
      expect(c.allows(plain('x'))).toBe(false);
      expect(c.allows(EOS)).toBe(false);
      expect(c.allows(idOf('<|im_end|>'))).toBe(false);
    }
  });

  it('a token that completes the opening and goes on is allowed only when the rest starts the call', () => {
    const c = write(HERMES, ['hello', '<tool']);
    expect(c.allows(plain('_call>'))).toBe(true);
    const d = constraintOf(HERMES);
    expect(d.allows(plain('<tool_call>{"'))).toBe(true);
    expect(d.allows(plain('<tool_call>x'))).toBe(false);
  });

  it("holds the call to its tool's schema, then requires the closing tag, then is free again", () => {
    const call = ['<tool_call>', '\n', '{"', ...chars('name":"'), 'get_weather', '","arguments":{"'];
    const c = write(HERMES, call);
    // Only the tool's keys: city comes first.
    expect(c.allows(plain('c'))).toBe(true);
    expect(c.allows(plain('x'))).toBe(false);
    const d = write(HERMES, [...call, ...chars('city":"'), 'Paris', '"}']);
    expect(d.allows(plain('}}'))).toBe(false);
    expect(d.allows(plain('}'))).toBe(true);
    const e = write(HERMES, [...call, ...chars('city":"'), 'Paris', '"', '}}\n']);
    expect(e.inCall).toBe(true);
    expect(e.allows(plain('x'))).toBe(false);
    expect(e.allows(EOS)).toBe(false);
    expect(e.allows(plain('</tool_call>'))).toBe(true);
    e.accept(plain('</tool_call>'));
    expect(e.inCall).toBe(false);
    expect(e.allows(EOS)).toBe(true);
    expect(e.allows(plain('x'))).toBe(true);
    // An unknown tool's name is refused.
    const f = write(HERMES, ['<tool_call>', '{"', ...chars('name":"')]);
    expect(f.allows(plain('g'))).toBe(true);
    expect(f.allows(plain('x'))).toBe(false);
  });

  it('lets an object close inside a token whose rest is the closing tag', () => {
    const c = write(HERMES, ['<tool_call>', '{"', ...chars('name":"set_lights","arguments":{"on":'), 'true']);
    expect(c.allows(plain('}}</tool_call>'))).toBe(true);
    c.accept(plain('}}</tool_call>'));
    expect(c.inCall).toBe(false);
  });

  it('caps white space inside a call', () => {
    const c = write(HERMES, ['<tool_call>', ...Array(MAX_CALL_WHITESPACE).fill(' ')]);
    expect(c.allows(plain(' '))).toBe(false);
    expect(c.allows(plain('{"'))).toBe(true);
  });

  it('array forms: calls in [ … , … ], then free text', () => {
    const one = '{"name":"set_lights","arguments":{"on":true}}';
    const c = write(MISTRAL, [idOf('[TOOL_CALLS]'), ' [', ...chars(one), ',', ' ', ...chars(one)]);
    expect(c.allows(plain('x'))).toBe(false);
    expect(c.allows(plain(']'))).toBe(true);
    c.accept(plain(']'));
    expect(c.inCall).toBe(false);
    expect(c.allows(EOS)).toBe(true);
    // The bracket must come first.
    const d = write(MISTRAL, [idOf('[TOOL_CALLS]')]);
    expect(d.allows(plain('{"'))).toBe(false);
    expect(d.allows(plain(' ['))).toBe(true);
    // Without parallel calls, the array holds one: after it, its close.
    const single = write({ ...MISTRAL, single: true }, [idOf('[TOOL_CALLS]'), ' [', ...chars(one)]);
    expect(single.allows(plain(','))).toBe(false);
    expect(single.allows(plain(' '))).toBe(true);
    expect(single.allows(plain(']'))).toBe(true);
  });

  it('named forms: a listed name and the marker (special or written), then that tool’s arguments', () => {
    const c = write(NAMED, [idOf('[TOOL_CALLS]'), ...chars('get_a')]);
    expect(c.allows(idOf('[ARGS]'))).toBe(true);
    expect(c.allows(plain('b'))).toBe(true);
    expect(c.allows(plain('x'))).toBe(false);
    c.accept(idOf('[ARGS]'));
    for (const piece of chars('{"city":"Oslo"}')) {
      expect(c.allows(plain(piece))).toBe(true);
      c.accept(plain(piece));
    }
    expect(c.inCall).toBe(false);
    const d = write(NAMED, [idOf('[TOOL_CALLS]'), ...chars('get_ab[ARGS]{"')]);
    // get_ab's arguments are set_lights', not get_a's.
    expect(d.allows(plain('o'))).toBe(true);
    expect(d.allows(plain('c'))).toBe(false);
  });

  it('bare JSON: a reply that begins with { is a call; one that begins otherwise stays free', () => {
    const c = write(BARE, [' ', '{"']);
    expect(c.inCall).toBe(true);
    expect(c.allows(plain('n'))).toBe(true);
    expect(c.allows(plain('x'))).toBe(false);
    const d = write(BARE, ['hello', ' ', '{"', 'x', '}']);
    expect(d.inCall).toBe(false);
  });

  it("Qwen3-Coder's XML form: a listed function, its own parameters, values as text, then the closing tags", () => {
    const head = ['<tool_call>', '\n', '<function=', 'get_weather>', '\n'];
    const c = write(QWEN_XML, head);
    expect(c.allows(plain('<parameter='))).toBe(true);
    expect(c.allows(plain('</function>'))).toBe(true);
    expect(c.allows(plain('x'))).toBe(false);
    expect(c.allows(EOS)).toBe(false);
    // Only its own parameter names.
    const d = write(QWEN_XML, [...head, '<parameter=']);
    expect(d.allows(plain('c'))).toBe(true);
    expect(d.allows(plain('city>'))).toBe(true);
    expect(d.allows(plain('d'))).toBe(false);
    // A value is free text (not special tokens), up to </parameter>.
    const e = write(QWEN_XML, [...head, '<parameter=', 'city>', '\n', 'Paris', ' world', '<', '/']);
    expect(e.allows(plain('x'))).toBe(true);
    expect(e.allows(idOf('<|im_end|>'))).toBe(false);
    // Not the form's close: the call would end inside a value.
    expect(write(QWEN_XML, [...head, '<parameter=', 'city>', 'hello']).allows(plain('</tool_call>'))).toBe(false);
    expect(e.allows(EOS)).toBe(false);
    const f = write(QWEN_XML, [...head, '<parameter=', 'city>', 'Paris', '</parameter>', '\n', '</function>', '\n']);
    expect(f.inCall).toBe(true);
    expect(f.allows(plain('x'))).toBe(false);
    expect(f.allows(plain('</tool_call>'))).toBe(true);
    f.accept(plain('</tool_call>'));
    expect(f.inCall).toBe(false);
    // An unlisted function is refused; one without parameters may only close.
    const g = write(QWEN_XML, ['<tool_call>', '<function=']);
    expect(g.allows(plain('x'))).toBe(false);
    const h = write(QWEN_XML, ['<tool_call>', '<function=', ...chars('now>')]);
    expect(h.allows(plain('<parameter='))).toBe(false);
    expect(h.allows(plain('</function>'))).toBe(true);
  });

  it('random walks: every call written is one the schemas accept', () => {
    const validate = ajv.compile(CALL_SCHEMA);
    const validateArgs = [ajv.compile(weatherArgs), ajv.compile(lightsArgs)];
    // Bias toward the opening so most walks make calls.
    for (const [g, label] of [
      [HERMES, 'hermes'],
      [MISTRAL, 'mistral'],
      [NAMED, 'named'],
      [BARE, 'bare'],
      [QWEN_XML, 'qwen-xml'],
    ] as const) {
      let checked = 0;
      fc.assert(
        fc.property(fc.array(fc.nat(), { minLength: 120, maxLength: 120 }), (draws) => {
          const c = constraintOf(g);
          const opening =
            g === BARE
              ? [plain('{"')]
              : g === QWEN_XML
                ? [plain('<tool_call>'), plain('<function='), plain('get_weather>'), plain('</parameter>')]
                : [plain('<tool_call>'), idOf('[TOOL_CALLS]')];
          let text = '';
          for (const d of draws) {
            const allowed = VOCAB.map((_, id) => id).filter((id) => c.allows(id));
            expect(allowed.length).toBeGreaterThan(0);
            const preferred = opening.filter((id) => allowed.includes(id));
            const id =
              !c.inCall && preferred.length > 0 && d % 3 === 0
                ? (preferred[0] as number)
                : (allowed[d % allowed.length] as number);
            if (id === EOS) break;
            c.accept(id);
            text += VOCAB[id];
          }
          // Each complete call in the text is valid.
          const complete = (at: number) => {
            const end = jsonValueEnd(text, at);
            // -1: cut off by the walk's end; never -2, which says the text after an opening is no JSON value.
            expect(end, `${label}: ${text}`).not.toBe(-2);
            if (end < 0) return undefined;
            checked++;
            return JSON.parse(text.slice(at, end));
          };
          const callsAfter = (re: RegExp) =>
            [...text.matchAll(re)].map((m) => ({ m, at: skipWs(text, (m.index as number) + m[0].length) }));
          if (g === HERMES) {
            for (const { at } of callsAfter(/<tool_call>/g)) {
              const call = complete(at);
              if (call !== undefined) expect(validate(call), `${label}: ${text}`).toBe(true);
            }
          } else if (g === MISTRAL) {
            for (const { at } of callsAfter(/\[TOOL_CALLS\]/g)) {
              const calls = complete(at) as unknown[] | undefined;
              for (const call of calls ?? []) expect(validate(call), `${label}: ${text}`).toBe(true);
            }
          } else if (g === NAMED) {
            for (const { m, at } of callsAfter(/\[TOOL_CALLS\](get_ab?)\[ARGS\]/g)) {
              const args = complete(at);
              const check = validateArgs[m[1] === 'get_a' ? 0 : 1] as (x: unknown) => boolean;
              if (args !== undefined) expect(check(args), `${label}: ${text}`).toBe(true);
            }
          } else if (g === QWEN_XML) {
            // Each closed call: a listed function with its own parameters, in the form's tags.
            const call =
              /^<tool_call>\s*<function=(get_weather|now)>(\s*<parameter=(city|hourly)>[\s\S]*?<\/parameter>)*\s*<\/function>\s*<\/tool_call>$/;
            for (const m of text.matchAll(/<tool_call>[\s\S]*?<\/tool_call>/g)) {
              checked++;
              expect(m[0], `${label}: ${text}`).toMatch(call);
              if (m[0].includes('<function=now>')) expect(m[0]).not.toContain('<parameter=');
            }
          } else {
            const at = skipWs(text, 0);
            const call = text[at] === '{' ? complete(at) : undefined;
            if (call !== undefined) expect(validate(call), `${label}: ${text}`).toBe(true);
          }
        }),
        // 150 walks: the named form completes a call in about one walk of five, so fewer (60 made about 12, and
        // now and then 5 or fewer) could fail the check below by chance.
        { numRuns: 150 },
      );
      // The walks do make calls (a property over replies without calls would prove nothing).
      expect(checked, label).toBeGreaterThan(5);
    }
  });

  it('the sampler draws only allowed tokens, and a call never ends the row', () => {
    const c = constraintOf(HERMES);
    // Logits that prefer 'x' everywhere: inside the call, the constraint must overrule them.
    const logits = new Float32Array(VOCAB.length).fill(0);
    logits[plain('x')] = 10;
    logits[plain('<tool_call>')] = 20;
    const sampler = new Sampler(
      { greedy: true, temperature: 0, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1, seed: 1 },
      VOCAB.length,
      [],
      c,
    );
    let text = '';
    for (let step = 0; step < 80 && !sampler.finished; step++) {
      const id = sampler.sample(logits, 0, VOCAB.length);
      expect(id).toBeGreaterThanOrEqual(0);
      text += VOCAB[id];
      if (step === 0) logits[plain('<tool_call>')] = -10;
    }
    expect(text, text).toMatch(/^<tool_call>\s{0,32}\{ ?"name": ?"get_weather", ?"arguments": ?\{ ?"city":/);
    expect(sampler.finished).toBe(false);
  });
});

describe("a thinking model's reasoning holds no call", () => {
  const THINKING = { open: '<think>', close: '</think>' };
  const inside = { ...HERMES, reasoning: { ...THINKING, inside: true } };
  const maybe = { ...HERMES, reasoning: { ...THINKING, inside: false } };

  it('reasoning the prompt opened: the opening is text until the reasoning closes, then it opens a call', () => {
    const c = write(inside, [...chars('I will use <tool_call>x'), 'hello']);
    expect(c.inCall).toBe(false);
    // Anything goes inside the reasoning, even what no call can begin with.
    expect(c.allows(plain('<tool_call>x'))).toBe(true);
    const after = write(inside, [...chars('plan</think>\n'), '<tool_call>']);
    expect(after.inCall).toBe(true);
    expect(after.allows(plain('<tool_call>x'))).toBe(false);
  });

  it('a reply that opens its own reasoning reads calls after it; one that does not, from its start', () => {
    const thought = write(maybe, [...chars('  <think>'), '<tool_call>', ...chars('x</think>'), '<tool_call>']);
    expect(thought.inCall).toBe(true);
    // Not a reasoning: the text it began with counts towards the opening.
    expect(write(maybe, ['<tool', '_call>']).inCall).toBe(true);
    expect(write(maybe, [...chars('<th'), 'hello', '<tool_call>']).inCall).toBe(true);
    expect(write(maybe, ['hello', ...chars('<think>'), '<tool_call>']).inCall).toBe(true);
  });

  it('a bare-JSON form reads its call after the reasoning, or at the start of a reply without one', () => {
    const bare = { ...BARE, reasoning: { ...THINKING, inside: false } };
    expect(write(bare, [...chars('<think>a</think>\n'), '{"']).inCall).toBe(true);
    expect(write(bare, ['{"']).inCall).toBe(true);
    // A reply that began with something else is text for good.
    const text = write(bare, [...chars('<th'), 'hello']);
    expect(text.inCall).toBe(false);
    expect(text.allows(plain('{"'))).toBe(true);
    text.accept(plain('{"'));
    expect(text.inCall).toBe(false);
  });
});

describe('tool calls or the JSON value (tool_choice "auto" beside JSON output)', () => {
  // The reply's JSON: an object the walks can finish.
  const ANSWER = {
    type: 'object',
    properties: { answer: { enum: ['Paris', 'Oslo'] } },
    required: ['answer'],
    additionalProperties: false,
  };
  // The model's end token is `<|im_end|>` here, which the table gives its text (as the host's tables do).
  const either = (g: CallGrammar, schema: object | null = ANSWER, over = table) =>
    constraintFor({
      table: over,
      calls: compileCallGrammar(g),
      ...(schema ? { schema: compileSchema(schema) } : { json: true }),
      ends: new Set([idOf('<|im_end|>')]),
    }) as ReplyConstraint;
  const writeEither = (g: CallGrammar, parts: Array<string | number>, schema?: object | null) => {
    const c = either(g, schema);
    for (const part of parts) {
      const id = typeof part === 'number' ? part : plain(part);
      if (!c.allows(id)) throw new Error(`refused ${JSON.stringify(VOCAB[id])} after ${JSON.stringify(parts)}`);
      c.accept(id);
    }
    return c;
  };
  const answer = ['{"', ...chars('answer":"'), 'Paris', '"}'];
  const call = ['<tool_call>', '{"', ...chars('name":"set_lights","arguments":{"on":'), 'true', '}}</tool_call>'];

  it("begins as a call's opening or the JSON, nothing else: no free text, no end, no other special token", () => {
    const c = either(HERMES);
    const allowed = VOCAB.filter((_, id) => c.allows(id));
    // Neither begins after white space (JSON mode's object does not).
    expect(allowed.sort()).toEqual(['<', '<tool', '<tool_call>', '<tool_call>{"', '{', '{"'].sort());
    expect(c.done).toBe(false);
    // Mistral's opening is a special token: allowed as the opening.
    expect(either(MISTRAL).allows(idOf('[TOOL_CALLS]'))).toBe(true);
    expect(either(MISTRAL).allows(idOf('<|im_end|>'))).toBe(false);
  });

  it('a JSON reply is held to its schema and ends as it closes; no call can open in it', () => {
    const c = writeEither(HERMES, answer.slice(0, -1));
    expect(c.allows(plain('<tool_call>'))).toBe(false);
    expect(c.allows(EOS)).toBe(false);
    expect(c.done).toBe(false);
    c.accept(plain('"}'));
    expect(c.done).toBe(true);
    // Keys the schema does not list are refused; without a schema, any object (JSON mode).
    const d = writeEither(HERMES, ['{"']);
    expect(d.allows(plain('a'))).toBe(true);
    expect(d.allows(plain('x'))).toBe(false);
    expect(writeEither(HERMES, ['{"', 'x'], null).allows(plain('y'))).toBe(true);
  });

  it('a call is held to its grammar; after it, only white space, another call or the end (never text)', () => {
    // The opening in pieces: once begun, it must be finished (the JSON is out of the running).
    const begun = writeEither(HERMES, ['<tool']);
    expect(begun.allows(plain('_call>'))).toBe(true);
    expect(begun.allows(plain('{"'))).toBe(false);
    expect(begun.allows(EOS)).toBe(false);
    const c = writeEither(HERMES, call.slice(0, 2));
    // The call's name: a listed tool's only.
    expect(c.allows(plain('x'))).toBe(false);
    expect(c.allows(plain('n'))).toBe(true);
    const done = writeEither(HERMES, call);
    expect(done.done).toBe(false);
    expect(done.allows(EOS)).toBe(true);
    expect(done.allows(plain('<tool_call>'))).toBe(true);
    expect(done.allows(plain('\n'))).toBe(true);
    for (const text of ['x', 'hello', '{"', '<tool_call>x']) expect(done.allows(plain(text)), text).toBe(false);
    // The model's end token where the table gives it its text, as the end without bytes; not another special one.
    expect(done.allows(idOf('<|im_end|>'))).toBe(true);
    expect(done.allows(idOf('[ARGS]'))).toBe(false);
    expect(either(HERMES).allows(idOf('<|im_end|>'))).toBe(false);
    expect(writeEither(HERMES, ['<tool']).allows(idOf('<|im_end|>'))).toBe(false);
    // A token that closes a call and opens the next, with text between, is refused; with white space, taken.
    const extra = ['}}</tool_call>hi<tool_call>{"', '}}</tool_call>\n<tool_call>{"'];
    const wide = tokenTable(
      [...VOCAB, ...extra].map((p) => [...Buffer.from(p, 'utf8')]),
      SPECIAL.map((_, i) => i),
    );
    const spanning = either(HERMES, ANSWER, wide);
    for (const part of call.slice(0, -1)) spanning.accept(plain(part));
    expect(spanning.allows(VOCAB.length)).toBe(false);
    expect(spanning.allows(VOCAB.length + 1)).toBe(true);
    // White space, then another call (the end waits while an opening is begun).
    const again = writeEither(HERMES, [...call, '\n', '<tool']);
    expect(again.allows(EOS)).toBe(false);
    expect(again.allows(plain('_call>'))).toBe(true);
    // The close may come in the token that ends the object, or after white space.
    const closing = writeEither(HERMES, call.slice(0, -1));
    expect(closing.allows(plain('}}</tool_call>'))).toBe(true);
    expect(closing.allows(plain('}}\n'))).toBe(true);
    const closed = writeEither(HERMES, [...call.slice(0, -1), '}}\n', ...chars('</tool_call')]);
    expect(closed.allows(plain('>'))).toBe(true);
    expect(closed.allows(EOS)).toBe(false);
  });

  it("a bare-JSON form's call and the JSON both begin with `{`: either object is taken, and ends the JSON reading", () => {
    const asCall = writeEither(BARE, ['{"', ...chars('name":"set_lights","arguments":{"on":'), 'true', '}}']);
    // Not the JSON's (its keys): a call, after which only white space and the end (the form takes one call).
    expect(asCall.done).toBe(false);
    expect(asCall.allows(EOS)).toBe(true);
    expect(asCall.allows(plain(' '))).toBe(true);
    expect(asCall.allows(plain('{"'))).toBe(false);
    expect(asCall.allows(plain('x'))).toBe(false);
    const asAnswer = writeEither(BARE, answer);
    expect(asAnswer.done).toBe(true);
    // Keys of either object go on; others do not.
    const first = writeEither(BARE, ['{"']);
    expect(first.allows(plain('n'))).toBe(true);
    expect(first.allows(plain('a'))).toBe(true);
    expect(first.allows(plain('x'))).toBe(false);
  });

  it('random walks: every reply is a call the schemas accept or the JSON its schema accepts', () => {
    const validateCall = ajv.compile(CALL_SCHEMA);
    const validateAnswer = ajv.compile(ANSWER);
    for (const g of [HERMES, MISTRAL, BARE]) {
      const seen = { calls: 0, answers: 0 };
      fc.assert(
        fc.property(fc.array(fc.nat(), { minLength: 120, maxLength: 120 }), (draws) => {
          const c = either(g);
          let text = '';
          for (const d of draws) {
            if (c.done) break;
            const allowed = VOCAB.map((_, id) => id).filter((id) => c.allows(id));
            expect(allowed.length, text).toBeGreaterThan(0);
            const id = allowed[d % allowed.length] as number;
            if (id === EOS) break;
            c.accept(id);
            text += VOCAB[id];
          }
          if (c.done) {
            seen.answers++;
            expect(validateAnswer(JSON.parse(text)), text).toBe(true);
            return;
          }
          // Not the JSON: calls from the reply's first byte (the last may be cut off by the walk's end).
          const opening = g.trigger === '' ? '{' : g.trigger;
          if (!text.startsWith(opening)) {
            // Cut off inside the opening, or inside the JSON.
            expect(opening.startsWith(text) || text.startsWith('{'), text).toBe(true);
            return;
          }
          const at = g === BARE ? 0 : skipWs(text, opening.length);
          const end = jsonValueEnd(text, at);
          expect(end, text).not.toBe(-2);
          if (end < 0) return;
          const value = JSON.parse(text.slice(at, end));
          for (const one of Array.isArray(value) ? value : [value]) {
            seen.calls++;
            expect(validateCall(one), text).toBe(true);
          }
          // Between and after the calls, white space only (and the start of another call): never text.
          const rest =
            g === HERMES
              ? text.replace(/<tool_call>[\s\S]*?<\/tool_call>/g, '').replace(/<tool_call>[\s\S]*$/, '')
              : text.slice(end);
          // (Special tokens may come between calls — the end token among them; the host shows none as text.)
          const unspecial = SPECIAL.filter((t) => t !== '').reduce((r, t) => r.split(t).join(''), rest);
          if (g !== MISTRAL) expect(unspecial, text).toMatch(/^\s*(<[a-z_]*)?$/);
        }),
        { numRuns: 150 },
      );
      // Both kinds of reply came up (a property over one kind alone would prove half of it).
      expect(seen.calls, g.trigger).toBeGreaterThan(3);
      expect(seen.answers, g.trigger).toBeGreaterThan(3);
    }
  });
});
