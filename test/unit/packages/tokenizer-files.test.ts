/**
 * tokenizer.json and tokenizer_config.json are checked while the package is read in the forms the tokenizer the host
 * then loads takes them: what the validation accepts loads, and what the tokenizer would refuse is refused up front,
 * naming the file relative to the package and the field (it used to load, then fail with the library's words and an
 * absolute path, or crash with "Cannot read properties of null").
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { TOKENIZER_COMPONENT_TYPES, TOKENIZER_MODEL_TYPES } from '../../../src/main/packages/tokenizer-check';
import { loadTokenizer } from '../../../src/main/tokenizer/text-tokenizer';
import { HF_TOKENIZER_CONFIG, hfPackage, removeTempDirs, tokenizerJson } from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);

const base = (): Record<string, unknown> => JSON.parse(tokenizerJson(64)) as Record<string, unknown>;
const baseModel = () => base().model as Record<string, unknown>;

/** A small BPE tokenizer.json (the form most LLMs ship), with `edit` applied. */
function bpe(edit: (model: Record<string, unknown>) => void = () => {}): Record<string, unknown> {
  const json = base();
  const model: Record<string, unknown> = {
    type: 'BPE',
    vocab: (json.model as { vocab: Record<string, number> }).vocab,
    merges: ['w 1', 'w 2'],
    unk_token: '<unk>',
  };
  edit(model);
  return { ...json, model };
}

/** The tokenizer the host loads for a package (what runs after validation). */
async function hostTokenizer(dir: string) {
  return loadTokenizer(
    { tokenizerJson: path.join(dir, 'tokenizer.json'), tokenizerConfig: path.join(dir, 'tokenizer_config.json') },
    { vocabSize: 64 },
  );
}

const cases: Array<{ name: string; files: Record<string, unknown>; field: string; says: RegExp; file?: string }> = [
  { name: 'model null', files: { 'tokenizer.json': { ...base(), model: null } }, field: 'model', says: /null/ },
  { name: 'model a list', files: { 'tokenizer.json': { ...base(), model: [] } }, field: 'model', says: /a list/ },
  {
    name: 'model.vocab null',
    files: { 'tokenizer.json': { ...base(), model: { ...baseModel(), vocab: null } } },
    field: 'model.vocab',
    says: /is null/,
  },
  {
    name: 'model.vocab a string',
    files: { 'tokenizer.json': { ...base(), model: { ...baseModel(), vocab: 'x' } } },
    field: 'model.vocab',
    says: /is "x"/,
  },
  {
    name: 'BPE merges that are not merges',
    files: { 'tokenizer.json': bpe((m) => Object.assign(m, { merges: [1, 2, 3] })) },
    field: 'model.merges[0]',
    says: /not a merge/,
  },
  {
    name: 'BPE without merges',
    files: { 'tokenizer.json': bpe((m) => Object.assign(m, { merges: undefined })) },
    field: 'model.merges',
    says: /not a list of merges/,
  },
  {
    name: 'an unknown pre-tokenizer',
    files: { 'tokenizer.json': { ...base(), pre_tokenizer: { type: 'Nope' } } },
    field: 'pre_tokenizer.type',
    says: /"Nope", which kvdesk's tokenizer cannot build/,
  },
  {
    name: 'an unknown decoder inside a Sequence',
    files: {
      'tokenizer.json': {
        ...base(),
        decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Nope' }] },
      },
    },
    field: 'decoder.decoders[1].type',
    says: /"Nope"/,
  },
  {
    name: 'an added token with a string id and a number content',
    files: { 'tokenizer.json': { ...base(), added_tokens: [{ id: 'x', content: 5 }] } },
    field: 'added_tokens[0].id',
    says: /is "x", not a token id/,
  },
  {
    name: 'added_tokens that is not a list',
    files: { 'tokenizer.json': { ...base(), added_tokens: {} } },
    field: 'added_tokens',
    says: /not a list/,
  },
  {
    name: 'an added_tokens_decoder entry without content',
    files: {
      'tokenizer_config.json': { ...HF_TOKENIZER_CONFIG, added_tokens_decoder: { '5': { special: true } } },
    },
    file: 'tokenizer_config.json',
    field: 'added_tokens_decoder["5"]',
    says: /has no `content`/,
  },
  {
    name: 'a number among additional_special_tokens',
    files: { 'tokenizer_config.json': { ...HF_TOKENIZER_CONFIG, additional_special_tokens: [5] } },
    file: 'tokenizer_config.json',
    field: 'additional_special_tokens[0]',
    says: /is 5, neither a token's text/,
  },
];

