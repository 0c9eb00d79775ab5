/**
 * What a request's tools mean for its prompt and reply: refusals that name the field, the form of the
 * package's template, and the schema a forced call is written to.
 */
import { describe, expect, it } from 'vitest';
import { compileSchema } from '../../../src/main/engine/json-schema';
import { planTools } from '../../../src/main/host/tool-plan';
import { templateReadsTools } from '../../../src/main/tokenizer/chat-template';
import { HERMES, MISTRAL } from '../../../src/main/tokenizer/tool-calls';
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
  tokenToId: (t: string) => (t === '[TOOL_CALLS]' ? 7 : undefined),
  isSpecial: (id: number) => id === 7,
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

describe('templateReadsTools', () => {
  it('is true only for a template that reads the tools variable', () => {
    expect(templateReadsTools('{% for t in tools %}{{ t }}{% endfor %}')).toBe(true);
    expect(templateReadsTools('{% if tools is defined %}x{% endif %}')).toBe(true);
    expect(templateReadsTools('{{ "tools" }}{% for m in messages %}{{ m.content }}{% endfor %}')).toBe(false);
    expect(templateReadsTools('{% broken')).toBe(false);
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
    expect(refusal({ tools: [weather], responseFormat: 'json' }).message).toMatch(/cannot be combined with JSON/);
    expect(refusal({ tools: [weather, weather] }).detail).toEqual({ field: 'tools[1].name' });
    expect(refusal({ tools: [weather], toolChoice: { name: 'search' } }).message).toMatch(
      /names "search", which is not among the tools \(get_weather\)/,
    );
    const bound = { name: 'f', parameters: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } } } };
    const err = refusal({ tools: [weather, bound], toolChoice: 'required' });
    expect(err.detail).toEqual({ field: 'tools[1].parameters.properties.n.minimum' });
    expect(err.message).toMatch(
      /^tools\[1\]\.parameters\.properties\.n\.minimum \("f"\): kvdesk cannot make a call follow/,
    );
    // With auto, the schema is only shown to the model, never enforced: accepted.
    expect(planTools({ messages, tools: [bound] } as GenerateRequest, undefined, tok)?.forced).toBe(false);
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
      suffix: '[TOOL_CALLS][',
      parallel: false,
    });
    expect([...(plan?.keepIds ?? [])]).toEqual([7]);
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
});
