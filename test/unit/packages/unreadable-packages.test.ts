/**
 * Packages that used to reach the person as INTERNAL with no file named: a YAML alias bomb, a NUL byte in an
 * external-data location, a package folder that cannot be listed. Each is PACKAGE_INVALID naming the file.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { parseYamlText } from '../../../src/main/packages/config-file';
import { detectLayout, loadModelSpec } from '../../../src/main/packages/index';
import { decoderGraph, hfPackage, onnxGenaiPackage, removeTempDirs, writeFiles } from './package-builder';
import { refusal } from './refusal';

afterAll(removeTempDirs);
afterEach(() => {
  vi.restoreAllMocks();
});

/** Nine lists of nine, nine levels deep: a few hundred bytes that expand to 9^9 strings. */
function aliasBomb(): string {
  const lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]'];
  for (let i = 1; i <= 9; i += 1)
    lines.push(
      `a${i}: &a${i} [${Array(9)
        .fill(`*a${i - 1}`)
        .join(',')}]`,
    );
  return `${lines.join('\n')}\n`;
}

describe('a YAML alias bomb', () => {
  it('parseYamlText refuses it naming the file, as a package error', () => {
    let error: unknown;
    try {
      parseYamlText(aliasBomb(), 'inference_metadata.yaml');
    } catch (err) {
      error = err;
    }
    expect(error).toMatchObject({ code: 'PACKAGE_INVALID', detail: { file: 'inference_metadata.yaml' } });
    expect((error as Error).message).toMatch(/^inference_metadata\.yaml /);
  });

  it('in inference_metadata.yaml: PACKAGE_INVALID naming the file', async () => {
    const dir = await onnxGenaiPackage();
    const yaml = await fs.readFile(`${dir}/inference_metadata.yaml`, 'utf8');
    await writeFiles(dir, { 'inference_metadata.yaml': `${yaml}${aliasBomb()}` });
    const err = await refusal(loadModelSpec(dir), { file: 'inference_metadata.yaml' });
    expect(err.message).toContain('aliases');
  });
});

describe('a NUL byte in a path a package file writes', () => {
  it('an external-data location: names the graph and the initializer', async () => {
    const graph = decoderGraph({
      initializers: [{ name: 'w', dims: [4], external: { location: 'model.onnx.data\u0000x', offset: 0, length: 16 } }],
    });
    const dir = await hfPackage({ 'onnx/model.onnx': graph, 'onnx/model.onnx.data': new Uint8Array(16) });
    const err = await refusal(loadModelSpec(dir), {
      file: 'onnx/model.onnx',
      field: 'initializer "w" external_data.location',
    });
    expect(err.message).toContain('NUL');
  });
});

describe('a package folder that cannot be listed', () => {
  const eacces = (p: unknown) =>
    Object.assign(new Error(`EACCES: permission denied, scandir '${String(p)}'`), {
      code: 'EACCES',
      syscall: 'scandir',
      path: String(p),
    });

  it('loadModelSpec: PACKAGE_INVALID naming the folder and what to do', async () => {
    const dir = await hfPackage();
    vi.spyOn(fs, 'readdir').mockImplementation(async (p) => {
      throw eacces(p);
    });
    const err = await refusal(loadModelSpec(dir), { file: '.' });
    expect(err.message).toContain(dir);
    expect(err.message).toContain('EACCES');
    expect(err.message).toMatch(/readable/);
  });

  it('detectLayout too', async () => {
    const dir = await hfPackage();
    vi.spyOn(fs, 'readdir').mockImplementation(async (p) => {
      throw eacces(p);
    });
    await refusal(detectLayout(dir), { file: '.' });
  });
});

describe('a folder the package does not need that cannot be listed', () => {
  /** readdir as the file system answers it, but EACCES for folders named `private`. */
  const denyPrivate = () => {
    const readdir = fs.readdir.bind(fs) as (...args: unknown[]) => Promise<unknown>;
    vi.spyOn(fs, 'readdir').mockImplementation((async (p: unknown, ...rest: unknown[]) => {
      if (path.basename(String(p)) === 'private') {
        throw Object.assign(new Error(`EACCES: permission denied, scandir '${String(p)}'`), {
          code: 'EACCES',
          syscall: 'scandir',
          path: String(p),
        });
      }
      return readdir(p, ...rest);
    }) as typeof fs.readdir);
  };

  it('is left out of the file list with a warning; the package loads', async () => {
    const dir = await hfPackage({ 'private/notes.txt': 'mine', 'docs/README.md': '# hi' });
    denyPrivate();
    const spec = await loadModelSpec(dir);
    expect(spec.files.map((f) => f.path)).toContain('docs/README.md');
    expect(spec.files.map((f) => f.path)).not.toContain('private/notes.txt');
    expect(spec.warnings).toContain(
      "Could not list private/ (EACCES): its files are left out of the package's file list. kvdesk needs none of them; make the folder readable, or move it out of the package, to lose this warning.",
    );
  });

  it('in an onnx-genai package too', async () => {
    const dir = await onnxGenaiPackage({}, { 'private/x.bin': 'x' });
    denyPrivate();
    expect((await loadModelSpec(dir)).warnings.some((w) => w.startsWith('Could not list private/'))).toBe(true);
  });

  // As root (the CI container) a mode-000 folder is readable all the same: the spy above stands in for it.
  it.skipIf(process.getuid?.() === 0)('a real mode-000 folder: the package loads', async () => {
    const dir = await hfPackage({ 'private/notes.txt': 'mine' });
    await fs.chmod(path.join(dir, 'private'), 0o000);
    try {
      const spec = await loadModelSpec(dir);
      expect(spec.warnings.some((w) => w.startsWith('Could not list private/ (EACCES)'))).toBe(true);
    } finally {
      await fs.chmod(path.join(dir, 'private'), 0o755);
    }
  });
});
