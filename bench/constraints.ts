/**
 * What constrained decoding costs: the vocabulary check (the mask) of JSON mode, structured output and forced
 * tool calls at typical points of a reply, on GPT-2's real 50 257-token vocabulary (the tokenizer of the shared
 * fixture tiny-random-gpt2-fp32 when it is there, else the bench model's, which is mostly filler tokens); and
 * decode speed through the host with each of them against plain sampling, in the same run.
 * `node bin/run-ts.cjs bench/constraints.ts [--reps 5] [--tokens 48]`
 *
 * Mask: median of `reps` checks of the whole vocabulary from one state (ms). Decode: tokens per second of a
 * sampled reply (temperature 1, a seed per rep, alternating the variants), median over reps; a constrained reply
 * may end early (its object closed), so tokens/s is over the tokens it wrote. A forced call is compared with the
 * same prompt unforced (the tools' description makes the prompt long, and decode slows with it), and the
 * unforced reply whose calls are held to their schemas once opened (tool_choice auto) with one whose calls are
 * only read. The last line is one JSON object.
 */

import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { constraintFor, type ReplyConstraint, tokenTable } from '../src/main/engine/json-constraint';
import { compileSchema } from '../src/main/engine/json-schema';
import { RunnerService } from '../src/main/host/runner-service';
import { createTextTokenizer, type TextTokenizer } from '../src/main/tokenizer';
import type { GenerateRequest, ToolDefinition } from '../src/shared/contract';
import { flagValue } from './lib/args';
import { log } from './lib/context';
import { ensureModel } from './lib/models';
import { fmt, median } from './lib/stats';

/** A tool of the kind agents send: an enum, a free string, a number, a flag. */
function tool(i: number): ToolDefinition {
  return {
    name: `tool_${i}_${['search', 'weather', 'lamp', 'mail'][i % 4]}`,
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string' },
        mode: { enum: ['fast', 'full', 'none'] },
        limit: { type: 'integer' },
        strict: { type: 'boolean' },
      },
      required: ['query'],
    },
  };
}

/** The schema a forced call among `n` tools is written to (as the host builds it). */
function envelope(n: number): Record<string, unknown> {
  const alternatives = Array.from({ length: n }, (_, i) => {
    const t = tool(i);
    return {
      type: 'object',
      properties: { name: { const: t.name }, arguments: t.parameters },
      required: ['name', 'arguments'],
    };
  });
  return alternatives.length === 1 ? (alternatives[0] as Record<string, unknown>) : { anyOf: alternatives };
}

