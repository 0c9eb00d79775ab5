/**
 * What a request's tools mean for its prompt and reply: refusals that name the field, the form of the
 * package's template, and the schema a forced call is written to.
 */
import { describe, expect, it } from 'vitest';
import { compileSchema, feedSchemaBytes, initialSchemaState } from '../../../src/main/engine/json-schema';
import { bareCallTest, planTools } from '../../../src/main/host/tool-plan';
import { templateShowsTools } from '../../../src/main/tokenizer/chat-template';
import { BARE_JSON, createToolCallFilter, HERMES, MISTRAL, QWEN_XML } from '../../../src/main/tokenizer/tool-calls';
import type { GenerateRequest } from '../../../src/shared/contract';
import { KvdeskError } from '../../../src/shared/errors';

const messages = [{ role: 'user' as const, content: 'hi' }];
const weather = {
  name: 'get_weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const search = { name: 'search', parameters: { properties: { q: { type: 'string' } } } };
/** A vocabulary where `[TOOL_CALLS]` is special token 7. */
const tok = {
  tokenToId: (t: string) => (t === '[TOOL_CALLS]' ? 7 : t === '[ARGS]' ? 8 : undefined),
  isSpecial: (id: number) => id === 7 || id === 8,
};
const NATIVE_MISTRAL = '{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}[TOOL_CALLS]{% endfor %}';

function refusal(req: Partial<GenerateRequest>, template?: string): KvdeskError {
  try {
    planTools({ messages, ...req } as GenerateRequest, template, tok);
  } catch (err) {
    expect(err).toBeInstanceOf(KvdeskError);
    return err as KvdeskError;
  }
  throw new Error('expected a refusal');
}

describe('templateShowsTools', () => {
  it('is true only for a template whose output shows the tools', () => {
    expect(templateShowsTools('{% for t in tools %}{{ t.function.name }}{% endfor %}')).toBe(true);
    expect(templateShowsTools('{{ tools | tojson }}')).toBe(true);
    // Reading `tools` without showing them, a message's own `tools`, a variable of that name, a refusal.
    expect(templateShowsTools('{% if tools is defined %}x{% endif %}{{ messages[0].content }}')).toBe(false);
    expect(templateShowsTools('{% for m in messages %}{{ m.tools }}{{ m.content }}{% endfor %}')).toBe(false);
    expect(templateShowsTools('{% set tools = none %}{{ tools }}{{ messages[0].content }}')).toBe(false);
    expect(templateShowsTools("{% if tools %}{{ raise_exception('no tools') }}{% endif %}")).toBe(false);
    expect(templateShowsTools('{{ "tools" }}{% for m in messages %}{{ m.content }}{% endfor %}')).toBe(false);
    expect(templateShowsTools('{% broken')).toBe(false);
  });
});

describe('planTools', () => {
  it('is undefined without tools; a named choice without them is refused', () => {
    expect(planTools({ messages } as GenerateRequest, undefined, tok)).toBeUndefined();
    expect(planTools({ messages, toolChoice: 'auto' } as GenerateRequest, undefined, tok)).toBeUndefined();
    expect(refusal({ toolChoice: { name: 'x' } }).detail).toEqual({ field: 'toolChoice' });
  });

  it('refuses what it cannot honour, naming the field', () => {
    expect(refusal({ messages: undefined, prompt: 'x', tools: [weather] }).detail).toEqual({ field: 'tools' });
    // JSON output beside a call the reply must be: the reply is the call, written to the call's schema (the JSON
    // output is for the replies after it).
    for (const toolChoice of ['required', { name: 'get_weather' }] as const) {
      const plan = planTools(
        { messages, tools: [weather], jsonSchema: {}, toolChoice } as GenerateRequest,
        undefined,
        tok,
      );
      expect(plan).toMatchObject({ forced: true, schema: { properties: { name: { const: 'get_weather' } } } });
    }
    // With "none" the tools are neither shown nor read: JSON output is taken.
    const none = planTools(
      { messages, tools: [weather], toolChoice: 'none', responseFormat: 'json' } as GenerateRequest,
      undefined,
      tok,
    );
    expect(none).toMatchObject({ reads: false, forced: false });
    expect(none?.shown).toBeUndefined();
    // With "auto" (the default) the reply is calls or the JSON: the calls' grammar tells them apart.
    const auto = planTools({ messages, tools: [weather], responseFormat: 'json' } as GenerateRequest, undefined, tok);
    expect(auto).toMatchObject({ reads: true, forced: false, shown: [weather] });
    expect(auto?.grammar?.trigger).toBe('<tool_call>');
    // … which it needs: a tool that takes keys beside those it lists has none, nor has gpt-oss's form (JSON goes in
    // its final message). One that lists none is a free-form object, held as one.
    const anything = {
      name: 'anything',
      parameters: { type: 'object', properties: { q: { type: 'string' } }, additionalProperties: true },
    };
    const freeForm = { name: 'free', parameters: { type: 'object', description: 'any keys' } };
    expect(
      planTools({ messages, tools: [weather, freeForm], responseFormat: 'json' } as GenerateRequest, undefined, tok)
        ?.grammar,
    ).toBeDefined();
    const free = refusal({ tools: [weather, anything], jsonSchema: { type: 'object' } });
    expect(free.detail).toEqual({ field: 'tools[1].parameters' });
    expect(free.message).toMatch(/^tools beside JSON output .* tools\[1\]\.parameters \("anything"\) takes keys/);
    expect(planTools({ messages, tools: [anything] } as GenerateRequest, undefined, tok)?.grammar).toBeUndefined();
    // Pydantic's $defs and $ref for a nested model: held, read in the tool's own parameters.
    const place = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const nested = {
      name: 'lookup',
      parameters: { type: 'object', properties: { at: { $ref: '#/$defs/Place' } }, $defs: { Place: place } },
    };
    const held = planTools(
      { messages, tools: [weather, nested], responseFormat: 'json' } as GenerateRequest,
      undefined,
      tok,
    );
    expect(held?.grammar).toBeDefined();
    // … and a forced call to it is written to them.
    const forced = planTools(
      { messages, tools: [weather, nested], toolChoice: 'required' } as GenerateRequest,
      undefined,
      tok,
    );
    const written = (text: string) => {
      const bytes = new TextEncoder().encode(text);
      return feedSchemaBytes(compileSchema(forced?.schema), initialSchemaState(), bytes, 0, bytes.length);
    };
    expect(written('{"name": "lookup", "arguments": {"at": {"city": "Oslo"}}}')?.done).toBe(true);
    expect(written('{"name": "lookup", "arguments": {"at": {"town"')).toBeNull();
    // Parameters that are a reference (zod-to-json-schema with a name), a pointer through a oneOf (which the grammar
    // reads as an anyOf), and the XML forms' parameter schemas with their references followed.
    const named = {
      name: 'named',
      parameters: {
        $ref: '#/definitions/Args',
        definitions: {
          Args: { type: 'object', properties: { at: { $ref: '#/definitions/P' } }, required: ['at'] },
          P: place,
        },
      },
    };
    const pick = {
      name: 'pick',
      parameters: {
        type: 'object',
        properties: { a: { oneOf: [{ type: 'string' }, { type: 'integer' }] }, b: { $ref: '#/properties/a/oneOf/1' } },
      },
    };
    // A property called "oneOf" is no oneOf; a definition with its own definitions keeps them.
    const called = {
      name: 'called',
      parameters: {
        type: 'object',
        properties: {
          oneOf: { type: 'object', properties: { a: { type: 'string' } } },
          b: { $ref: '#/properties/oneOf/properties/a' },
        },
      },
    };
    const bundled = {
      name: 'bundled',
      parameters: {
        $ref: '#/$defs/Args',
        $defs: {
          Args: {
            $id: 'urn:args',
            type: 'object',
            properties: { p: { $ref: '#/$defs/P' } },
            $defs: { P: { type: 'boolean' } },
          },
        },
      },
    };
    // Names by $anchor (`#place`), the root's among them.
    const anchored = {
      name: 'anchored',
      parameters: {
        $ref: '#args',
        $defs: {
          Args: { $anchor: 'args', type: 'object', properties: { at: { $ref: '#place' } }, required: ['at'] },
          Place: { $anchor: 'place', ...place },
        },
      },
    };
    // A pointer through a oneOf inside a schema with its own $id: read from that schema, as the grammar reads it.
    const embedded = {
      name: 'embedded',
      parameters: {
        type: 'object',
        properties: { q: { $ref: '#/$defs/Q' } },
        $defs: {
          Q: {
            $id: 'urn:q',
            type: 'object',
            properties: {
              a: { oneOf: [{ type: 'string' }, { type: 'integer' }] },
              b: { $ref: '#/properties/a/oneOf/1' },
            },
          },
        },
      },
    };
    // … through an address (an embedded schema's $id) and through a key written percent-encoded.
    const addressed = {
      name: 'addressed',
      parameters: {
        type: 'object',
        properties: { q: { $ref: 'q.json#/properties/a/oneOf/1' } },
        required: ['q'],
        $defs: {
          Q: { $id: 'q.json', type: 'object', properties: { a: { oneOf: [{ type: 'string' }, { type: 'integer' }] } } },
        },
      },
    };
    const percent = {
      name: 'percent',
      parameters: {
        type: 'object',
        properties: { q: { $ref: '#/$defs/a%20b%2525/oneOf/1' } },
        required: ['q'],
        $defs: { 'a b%25': { oneOf: [{ type: 'string' }, { type: 'integer' }] } },
      },
    };
    for (const tool of [addressed, percent]) {
      const calls = planTools({ messages, tools: [tool], responseFormat: 'json' } as GenerateRequest, undefined, tok)
        ?.grammar?.calls[0]?.schema;
      const takes = (text: string) => {
        const bytes = new TextEncoder().encode(text);
        return feedSchemaBytes(compileSchema(calls), initialSchemaState(), bytes, 0, bytes.length)?.done === true;
      };
      expect(takes(`{"name": "${tool.name}", "arguments": {"q": 5}}`), tool.name).toBe(true);
      expect(takes(`{"name": "${tool.name}", "arguments": {"q": "x"}}`), tool.name).toBe(false);
    }
    for (const tool of [named, pick, called, bundled, anchored, embedded, addressed, percent]) {
      expect(
        planTools({ messages, tools: [tool], responseFormat: 'json' } as GenerateRequest, undefined, tok)?.grammar,
        tool.name,
      ).toBeDefined();
      expect(
        planTools({ messages, tools: [tool], toolChoice: 'required' } as GenerateRequest, undefined, tok)?.forced,
      ).toBe(true);
    }
    const xmlForm = '{{ tools | tojson }}<tool_call><function={{ messages[0].content }}>';
    const params = planTools(
      { messages, tools: [named, pick, anchored] } as GenerateRequest,
      xmlForm,
      tok,
    )?.paramSchemas;
    expect(params?.get('named')?.at).toEqual(place);
    expect(params?.get('anchored')?.at).toEqual({ $anchor: 'place', ...place });
    const byName = planTools(
      { messages, tools: [anchored], toolChoice: 'required' } as GenerateRequest,
      undefined,
      tok,
    );
    const call = (text: string) => {
      const bytes = new TextEncoder().encode(text);
      return feedSchemaBytes(compileSchema(byName?.schema), initialSchemaState(), bytes, 0, bytes.length);
    };
    expect(call('{"name": "anchored", "arguments": {"at": {"city": "Oslo"}}}')?.done).toBe(true);
    expect(call('{"name": "anchored", "arguments": {"at": {"town"')).toBeNull();
    expect(params?.get('pick')?.b).toEqual({ type: 'integer' });
    // A schema the grammar cannot take (a recursive one): the tool and the place.
    const tree = {
      name: 'tree',
      parameters: {
        type: 'object',
        properties: { root: { $ref: '#/$defs/Node' } },
        $defs: { Node: { type: 'object', properties: { kids: { type: 'array', items: { $ref: '#/$defs/Node' } } } } },
      },
    };
    const ref = refusal({ tools: [weather, tree], responseFormat: 'json' });
    expect(ref.detail).toEqual({ field: 'tools[1].parameters.$defs.Node.properties.kids.items.$ref' });
    expect(ref.message).toMatch(
      /and kvdesk cannot hold a call to tools\[1\]\.parameters\.\$defs\.Node\.properties\.kids\.items\.\$ref \("tree"\): "#\/\$defs\/Node" refers back to itself/,
    );
    let harmony: unknown;
    try {
      planTools({ messages, tools: [weather], responseFormat: 'json' } as GenerateRequest, undefined, tok, {
        harmony: true,
      });
    } catch (err) {
      harmony = err;
    }
    expect(harmony).toMatchObject({ message: expect.stringMatching(/^This model \(gpt-oss\) writes JSON output/) });
    expect(refusal({ tools: [weather, weather] }).detail).toEqual({ field: 'tools[1].name' });
    expect(refusal({ tools: [weather], toolChoice: { name: 'search' } }).message).toMatch(
      /names "search", which is not among the tools \(get_weather\)/,
    );
    const bound = { name: 'f', parameters: { type: 'object', properties: { n: { type: 'number', minimum: 0 } } } };
    const err = refusal({ tools: [weather, bound], toolChoice: 'required' });
    expect(err.detail).toEqual({ field: 'tools[1].parameters.properties.n.minimum' });
    expect(err.message).toMatch(
      /^tools\[1\]\.parameters\.properties\.n\.minimum \("f"\): kvdesk cannot make a call follow/,
    );
    // With auto, the schema is only shown to the model, never enforced: accepted.
    expect(planTools({ messages, tools: [bound] } as GenerateRequest, undefined, tok)?.forced).toBe(false);
    // Nested thousands deep (shown to the model as JSON, it overflowed JSON.stringify's stack: a 500, INTERNAL).
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 5000; i++) deep = { type: 'object', properties: { a: deep } };
    for (const toolChoice of ['auto', 'required'] as const) {
      const nested = refusal({ tools: [weather, { name: 'deep', parameters: deep }], toolChoice });
      expect(nested.code).toBe('BAD_REQUEST');
      expect(nested.detail).toEqual({ field: 'tools[1].parameters' });
      expect(nested.message).toMatch(
        /^tools\[1\]\.parameters \("deep"\) nests 257 levels deep; kvdesk takes at most 256/,
      );
    }
  });

  it("reads each tool's $refs in its own parameters, where two tools' definitions take the same name", () => {
    // Pydantic names each tool's nested model in its own $defs; two tools may each have an "Item".
    const item = (key: string, type: string) => ({
      type: 'object',
      properties: { [key]: { type } },
      required: [key],
      additionalProperties: false,
    });
    const tool = (name: string, arg: string, def: string, schema: unknown) => ({
      name,
      parameters: {
        type: 'object',
        properties: { [arg]: { $ref: `#/$defs/${def}` } },
        required: [arg],
        additionalProperties: false,
        $defs: { [def]: schema },
      },
    });
    const variants = {
      same: [
        tool('place_order', 'order', 'Item', item('qty', 'integer')),
        tool('set_toggle', 'toggle', 'Item', item('flag', 'boolean')),
      ],
      distinct: [
        tool('place_order', 'order', 'OrderItem', item('qty', 'integer')),
        tool('set_toggle', 'toggle', 'ToggleItem', item('flag', 'boolean')),
      ],
    };
    const takes = (schema: unknown, text: string) => {
      const bytes = new TextEncoder().encode(text);
      return feedSchemaBytes(compileSchema(schema), initialSchemaState(), bytes, 0, bytes.length)?.done === true;
    };
    for (const [variant, tools] of Object.entries(variants)) {
      const forced = planTools({ messages, tools, toolChoice: 'required' } as GenerateRequest, undefined, tok);
      const auto = planTools({ messages, tools, responseFormat: 'json' } as GenerateRequest, undefined, tok);
      const grammar = auto?.grammar?.calls[0]?.schema;
      expect(grammar, variant).toBeDefined();
      for (const schema of [forced?.schema, grammar]) {
        expect(takes(schema, '{"name": "place_order", "arguments": {"order": {"qty": 3}}}'), variant).toBe(true);
        expect(takes(schema, '{"name": "set_toggle", "arguments": {"toggle": {"flag": true}}}'), variant).toBe(true);
        expect(takes(schema, '{"name": "place_order", "arguments": {"order": {"flag": false}}}'), variant).toBe(false);
        expect(takes(schema, '{"name": "set_toggle", "arguments": {"toggle": {"qty": 1}}}'), variant).toBe(false);
      }
    }
  });

  it('refuses parameters that are not an object, history arguments that are not one, and forms it cannot read', () => {
    const text = { name: 'say', parameters: { type: 'string' } };
    expect(refusal({ tools: [weather, text] }).detail).toEqual({ field: 'tools[1].parameters.type' });
    const history = [
      ...messages,
      { role: 'assistant' as const, content: '', toolCalls: [{ id: 'c', name: 'get_weather', arguments: 'Oslo' }] },
    ];
    expect(refusal({ messages: history }).detail).toEqual({ field: 'messages[1].toolCalls[0].arguments' });
    // Every call is answered before the conversation goes on, and every result answers a call.
    const call = { id: 'c1', name: 'get_weather', arguments: '{}' };
    const answered = [
      ...messages,
      { role: 'assistant' as const, content: '', toolCalls: [call] },
      { role: 'tool' as const, content: 'sunny', toolCallId: 'c1' },
    ];
    expect(planTools({ messages: answered } as GenerateRequest, undefined, tok)).toBeUndefined();
    expect(refusal({ messages: [...answered, { role: 'tool', content: 'again', toolCallId: 'c1' }] }).detail).toEqual({
      field: 'messages[3].toolCallId',
    });
    const open = refusal({ messages: [...answered.slice(0, 2), { role: 'user', content: 'well?' }] });
    expect(open.detail).toEqual({ field: 'messages[1].toolCalls[0]' });
    expect(open.message).toMatch(/has no tool result before messages\[2\]/);
    expect(refusal({ messages: answered.slice(0, 2) }).message).toMatch(/no tool result before the reply/);
    // XML forms are read in auto, but a call in them cannot be forced.
    const xml = '{{ tools | tojson }}<tool_call><function={{ messages[0].content }}>';
    const plan = planTools({ messages, tools: [weather] } as GenerateRequest, xml, tok);
    expect(plan?.format).toBe(QWEN_XML);
    expect(plan?.paramSchemas.get('get_weather')).toEqual({ city: { type: 'string' } });
    expect(refusal({ tools: [weather], toolChoice: 'required' }, xml).message).toMatch(
      /XML tags with plain-text values/,
    );
    expect(refusal({ tools: [weather], toolChoice: 'required' }, xml).detail).toEqual({ field: 'toolChoice' });
  });

  it("Mistral's name-apart form: a forced call names its tool in the prompt; among several it must be named", () => {
    const args = '{{ tools | tojson }}{% for m in messages %}[TOOL_CALLS]{{ m.content }}[ARGS]{% endfor %}';
    const plan = planTools(
      { messages, tools: [weather, search], toolChoice: { name: 'get_weather' } } as GenerateRequest,
      args,
      tok,
    );
    expect(plan).toMatchObject({ forced: true, forcedName: 'get_weather', suffix: '[TOOL_CALLS]get_weather[ARGS]' });
    expect(plan?.schema).toEqual(weather.parameters);
    expect(refusal({ tools: [weather, search], toolChoice: 'required' }, args).message).toMatch(
      /cannot choose among 2 tools: name the tool/,
    );
  });

  it("a template without tools gets kvdesk's Hermes form; auto reads calls without forcing one", () => {
    const plan = planTools({ messages, tools: [weather] } as GenerateRequest, '{{ messages[0].content }}', tok);
    expect(plan).toMatchObject({
      native: false,
      format: HERMES,
      reads: true,
      forced: false,
      suffix: '',
      parallel: true,
    });
    expect(plan?.shown).toEqual([weather]);
    expect(plan?.schema).toBeUndefined();
    expect(plan?.keepIds.size).toBe(0);
  });

  it('none shows no tools and reads no calls', () => {
    const plan = planTools({ messages, tools: [weather], toolChoice: 'none' } as GenerateRequest, undefined, tok);
    expect(plan).toMatchObject({ reads: false, forced: false });
    expect(plan?.shown).toBeUndefined();
  });

  it("a native template's form, its special marker kept, and a forced call's opening and schema", () => {
    const plan = planTools(
      { messages, tools: [weather, search], toolChoice: 'required', parallelToolCalls: false } as GenerateRequest,
      NATIVE_MISTRAL,
      tok,
    );
    expect(plan).toMatchObject({
      native: true,
      format: MISTRAL,
      forced: true,
      suffix: '[TOOL_CALLS] [',
      parallel: false,
    });
    expect([...(plan?.keepIds ?? [])]).toEqual([7]);
    // The name-apart form's [ARGS] too (a special token in Mistral's tokenizers): the filter reads the name before it.
    const apart = '{{ tools | tojson }}{% for m in messages %}[TOOL_CALLS]{{ m.content }}[ARGS]{% endfor %}';
    const named = planTools({ messages, tools: [weather], toolChoice: 'required' } as GenerateRequest, apart, tok);
    expect([...(named?.keepIds ?? [])].sort()).toEqual([7, 8]);
    expect(plan?.schema).toEqual({
      anyOf: [
        {
          type: 'object',
          properties: { name: { const: 'get_weather' }, arguments: weather.parameters },
          required: ['name', 'arguments'],
        },
        {
          type: 'object',
          // A parameters schema with properties but no type is an object.
          properties: { name: { const: 'search' }, arguments: { type: 'object', ...search.parameters } },
          required: ['name', 'arguments'],
        },
      ],
    });
    expect(() => compileSchema(plan?.schema)).not.toThrow();
  });

  it('a named tool is the only alternative; a tool without parameters takes an empty object', () => {
    const plan = planTools(
      { messages, tools: [weather, { name: 'now' }], toolChoice: { name: 'now' } } as GenerateRequest,
      undefined,
      tok,
    );
    expect(plan?.schema).toEqual({
      type: 'object',
      properties: { name: { const: 'now' }, arguments: { type: 'object', properties: {} } },
      required: ['name', 'arguments'],
    });
    expect(plan?.suffix).toBe('<tool_call>\n');
  });

  it('auto: the grammar each call the model opens is held to, per form; none where kvdesk cannot hold one', () => {
    const auto = (tools: object[], template?: string) =>
      planTools({ messages, tools } as GenerateRequest, template, tok)?.grammar;
    const envelope = (name: string, args: object) => ({
      type: 'object',
      properties: { name: { const: name }, arguments: args },
      required: ['name', 'arguments'],
    });
    // kvdesk's own Hermes form: the tag, one call, the closing tag.
    expect(auto([weather])).toEqual({
      trigger: '<tool_call>',
      array: false,
      close: '</tool_call>',
      calls: [{ head: '', schema: envelope('get_weather', weather.parameters) }],
    });
    // Mistral's: an array of calls after the marker, nothing to close.
    expect(auto([weather, search], NATIVE_MISTRAL)).toMatchObject({ trigger: '[TOOL_CALLS]', array: true, close: '' });
    expect(auto([weather, search], NATIVE_MISTRAL)?.single).toBeUndefined();
    // Without parallel calls, an array of one.
    const one = planTools(
      { messages, tools: [weather], parallelToolCalls: false } as GenerateRequest,
      NATIVE_MISTRAL,
      tok,
    )?.grammar;
    expect(one).toMatchObject({ array: true, single: true });
    expect(auto([weather, search], NATIVE_MISTRAL)?.calls[0]?.schema).toEqual({
      anyOf: [
        envelope('get_weather', weather.parameters),
        envelope('search', { type: 'object', ...search.parameters }),
      ],
    });
    // The name-apart form: each tool's name and the marker, then its arguments.
    const args = '{{ tools | tojson }}{% for m in messages %}[TOOL_CALLS]{{ m.content }}[ARGS]{% endfor %}';
    expect(auto([weather, search], args)).toEqual({
      trigger: '[TOOL_CALLS]',
      array: false,
      close: '',
      calls: [
        { head: 'get_weather[ARGS]', schema: weather.parameters },
        { head: 'search[ARGS]', schema: { type: 'object', ...search.parameters } },
      ],
    });
    // A bare JSON object (Llama 3): recognised at the reply's start, with `parameters`.
    const bare = auto([weather], '{{ tools | tojson }}{{ messages[0].content }}');
    expect(bare).toMatchObject({ trigger: '', array: false, close: '' });
    expect(bare?.calls[0]?.schema).toMatchObject({ properties: { parameters: weather.parameters } });
    // Qwen3-Coder's XML form: each tool's name and parameter names (its values are plain text).
    expect(auto([weather, { name: 'now' }], '{{ tools | tojson }}<tool_call><function=x>')).toEqual({
      trigger: '<tool_call>',
      array: false,
      close: '</tool_call>',
      calls: [],
      xml: {
        tools: [
          { name: 'get_weather', params: ['city'] },
          { name: 'now', params: [] },
        ],
      },
    });
    // None: GLM's XML form; arguments beside the listed ones (additionalProperties), or free-form ones in an XML
    // form (which holds the listed names); a schema kvdesk cannot enforce; forced or none choices. Free-form
    // arguments in a JSON form are held as any object (a map of additionalProperties' schema where it gives one).
    expect(auto([weather], '{{ tools | tojson }}<tool_call>x<arg_key>')).toBeUndefined();
    const run = { name: 'run', parameters: { type: 'object' } };
    expect(auto([weather, run])?.calls[0]?.schema).toEqual({
      anyOf: [envelope('get_weather', weather.parameters), envelope('run', run.parameters)],
    });
    expect(auto([weather, run], '{{ tools | tojson }}<tool_call><function=x>')).toBeUndefined();
    // A map beside `properties: {}` is free-form too; an object listing properties beside others, at any depth
    // (a dict field beside listed ones), is not held.
    const tagged = {
      name: 'tag',
      parameters: { type: 'object', properties: {}, additionalProperties: { type: 'string' } },
    };
    expect(auto([tagged])?.calls[0]?.schema).toEqual(envelope('tag', tagged.parameters));
    const labels = {
      name: 'label',
      parameters: {
        type: 'object',
        properties: {
          repo: { type: 'string' },
          labels: {
            type: 'object',
            properties: { priority: { type: 'string' } },
            additionalProperties: { type: 'string' },
          },
        },
        required: ['repo'],
      },
    };
    expect(auto([weather, labels])).toBeUndefined();
    // Data and names are not schemas: properties named so, a default holding such keys, are held.
    const named = {
      name: 'named',
      parameters: {
        type: 'object',
        properties: { properties: { type: 'string' }, additionalProperties: { type: 'boolean' } },
        default: { properties: { a: 1 }, additionalProperties: true },
      },
    };
    expect(auto([named])).toBeDefined();
    const deep = {
      name: 'deep',
      parameters: { type: 'object', properties: { l: { type: 'array', items: labels.parameters } } },
    };
    expect(auto([deep])).toBeUndefined();
    // A pointer into a oneOf under additionalProperties follows it where the grammar reads it as an anyOf.
    const pointed = {
      name: 'pointed',
      parameters: {
        type: 'object',
        properties: {
          a: { $ref: '#/properties/b/additionalProperties/oneOf/0' },
          b: { type: 'object', additionalProperties: { oneOf: [{ type: 'integer' }, { type: 'string' }] } },
        },
      },
    };
    expect(auto([pointed])).toBeDefined();
    // (`properties: {}` with additionalProperties true: any keys, held as such.)
    expect(
      auto([{ name: 'run', parameters: { type: 'object', properties: {}, additionalProperties: true } }]),
    ).toBeDefined();
    expect(
      auto([{ name: 'run', parameters: { type: 'object', properties: { n: { $ref: '#/$defs/n' } } } }]),
    ).toBeUndefined();
    // Value bounds are dropped (the shape is held), and oneOf is read as anyOf; a property named like one stays.
    const bounded = {
      type: 'object',
      properties: {
        n: { type: 'integer', minimum: 1, maximum: 9 },
        format: {
          oneOf: [
            { type: 'string', format: 'date' },
            { type: 'string', pattern: '^x' },
          ],
        },
      },
    };
    expect(auto([{ name: 'run', parameters: bounded }])?.calls[0]?.schema).toEqual(
      envelope('run', {
        type: 'object',
        properties: { n: { type: 'integer' }, format: { anyOf: [{ type: 'string' }, { type: 'string' }] } },
      }),
    );
    expect(auto([{ name: 'now' }, { name: 'tick', parameters: { type: 'object', properties: {} } }])).toBeDefined();
    for (const toolChoice of ['required', 'none'] as const) {
      expect(
        planTools({ messages, tools: [weather], toolChoice } as GenerateRequest, undefined, tok)?.grammar,
      ).toBeUndefined();
    }
  });
});

