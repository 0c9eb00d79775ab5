/**
 * JSON mode on the real engine and host with the default model (a random
 * model: left alone it writes anything but JSON). Every reply must start with
 * `{`, and every reply that ended by itself must be a JSON object by
 * JSON.parse; rows of one batch end on their own; the engine masks with the
 * token table of the package loaded now, after a reload under the same id
 * (with requests on the old load still arriving) and after a crash.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerService } from '../../src/main/host/runner-service';
import type { GenerateRequest, GenerationResult, StreamFrame } from '../../src/shared/contract';
import { defaultModelDir, fixture, fixturesSkipReason, haveFixtures } from '../helpers/fixtures';
import { generatedModel } from '../helpers/models';

let host: RunnerService;
beforeAll(async () => {
  host = new RunnerService({ intraOpNumThreads: 2 });
  await host.loadModel(defaultModelDir, { id: 'default' });
}, 60_000);
afterAll(async () => {
  await host?.close();
});

const ask = (seed: number, extra: Partial<GenerateRequest> = {}) =>
  host.generate({
    messages: [{ role: 'user', content: 'Reply in JSON.' }],
    maxNewTokens: 120,
    sampling: { temperature: 1, seed },
    responseFormat: 'json',
    ...extra,
  });

/** A row that ended by itself is one JSON object; one cut by max tokens is at least its start. */
function expectJsonReply(row: { text: string; finishReason: string }, label: string): boolean {
  expect(row.text.startsWith('{'), `${label}: ${JSON.stringify(row.text)}`).toBe(true);
  if (row.finishReason !== 'eos') {
    expect(row.finishReason, label).toBe('length');
    return false;
  }
  const parsed: unknown = JSON.parse(row.text);
  expect(typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed), label).toBe(true);
  return true;
}

