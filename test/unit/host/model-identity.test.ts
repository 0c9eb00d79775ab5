/**
 * modelIdentity (the library's "which model this folder holds", for a kept pick): the same files give the same
 * identity without being read again; a file rewritten (even to the same size) or added is read, and another model
 * gives another identity; a folder without any of the files has none.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { modelIdentity } from '../../../src/main/host/model-library';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('modelIdentity', () => {
  it('reads the files once while their stat holds, again when one changes', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-identity-'));
    dirs.push(dir);
    await writeFile(path.join(dir, 'config.json'), '{"model_type":"llama"}');
    await writeFile(path.join(dir, 'tokenizer.json'), '{"model":{}}');
    const reads: string[] = [];
    const counted = (file: string) => {
      reads.push(path.basename(file));
      return readFile(file);
    };
    const first = await modelIdentity(dir, counted);
    expect(first).toMatch(/^[0-9a-f]{32}$/);
    expect(reads.sort()).toEqual(['config.json', 'tokenizer.json']);
    reads.length = 0;
    expect(await modelIdentity(dir, counted)).toBe(first);
    expect(reads).toEqual([]);
    // Rewritten in place to the same size: read again, and another model.
    await writeFile(path.join(dir, 'config.json'), '{"model_type":"gpt2!"}');
    const second = await modelIdentity(dir, counted);
    expect(reads).toContain('config.json');
    expect(second).not.toBe(first);
    // A file that says which model it is, added.
    reads.length = 0;
    await writeFile(path.join(dir, 'genai_config.json'), '{}');
    const third = await modelIdentity(dir, counted);
    expect(reads).toContain('genai_config.json');
    expect(third).not.toBe(second);
    // Back to the first files: the first identity.
    await rm(path.join(dir, 'genai_config.json'));
    await writeFile(path.join(dir, 'config.json'), '{"model_type":"llama"}');
    expect(await modelIdentity(dir, counted)).toBe(first);
  });

  it('a folder with none of the files (or none at all) has no identity', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvdesk-identity-'));
    dirs.push(dir);
    expect(await modelIdentity(dir)).toBeUndefined();
    expect(await modelIdentity(path.join(dir, 'gone'))).toBeUndefined();
  });
});