const PLAIN_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    age: { type: 'integer' },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['name', 'age'],
};

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const reps = Math.max(3, Number(flagValue(argv, '--reps', '5')));
  const tokens = Math.max(8, Number(flagValue(argv, '--tokens', '48')));
  const model = ensureModel('gpt2-small', log);
  const host = new RunnerService({ intraOpNumThreads: Math.min(2, os.availableParallelism()) });
  try {
    await host.loadModel(model.dir, { id: 'gpt2-small' });
    // GPT-2's own vocabulary when the shared fixtures are there (the bench model's is mostly filler tokens).
    const gpt2 = path.resolve(
      __dirname,
      '../../shared/fixtures/onnxruntime-genai/tiny-random-gpt2-fp32/tokenizer.json',
    );
    let tok: TextTokenizer = host.tokenizerOf('gpt2-small');
    let vocabName = 'the bench model (filler tokens)';
    if (existsSync(gpt2)) {
      tok = createTextTokenizer({ tokenizerJson: JSON.parse(readFileSync(gpt2, 'utf8')), vocabSize: 50257 });
      vocabName = "GPT-2's";
    }
    const vocab = tok.vocabSize;
    const ids = Array.from({ length: vocab }, (_, id) => id);
    const table = tokenTable(
      ids.map((id) => (tok.idToToken(id) === undefined ? [] : tok.tokenPiece(id).bytes)),
      ids.filter((id) => tok.isSpecial(id)),
    );
    log(`mask on ${vocabName} vocabulary: ${vocab} tokens`);
    const encoder = new TextEncoder();
    const logits = new Float32Array(vocab);

    /** Median ms of one whole-vocabulary check after `prefix` (fed token by token as bytes of one token each). */
    const maskMs = (schema: Record<string, unknown> | undefined, prefix: string): number => {
      const c = constraintFor({
        table,
        json: true,
        ...(schema ? { schema: compileSchema(schema) } : {}),
      }) as ReplyConstraint;
      // Feed the prefix through ids whose bytes spell it (single-byte tokens: GPT-2 has one per byte).
      for (const b of encoder.encode(prefix)) {
        const id = ids.find((i) => {
          const from = table.offsets[i] as number;
          return (table.offsets[i + 1] as number) - from === 1 && table.bytes[from] === b;
        });
        if (id === undefined) throw new Error(`no single-byte token for ${b}`);
        c.accept(id);
      }
      const times: number[] = [];
      for (let r = 0; r < reps; r++) {
        logits.fill(0);
        const t0 = performance.now();
        c.mask(logits, vocab);
        times.push(performance.now() - t0);
      }
      return median(times);
    };

    const t8 = tool(1).name;
    const maskCases: Array<[string, Record<string, unknown> | undefined, string]> = [
      ['JSON mode, start', undefined, ''],
      ['JSON mode, inside a string', undefined, '{"note": "hello wor'],
      ['JSON mode, after a key', undefined, '{"note":'],
      ['schema, start', PLAIN_SCHEMA, ''],
      ['schema, inside a string', PLAIN_SCHEMA, '{"name":"Ada Lov'],
      ['schema, in a number', PLAIN_SCHEMA, '{"name":"Ada","age":3'],
      ['1 tool, in its arguments', envelope(1), `{"name":"${tool(0).name}","arguments":{"query":"light`],
      ['8 tools, start', envelope(8), ''],
      ['8 tools, naming one', envelope(8), '{"name":"tool_'],
      ['8 tools, in its arguments', envelope(8), `{"name":"${t8}","arguments":{"query":"light`],
      ['64 tools, naming one', envelope(64), '{"name":"tool_'],
    ];
    const masks: Array<{ label: string; ms: number }> = [];
    for (const [label, schema, prefix] of maskCases) {
      masks.push({ label, ms: maskMs(schema, prefix) });
      log(`mask: ${label}: ${fmt(masks[masks.length - 1]?.ms, 2)} ms`);
    }

    // Decode speed: plain, JSON mode, structured output, a forced call among 8 tools.
    const messages = [{ role: 'user' as const, content: 'Find me something about lighthouses, please.' }];
    const variants: Array<[string, Partial<GenerateRequest>]> = [
      ['plain', {}],
      ['JSON mode', { responseFormat: 'json' }],
      ['structured output', { jsonSchema: PLAIN_SCHEMA }],
      // The same prompt (the tools' description) with the model free to answer, and made to call one. (The bench
      // model's filler vocabulary spells JSON nearly a byte per token: three tools fill 700 of its 1024.)
      ['tools shown (auto)', { tools: Array.from({ length: 3 }, (_, i) => tool(i)) }],
      // The same, with arguments declared free-form (additionalProperties), so calls are read but not held: what
      // the lazy call grammar costs a reply that is free text (its check of each drawn token for an opening).
      [
        'tools shown (auto), calls not held',
        {
          tools: Array.from({ length: 3 }, (_, i) => {
            const t = tool(i);
            return { ...t, parameters: { ...t.parameters, additionalProperties: true } };
          }),
        },
      ],
      ['forced call, 3 tools', { tools: Array.from({ length: 3 }, (_, i) => tool(i)), toolChoice: 'required' }],
    ];
    const rates = new Map<string, number[]>(variants.map(([name]) => [name, []]));
    const counts = new Map<string, number[]>(variants.map(([name]) => [name, []]));
    for (let rep = 0; rep < reps; rep++) {
      const order = rep % 2 === 0 ? variants : [...variants].reverse();
      for (const [name, extra] of order) {
        const r = await host.generate({
          model: 'gpt2-small',
          messages,
          maxNewTokens: tokens,
          sampling: { temperature: 1, seed: 100 + rep },
          ...extra,
        } as GenerateRequest).result;
        rates.get(name)?.push(r.timings.tokensPerSecond);
        counts.get(name)?.push(r.tokenIds.length);
      }
    }
    const plain = median(rates.get('plain') ?? []);
    log('');
    log(`| vocabulary check (${vocabName} ${vocab} tokens) | ms |`);
    log('|---|---:|');
    for (const m of masks) log(`| ${m.label} | ${fmt(m.ms, 2)} |`);
    log('');
    log('| decode | tokens written (median) | tok/s (median) | vs plain |');
    log('|---|---:|---:|---:|');
    const ratios: Record<string, number> = {};
    for (const [name] of variants) {
      const rate = median(rates.get(name) ?? []);
      ratios[name] = Math.round((rate / plain) * 1000) / 1000;
      log(`| ${name} | ${median(counts.get(name) ?? [])} | ${fmt(rate, 1)} | ${fmt(rate / plain, 3)} |`);
    }
    const worstMask = Math.max(...masks.map((m) => m.ms));
    console.log(
      JSON.stringify({
        maskMsJsonStart: Math.round((masks[0]?.ms ?? 0) * 100) / 100,
        maskMsWorst: Math.round(worstMask * 100) / 100,
        decodeJsonVsPlain: ratios['JSON mode'],
        decodeSchemaVsPlain: ratios['structured output'],
        decodeForcedCallVsAuto:
          Math.round(((ratios['forced call, 3 tools'] ?? 0) / (ratios['tools shown (auto)'] ?? 1)) * 1000) / 1000,
        decodeAutoHeldVsNotHeld:
          Math.round(
            ((ratios['tools shown (auto)'] ?? 0) / (ratios['tools shown (auto), calls not held'] ?? 1)) * 1000,
          ) / 1000,
      }),
    );
  } finally {
    await host.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