describe('JSON mode', () => {
  it('every reply is a JSON object, or its start when max tokens cut it; without it the model writes no JSON', async () => {
    let complete = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const r = await ask(seed).result;
      if (expectJsonReply(r, `seed ${seed}`)) complete++;
      const plain = await ask(seed, { responseFormat: 'text' }).result;
      expect(plain.text.startsWith('{'), `seed ${seed} without JSON mode`).toBe(false);
    }
    expect(complete).toBeGreaterThanOrEqual(2);
  });

  it('streams the same text it returns', async () => {
    const frames: StreamFrame[] = [];
    const r = await host.generate(
      {
        messages: [{ role: 'user', content: 'Reply in JSON.' }],
        maxNewTokens: 120,
        sampling: { temperature: 1, seed: 3 },
        responseFormat: 'json',
      },
      (f) => frames.push(f),
    ).result;
    expect(r.text.startsWith('{')).toBe(true);
    expect(frames.flatMap((f) => (f.type === 'tokens' ? f.rows.map((row) => row.text) : [])).join('')).toBe(r.text);
  });

  it('stop strings do not cut a JSON reply: it is the reply without them, and ends when its object closes', async () => {
    // '"' and ':' occur in every object with a key; without JSON mode the same stop strings do cut a reply.
    for (let seed = 1; seed <= 3; seed++) {
      const r = await ask(seed, { stop: ['"', ':'] }).result;
      const free = await ask(seed).result;
      expect(r.text, `seed ${seed}`).toBe(free.text);
      expect(r.finishReason, `seed ${seed}`).toBe(free.finishReason);
      expect(r.text, `seed ${seed}`).toMatch(/[":]/);
      expect(r.rows[0]?.stopSequence, `seed ${seed}`).toBeUndefined();
      expectJsonReply(r, `seed ${seed} with stop strings`);
    }
    const plain = await host.generate({
      messages: [{ role: 'user', content: 'Reply.' }],
      maxNewTokens: 120,
      sampling: { temperature: 1, seed: 1 },
      stop: ['e', 'a', ' '],
    }).result;
    expect(plain.finishReason).toBe('stop');
  });

  it('rows of one batched request each keep to JSON and end on their own', async () => {
    const r: GenerationResult = await ask(11, { rows: 4 }).result;
    expect(r.rows).toHaveLength(4);
    const lengths = new Set(r.rows.map((row) => row.tokenIds.length));
    for (const [i, row] of r.rows.entries()) expectJsonReply(row, `row ${i}`);
    // They did not all stop together: a row whose object closed ended while others went on.
    expect(r.rows.some((row) => row.finishReason === 'eos')).toBe(true);
    expect(lengths.size).toBeGreaterThan(1);
  });

  it.skipIf(!haveFixtures)(
    `a vocabulary that cannot write JSON ends the reply at once, unfinished (${fixturesSkipReason})`,
    async () => {
      // onnx-genai's tiny-llm knows 32 words and no braces.
      await host.loadModel(fixture('onnx-genai/tiny-llm'), { id: 'words' });
      const r = await ask(1, { model: 'words', messages: undefined, prompt: 'hello world' }).result;
      expect(r.text).toBe('');
      expect(r.tokenIds).toEqual([]);
      expect(r.finishReason).toBe('length');
      await host.unloadModel('words');
    },
  );

  it('uses the token table of the package loaded now: after a reload under the same id, and after a crash', async () => {
    const other = generatedModel('json-reload', { vocabSize: 1024, maxPositions: 256 });
    const tables = async () => (await host.engine.stats()).tokenTables.filter((t) => t.modelId === 'x');
    await host.loadModel(defaultModelDir, { id: 'x' });
    const onA = () => ask(2, { model: 'x' }).result;
    const a = await onA();
    expect(await tables()).toMatchObject([{ tokens: 512 }]);
    // JSON requests on the old load keep running while the other package loads under the same id.
    let loaded = false;
    const reload = host.loadModel(other, { id: 'x' }).then(() => {
      loaded = true;
    });
    while (!loaded) await onA().catch(() => undefined);
    await reload;
    const b = await onA();
    expectJsonReply(b, 'after the reload');
    expect(await tables()).toMatchObject([{ tokens: 1024 }]);
    expect(b.text).not.toBe(a.text);

    process.kill(host.engine.pid as number, 'SIGKILL');
    let after: GenerationResult | undefined;
    for (let i = 0; i < 100 && !after; i++) {
      try {
        after = await onA();
      } catch {
        // The engine is restarting and loading the models again.
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    expect(after?.text).toBe(b.text);
    expect(await tables()).toMatchObject([{ tokens: 1024 }]);
  }, 60_000);
});

describe('structured output (a JSON Schema)', () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string' },
      age: { type: 'integer' },
      pet: { enum: ['cat', 'dog', null] },
      tags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 },
    },
    required: ['name', 'age', 'pet', 'tags'],
  };
  const conforming = (v: Record<string, unknown>) =>
    Object.keys(v).join() === 'name,age,pet,tags' &&
    typeof v.name === 'string' &&
    Number.isInteger(v.age) &&
    ['cat', 'dog', null].includes(v.pet as string | null) &&
    Array.isArray(v.tags) &&
    v.tags.length <= 2 &&
    v.tags.every((t) => typeof t === 'boolean');

  it('every reply that ended by itself conforms; one cut by max tokens is a prefix of one', async () => {
    let complete = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const r = await ask(seed, { jsonSchema: schema, maxNewTokens: 200 }).result;
      expect(r.text, r.text).toMatch(/^\{ ?"name": ?"/);
      if (r.finishReason === 'eos') {
        complete++;
        expect(conforming(JSON.parse(r.text)), r.text).toBe(true);
      } else expect(r.finishReason).toBe('length');
    }
    expect(complete).toBeGreaterThanOrEqual(2);
  });

  it('free-form values (Pydantic Any, dict[str, int]): replies that ended by themselves conform', async () => {
    const free = {
      type: 'object',
      properties: {
        meta: { title: 'Meta' },
        counts: { type: 'object', additionalProperties: { type: 'integer' } },
      },
      required: ['meta', 'counts'],
    };
    // The random model rarely closes a string or an object by itself (its keys here are its own): a bias on the
    // quote and the brace makes them short.
    const tok = host.tokenizerOf('default');
    const logitBias = Object.fromEntries(['"', '}'].map((c) => [tok.encode(c, { addSpecialTokens: false })[0], 4]));
    let complete = 0;
    let nonEmpty = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const r = await ask(seed, {
        jsonSchema: free,
        maxNewTokens: 200,
        sampling: { temperature: 1, seed, logitBias },
      }).result;
      expect(r.text, r.text).toMatch(/^\{ ?"meta": ?/);
      if (r.finishReason !== 'eos') {
        expect(r.finishReason).toBe('length');
        continue;
      }
      complete++;
      const v = JSON.parse(r.text) as { meta: unknown; counts: Record<string, unknown> };
      expect(Object.keys(v), r.text).toEqual(['meta', 'counts']);
      expect(typeof v.counts === 'object' && v.counts !== null && !Array.isArray(v.counts), r.text).toBe(true);
      for (const n of Object.values(v.counts)) expect(Number.isInteger(n), r.text).toBe(true);
      if (Object.keys(v.counts).length > 0) nonEmpty++;
    }
    expect(complete).toBeGreaterThanOrEqual(2);
    // The map takes keys of the model's own (an object of no listed keys could only have been {}).
    expect(nonEmpty).toBeGreaterThan(0);
  });

  it('refuses a schema it cannot enforce, naming the place, before anything runs', async () => {
    const bad = { type: 'object', properties: { age: { type: 'number', minimum: 0 } } };
    await expect(ask(1, { jsonSchema: bad }).result).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('schema.properties.age.minimum'),
      detail: { field: 'jsonSchema.properties.age.minimum' },
    });
  });
});