describe('tokenizer files the tokenizer cannot load are refused while the package is read', () => {
  for (const c of cases) {
    it(`${c.name}: refused naming ${c.file ?? 'tokenizer.json'} \`${c.field}\` (and the tokenizer refuses it too)`, async () => {
      const dir = await hfPackage(c.files as Parameters<typeof hfPackage>[0]);
      const err = await refusal(loadModelSpec(dir), { file: c.file ?? 'tokenizer.json', field: c.field });
      expect(err.message).toMatch(c.says);
      expect(err.message.startsWith(`${c.file ?? 'tokenizer.json'}`)).toBe(true);
      expect(err.message).not.toContain(dir);
      // Not stricter than the tokenizer: it refuses the same file.
      await expect(hostTokenizer(dir)).rejects.toThrow();
    });
  }

  it('a valid BPE tokenizer.json (string merges, and pair merges) loads, and the tokenizer takes it', async () => {
    for (const merges of [
      ['w 1', 'w 2'],
      [
        ['w', '1'],
        ['w', '2'],
      ],
    ]) {
      const dir = await hfPackage({ 'tokenizer.json': bpe((m) => Object.assign(m, { merges })) });
      await loadModelSpec(dir);
      await hostTokenizer(dir);
    }
  });
});

describe('a post-processor that names special tokens it cannot write', () => {
  const processor = (single: unknown[], special_tokens: Record<string, unknown>) => ({
    'tokenizer.json': {
      ...base(),
      post_processor: {
        type: 'Sequence',
        processors: [{ type: 'TemplateProcessing', single, pair: [], special_tokens }],
      },
    },
  });
  it('a special token without an entry, or an id without a token: refused naming the field (the prompt was blamed)', async () => {
    const nope = await hfPackage(
      processor([{ SpecialToken: { id: '<nope>', type_id: 0 } }], {}) as Parameters<typeof hfPackage>[0],
    );
    const err = await refusal(loadModelSpec(nope), {
      file: 'tokenizer.json',
      field: 'post_processor.processors[0].single[0].SpecialToken.id',
    });
    expect(err.message).toContain('is "<nope>", which post_processor.processors[0].special_tokens does not define');
    const far = await hfPackage(
      processor([{ SpecialToken: { id: '<s>', type_id: 0 } }], {
        '<s>': { id: '<s>', ids: [99], tokens: ['<s>'] },
      }) as Parameters<typeof hfPackage>[0],
    );
    const err2 = await refusal(loadModelSpec(far), {
      file: 'tokenizer.json',
      field: 'post_processor.processors[0].special_tokens["<s>"].ids[0]',
    });
    expect(err2.message).toContain('is 99, an id tokenizer.json gives no token');
    // Right, it loads.
    const ok = await hfPackage(
      processor([{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], {
        '<s>': { id: '<s>', ids: [2], tokens: ['<s>'] },
      }) as Parameters<typeof hfPackage>[0],
    );
    await expect(loadModelSpec(ok)).resolves.toBeDefined();
  });
});

describe('a tokenizer pattern that can backtrack for hours', () => {
  it('a split that repeats a repeating group: refused naming the field (the tokenizer would take it, and hang)', async () => {
    const split = { type: 'Split', pattern: { Regex: '(a+)+b' }, behavior: 'Isolated', invert: false };
    const files = { 'tokenizer.json': { ...base(), pre_tokenizer: { type: 'Sequence', pretokenizers: [split] } } };
    const dir = await hfPackage(files as Parameters<typeof hfPackage>[0]);
    const field = 'pre_tokenizer.pretokenizers[0].pattern.Regex';
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json', field });
    expect(err.message).toBe(
      `tokenizer.json: \`${field}\` repeats something that has a repeat inside it ("(a+)+b"): such a pattern may take hours on some text, holding kvdesk (a regular expression cannot be stopped once it runs). Replace it with the tokenizer.json saved with this model (by transformers' save_pretrained).`,
    );
    // The tokenizer library itself takes it.
    await expect(hostTokenizer(dir)).resolves.toBeDefined();
    // A normalizer's Replace is checked too.
    const replace = { type: 'Replace', pattern: { Regex: '(?:\\s*x)*y' }, content: ' ' };
    const dir2 = await hfPackage({ 'tokenizer.json': { ...base(), normalizer: replace } } as Parameters<
      typeof hfPackage
    >[0]);
    await refusal(loadModelSpec(dir2), { file: 'tokenizer.json', field: 'normalizer.pattern.Regex' });
  });

  it('a split that repeats a choice of alternatives that begin alike ((a|a)*b): refused naming the field', async () => {
    const split = { type: 'Split', pattern: { Regex: 'x|(a|aa)+$' }, behavior: 'Isolated', invert: false };
    const files = { 'tokenizer.json': { ...base(), pre_tokenizer: { type: 'Sequence', pretokenizers: [split] } } };
    const dir = await hfPackage(files as Parameters<typeof hfPackage>[0]);
    const field = 'pre_tokenizer.pretokenizers[0].pattern.Regex';
    const err = await refusal(loadModelSpec(dir), { file: 'tokenizer.json', field });
    expect(err.message).toBe(
      `tokenizer.json: \`${field}\` repeats a choice whose alternatives can begin with the same character, or repeats in a row what can match the same characters ("(a|aa)+$"): a run of such characters splits among them in very many ways, and such a pattern may take hours on some text, holding kvdesk (a regular expression cannot be stopped once it runs). Replace it with the tokenizer.json saved with this model (by transformers' save_pretrained).`,
    );
    // The tokenizer library itself takes it.
    await expect(hostTokenizer(dir)).resolves.toBeDefined();
    // Alternatives that begin differently, repeated, load.
    const fine = { ...split, pattern: { Regex: '(?:\\r\\n|\\n)+|\\s+' } };
    const ok = await hfPackage({
      'tokenizer.json': { ...base(), pre_tokenizer: { type: 'Sequence', pretokenizers: [fine] } },
    } as Parameters<typeof hfPackage>[0]);
    await expect(loadModelSpec(ok)).resolves.toBeDefined();
  });
});

describe('a tokenizer pattern the guard must read as the library runs it, or that nests deep', () => {
  const field = 'pre_tokenizer.pretokenizers[0].pattern.Regex';
  const withSplit = (regex: string) => {
    const split = { type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false };
    return hfPackage({
      'tokenizer.json': { ...base(), pre_tokenizer: { type: 'Sequence', pretokenizers: [split] } },
    } as Parameters<typeof hfPackage>[0]);
  };

  it('an atomic group, `.` beside `\\r`, a script beside a case, neighbours that split a run: refused naming the field', async () => {
    for (const regex of [
      '(?>a|a)*b',
      '(?:.|\\r)+!',
      '(?:\\p{sc=Greek}|\\p{Ll})+!',
      '(?:a?a?)+b',
      '\\s*\\s*\\s*\\s*!',
    ]) {
      const err = await refusal(loadModelSpec(await withSplit(regex)), { file: 'tokenizer.json', field });
      expect(err.message, regex).toContain('may take hours on some text');
    }
  });

  it('groups nested thousands deep: refused naming the field and the depth (before: a stack overflow, no file named)', async () => {
    const deep = `${'(?:'.repeat(3000)}a${')'.repeat(3000)}`;
    const err = await refusal(loadModelSpec(await withSplit(deep)), { file: 'tokenizer.json', field });
    expect(err.message).toBe(
      `tokenizer.json: \`${field}\` nests groups 3000 deep (from "(?:a))))))))))))))))))))))))))))))))))))"); kvdesk reads tokenizer patterns nested at most 100 deep. Replace it with the tokenizer.json saved with this model (by transformers' save_pretrained).`,
    );
  });
});

describe('a UTF-8 BOM', () => {
  it('before tokenizer.json and tokenizer_config.json: the package loads and so does its tokenizer', async () => {
    const dir = await hfPackage({
      'tokenizer.json': `\ufeff${tokenizerJson(64)}`,
      'tokenizer_config.json': `\ufeff${JSON.stringify(HF_TOKENIZER_CONFIG)}`,
    });
    const spec = await loadModelSpec(dir);
    const tok = await loadTokenizer(spec.tokenizer, { vocabSize: spec.vocabSize });
    expect(tok.encode('w5 w6', { addSpecialTokens: false })).toEqual([5, 6]);
    expect(tok.specialTokens.eos?.token).toBe('</s>');
  });
});

describe("the component types the validation accepts are the tokenizer library's", () => {
  const minimal = { model: { type: 'WordLevel', vocab: { a: 0 }, unk_token: 'a' } };
  const kinds = {
    normalizer: 'Normalizer',
    pre_tokenizer: 'PreTokenizer',
    post_processor: 'PostProcessor',
    decoder: 'Decoder',
  } as const;
  for (const [field, kind] of Object.entries(kinds) as Array<[keyof typeof kinds, string]>) {
    it(`every ${field} type is one the library builds, and it refuses another`, () => {
      const build = (type: string) => {
        const json = {
          ...minimal,
          added_tokens: [],
          normalizer: null,
          pre_tokenizer: null,
          post_processor: null,
          decoder: null,
          [field]: { type, pattern: { String: 'x' }, content: 'x' },
        };
        try {
          new Tokenizer(json, {});
        } catch (err) {
          return String(err);
        }
        return 'built';
      };
      for (const type of TOKENIZER_COMPONENT_TYPES[field]) {
        expect(build(type), type).not.toContain(`Unknown ${kind} type`);
      }
      expect(build('Nope')).toContain(`Unknown ${kind} type`);
    });
  }

  it('every model type is one the library builds', async () => {
    expect([...TOKENIZER_MODEL_TYPES].sort()).toEqual(['BPE', 'Unigram', 'WordLevel', 'WordPiece']);
    const dir = await hfPackage({
      'tokenizer.json': {
        ...base(),
        model: {
          type: 'Unigram',
          vocab: [
            ['<pad>', 0],
            ['a', -1],
          ],
          unk_id: 0,
        },
      },
      'tokenizer_config.json': { ...HF_TOKENIZER_CONFIG, eos_token: '<pad>', bos_token: null },
    });
    await loadModelSpec(dir);
    await hostTokenizer(dir);
    await fs.rm(dir, { recursive: true, force: true });
  });
});
