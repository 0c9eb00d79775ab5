/** writeAtomic (src/main/store/write-atomic.ts): a write that fails leaves no temp file behind. */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { writeAtomic } from '../../../src/main/store/write-atomic';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('writeAtomic', () => {
  it('a failed rename removes its temp file and rejects', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    // A folder that is not empty where the file goes: the rename fails (EISDIR / ENOTEMPTY), the write did not.
    const target = path.join(dir, 'settings.json');
    mkdirSync(target);
    writeFileSync(path.join(target, 'keep'), 'x');
    await expect(writeAtomic(target, '{}')).rejects.toThrow();
    expect(readdirSync(dir)).toEqual(['settings.json']);
  });

  it('writes the file', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-atomic-'));
    dirs.push(dir);
    await writeAtomic(path.join(dir, 'a.json'), '{"a":1}');
    expect(readdirSync(dir)).toEqual(['a.json']);
  });
});
