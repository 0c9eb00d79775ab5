/**
 * A tokenizer that cannot write every token the model emits, or lacks the special tokens its chat template and
 * tokenizer_config name, used to pass in silence.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { HF_TOKENIZER_CONFIG, hfPackage, removeTempDirs, tokenizerJson } from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

const tokenizerConfig = (over: Record<string, unknown> = {}) => ({
  ...HF_TOKENIZER_CONFIG,
  eos_token: '</s>',
  ...over,
});

describe('a tokenizer smaller than the vocabulary the model scores', () => {
  it('warns naming tokenizer.json, both sizes and the ids it cannot write', async () => {
    const dir = await hfPackage({ 'tokenizer.json': tokenizerJson(32) }, { vocab: 64 });
    const spec = await loadModelSpec(dir);
    const w = spec.warnings.filter((x) => x.startsWith('tokenizer.json'));
    expect(w).toHaveLength(1);
    expect(w[0]).toContain('tokenizer.json knows 32 tokens but the model scores 64');
    expect(w[0]).toContain('32..63');
  });

  it('a vocabulary padded past the tokenizer (a multiple of 16, a few ids more) is not warned about', async () => {
    const dir = await hfPackage({ 'tokenizer.json': tokenizerJson(126) }, { vocab: 128 });
    const spec = await loadModelSpec(dir);
    expect(spec.vocabSize).toBe(128);
    expect(spec.warnings.filter((x) => x.includes('tokenizer.json knows'))).toEqual([]);
    // GPT-J's and OPT's padding (multiples of 16, not 64).
    const gptj = await hfPackage({ 'tokenizer.json': tokenizerJson(1004) }, { vocab: 1008 });
    expect((await loadModelSpec(gptj)).warnings.filter((x) => x.includes('tokenizer.json knows'))).toEqual([]);
  });

  it('a vocabulary cut short, its special tokens still at the end: warns naming the ids it has no token for', async () => {
    // A 64-token vocabulary of which ids 10..59 are gone; </s> moved to 63 keeps the highest id where it was.
    const json = JSON.parse(tokenizerJson(64, { '<pad>': 0, '<unk>': 1, '<s>': 2, '</s>': 63 }));
    for (const [piece, id] of Object.entries(json.model.vocab as Record<string, number>))
      if (id >= 10 && id < 60) delete json.model.vocab[piece];
    const dir = await hfPackage({ 'tokenizer.json': json }, { vocab: 64 });
    const w = (await loadModelSpec(dir)).warnings.filter((x) => x.startsWith('tokenizer.json'));
    expect(w).toEqual([
      'tokenizer.json has no token for 50 of the ids below its highest (ids 10..59): text that needs them is dropped from prompts, and a reply that samples one shows nothing for it. Check that tokenizer.json belongs to this model, whole.',
    ]);
    // A few gaps are let be.
    const few = JSON.parse(tokenizerJson(64));
    delete few.model.vocab.w20;
    const spec = await loadModelSpec(await hfPackage({ 'tokenizer.json': few }, { vocab: 64 }));
    expect(spec.warnings.filter((x) => x.startsWith('tokenizer.json'))).toEqual([]);
  });

  it('the same size, or larger, changes nothing here', async () => {
    const spec = await loadModelSpec(await hfPackage());
    expect(spec.warnings.filter((x) => x.includes('tokenizer.json knows'))).toEqual([]);
  });
});

describe('special tokens tokenizer.json lacks', () => {
  it("tokenizer_config.json's eos_token is refused even when config.json gives the eos ids", async () => {
    const dir = await hfPackage({ 'tokenizer_config.json': tokenizerConfig({ eos_token: '<|im_end|>' }) });
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer_config.json', field: 'eos_token' });
    expect(err.message).toContain('"<|im_end|>", which tokenizer.json does not contain');
  });

  it('tokens the chat template writes: one warning naming tokenizer.json and the tokens', async () => {
    const template =
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}";
    const dir = await hfPackage({ 'tokenizer_config.json': tokenizerConfig({ chat_template: template }) });
    const spec = await loadModelSpec(dir);
    const w = spec.warnings.filter((x) => x.includes('<|im_start|>'));
    expect(w).toHaveLength(1);
    expect(w[0]).toMatch(/^tokenizer\.json has no token for <\|im_start\|>, <\|im_end\|>/);
    expect(w[0]).toContain('chat template');
  });

  it('special tokens tokenizer_config.json declares (added_tokens_decoder, additional_special_tokens)', async () => {
    const dir = await hfPackage({
      'tokenizer_config.json': tokenizerConfig({
        added_tokens_decoder: { '60': { content: '<start_of_turn>', special: true } },
        additional_special_tokens: ['<end_of_turn>'],
      }),
    });
    const spec = await loadModelSpec(dir);
    const w = spec.warnings.filter((x) => x.includes('<start_of_turn>'));
    expect(w).toHaveLength(1);
    expect(w[0]).toContain('<end_of_turn>');
    expect(w[0]).toContain('tokenizer_config.json');
  });

  it('a package whose tokenizer has them all says nothing', async () => {
    const specials = { '<pad>': 0, '<unk>': 1, '<s>': 2, '</s>': 3, '<|im_start|>': 4, '<|im_end|>': 5 };
    const dir = await hfPackage({
      'tokenizer.json': tokenizerJson(64, specials),
      'tokenizer_config.json': tokenizerConfig({
        chat_template: "{{ '<|im_start|>' }}{{ messages }}{{ '<|im_end|>' }}",
        additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
      }),
    });
    const spec = await loadModelSpec(dir);
    expect(spec.warnings.filter((x) => x.includes('has no token'))).toEqual([]);
  });
});
