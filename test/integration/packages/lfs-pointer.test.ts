/**
 * A package cloned without Git LFS holds pointers (three lines of text) in place of its large files. They used to be
 * refused as what they stand for, each with advice that did not help: the graph was "not a valid ONNX model: byte 0
 * uses protobuf wire type 6", tokenizer.json "not valid JSON", the external data "truncated", each to be
 * re-downloaded (and cloning again gave the same pointers). Each is refused now as a Git LFS pointer, saying how to
 * get the file itself.
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadModelSpec } from '../../../src/main/packages/index';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editsHost, externalWeights } from './edited-default';

const edits = editsHost();

/** What git writes in place of `abs` when the repository is cloned without Git LFS. */
async function lfsPointer(abs: string): Promise<string> {
  const bytes = await fs.readFile(abs);
  const oid = createHash('sha256').update(bytes).digest('hex');
  return `version https://git-lfs.github.com/spec/v1\noid sha256:${oid}\nsize ${bytes.length}\n`;
}

/** Replaces the file `rel` of the package `dir` with its Git LFS pointer. */
async function pointerFor(dir: string, rel: string): Promise<void> {
  const abs = path.join(dir, rel);
  await fs.writeFile(abs, await lfsPointer(abs));
}

const advice = (file: string) =>
  `${file} is a Git LFS pointer, not the file itself: run \`git lfs install && git lfs pull\` in the package's folder, or download it with \`kvdesk pull owner/name\` or \`hf download owner/name --local-dir <folder>\` (Hugging Face's CLI, formerly huggingface-cli).`;

describe('a file of the package that is a Git LFS pointer', () => {
  it.each(['onnx/model.onnx', 'tokenizer.json', 'config.json', 'tokenizer_config.json', 'generation_config.json'])(
    '%s: refused as a pointer, saying how to get the file',
    async (file) => {
      const dir = await copyDefault(`lfs-${file.replace(/\W/g, '-')}`);
      await pointerFor(dir, file);
      const err = await refusal(loadModelSpec(dir), { file });
      expect(err.message).toBe(advice(file));
      expect(err.message).not.toMatch(/wire type|not valid JSON|re-download/);
    },
  );

  it("the graph's external data: refused as a pointer, not as truncated", async () => {
    const dir = await copyDefault('lfs-external-data');
    await externalWeights(dir);
    await pointerFor(dir, 'onnx/model.onnx.data');
    const err = await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx.data' });
    expect(err.message).toBe(advice('onnx/model.onnx.data'));
    await refusal(edits.host.loadModel(dir, { id: 'lfs-external-data' }), { file: 'onnx/model.onnx.data' });
  });

  it('once pulled (the pointer replaced by the file), the package loads', async () => {
    const dir = await copyDefault('lfs-pulled');
    await externalWeights(dir);
    const data = path.join(dir, 'onnx/model.onnx.data');
    const real = await fs.readFile(data);
    await pointerFor(dir, 'onnx/model.onnx.data');
    await refusal(loadModelSpec(dir), { file: 'onnx/model.onnx.data' });
    await fs.writeFile(data, real);
    expect((await loadModelSpec(dir)).files.map((f) => f.path)).toContain('onnx/model.onnx.data');
  });

  it('a small file that only mentions Git LFS later is read as itself', async () => {
    const dir = await copyDefault('lfs-mention');
    const config = path.join(dir, 'generation_config.json');
    const json = JSON.parse(await fs.readFile(config, 'utf8')) as Record<string, unknown>;
    await fs.writeFile(config, JSON.stringify({ ...json, note: 'version https://git-lfs.github.com/spec/v1' }));
    await loadModelSpec(dir);
  });
});
