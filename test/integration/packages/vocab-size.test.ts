/**
 * A vocabulary size the graph leaves open (its logits' last dim symbolic) comes from the package's config or
 * tokenizer. One far past what the tokenizer has used to load, and then JSON mode built a table that large: the
 * host died of memory (vocab_size 2000000000), or every request failed "Invalid typed array length" (1e15). It is
 * refused now, naming the field; a vocabulary somewhat larger than the tokenizer (padded) loads, and JSON mode's
 * token table holds the tokenizer's ids only.
 */
import { describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editGraph, editJson, editsHost, symbolicDim } from './edited-default';

/** The default package with its logits' vocabulary axis symbolic and config.json's vocab_size set to `vocab`. */
async function openVocab(name: string, vocab: number | undefined): Promise<string> {
  const dir = await copyDefault(name);
  await editGraph(dir, (g) => symbolicDim(g, (p) => p === 'logits', -1, 'vocab'));
  await editJson(dir, 'config.json', (j) => {
    if (vocab === undefined) delete j.vocab_size;
    else j.vocab_size = vocab;
  });
  return dir;
}

const edits = editsHost();

describe('a vocabulary size far past the tokenizer', () => {
  for (const vocab of [2_000_000_000, 1e15]) {
    it(`config.json vocab_size ${vocab} with open logits: refused, naming the field and what to do`, async () => {
      const dir = await openVocab(`vocab-${vocab}`, vocab);
      const err = await refusal(loadModelSpec(dir), { file: 'config.json', field: 'vocab_size' });
      expect(err.message).toContain(`is ${vocab}, far above the 512 tokens of tokenizer.json`);
      expect(err.message).toContain(
        'onnx/model.onnx leaves it open (output "logits" [batch_size, sequence_length, vocab])',
      );
      expect(err.message).toContain("remove the field to use tokenizer.json's 512");
      await refusal(edits.host.loadModel(dir), { file: 'config.json', field: 'vocab_size' });
    });
  }

  it('a tokenizer.json id of 2000000000 with open logits and no vocab_size: refused, naming the token', async () => {
    const dir = await openVocab('tokenizer-id', undefined);
    await editJson(dir, 'tokenizer.json', (j) => {
      (j.model as { vocab: Record<string, number> }).vocab.zzzhuge = 2_000_000_000;
    });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json', field: 'model.vocab.zzzhuge' });
    expect(err.message).toContain('is 2000000000, far past the 513 tokens the file holds');
  });

  it('a graph that fixes its logits far past the tokenizer: refused, naming the output', async () => {
    const dir = await copyDefault('fixed-huge');
    await editGraph(dir, (g) => {
      const logits = g.output?.find((o) => o.name === 'logits');
      const dims = logits?.type?.tensorType?.shape?.dim ?? [];
      (dims[2] as { dimValue?: number }).dimValue = 2_000_000_000;
    });
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx', field: 'output "logits"' });
    expect(err.message).toContain('scores 2000000000 tokens, far above the 512 tokens of tokenizer.json');
  });
});

describe('a vocabulary somewhat larger than the tokenizer (padded)', () => {
  it('loads; JSON mode replies, with a token table of the tokenizer’s 512 ids, not 4096', async () => {
    const dir = await openVocab('vocab-4096', 4096);
    const info = await edits.host.loadModel(dir, { id: 'padded' });
    expect(info.spec.vocabSize).toBe(4096);
    const r = await edits.host.generate({
      model: 'padded',
      messages: [{ role: 'user', content: 'Reply in JSON.' }],
      maxNewTokens: 8,
      sampling: { temperature: 1, seed: 1 },
      responseFormat: 'json',
    }).result;
    expect(r.text.startsWith('{')).toBe(true);
    const tables = (await edits.host.engine.stats()).tokenTables.filter((t) => t.modelId === 'padded');
    expect(tables.map((t) => t.tokens)).toEqual([512]);
  });
});