describe("bare-JSON calls beside JSON output (Llama 3's form)", () => {
  // A template that shows tools and has no call marker: calls are bare JSON objects, as the JSON reply is.
  const template = '{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}';
  const cities = {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'] },
  };
  const plan = planTools({ messages, tools: [cities], responseFormat: 'json' } as GenerateRequest, template, tok);
  /** The reply through the host's filter as the window and the APIs read it, in pieces of `size` characters. */
  const read = (text: string, size = 1000) => {
    if (!plan?.grammar) throw new Error('no grammar');
    const f = createToolCallFilter(plan.format, plan.names, { mayBeCall: bareCallTest(plan.grammar) });
    const pushes = [];
    for (let i = 0; i < text.length; i += size) pushes.push(f.push(text.slice(i, i + size)));
    pushes.push(f.flush());
    return {
      content: pushes.map((p) => p.content).join(''),
      calls: pushes.flatMap((p) => p.calls).map((c) => [c.name, c.arguments]),
      firstContentAt: pushes.findIndex((p) => p.content.length > 0),
    };
  };

  it('an object is a call only where the call grammar took it whole; else the JSON reply, as written', () => {
    expect(plan?.format).toBe(BARE_JSON);
    expect(read('{"name":"get_weather","parameters":{"city":"Oslo"}}')).toMatchObject({
      content: '',
      calls: [['get_weather', '{"city":"Oslo"}']],
    });
    // Objects the engine's JSON reading went on with after the call's refused them (a city not listed, the
    // required argument left out, another key, a JSON answer whose "name" is a tool's): text, not calls.
    for (const json of [
      '{"name":"get_weather","parameters":{"city":"Berlin"}}',
      '{"name":"get_weather"}',
      '{"name":"get_weather","arguments":{"town":1}}',
      '{"name":"get_weather","summary":"the tool I would use"}',
    ]) {
      expect(read(json), json).toMatchObject({ content: json, calls: [] });
    }
  });

  it('the JSON reply streams once it cannot be a call, not only when its object closes', () => {
    const answer = `{"summary": "${'sunny '.repeat(20)}"}`;
    // Its first piece (`{"summar`) already is no call's beginning.
    expect(read(answer, 8)).toMatchObject({ content: answer, calls: [], firstContentAt: 0 });
  });
});
