import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DATA_ID_FILE, dataFolderId } from '../../../src/main/store/data-id';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('dataFolderId', () => {
  it('is made once and kept in the data folder; another folder has another; a file that is no id is replaced', async () => {
    const a = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-id-'));
    const b = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-id-'));
    dirs.push(a, b);
    const lines: string[] = [];
    const id = await dataFolderId(a, (l) => lines.push(l));
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(readFileSync(path.join(a, DATA_ID_FILE), 'utf8').trim()).toBe(id);
    expect(await dataFolderId(a, (l) => lines.push(l))).toBe(id);
    expect(await dataFolderId(b, (l) => lines.push(l))).not.toBe(id);
    writeFileSync(path.join(b, DATA_ID_FILE), '{cut');
    const again = await dataFolderId(b, (l) => lines.push(l));
    expect(again).toMatch(/^[0-9a-f-]{36}$/);
    expect(readFileSync(path.join(b, DATA_ID_FILE), 'utf8').trim()).toBe(again);
    expect(lines).toEqual([]);
  });

  it('an empty kvdesk-id (a first start on a full disk, a power cut) is replaced, whole, and said nowhere', async () => {
    const a = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-id-'));
    dirs.push(a);
    const file = path.join(a, DATA_ID_FILE);
    writeFileSync(file, '');
    const lines: string[] = [];
    const id = await dataFolderId(a, (l) => lines.push(l));
    expect(lines).toEqual([]);
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(readFileSync(file, 'utf8')).toBe(`${id}\n`);
    // Kept from then on; no temp file left beside it.
    expect(await dataFolderId(a, (l) => lines.push(l))).toBe(id);
    expect(readdirSync(a)).toEqual([DATA_ID_FILE]);
  });

  it('one made by another kvdesk between the read and the write is kept, not replaced', async () => {
    const a = mkdtempSync(path.join(os.tmpdir(), 'kvdesk-id-'));
    dirs.push(a);
    const [x, y] = await Promise.all([dataFolderId(a, () => {}), dataFolderId(a, () => {})]);
    expect(x).toBe(y);
    expect(readFileSync(path.join(a, DATA_ID_FILE), 'utf8').trim()).toBe(x);
    expect(readdirSync(a)).toEqual([DATA_ID_FILE]);
  });
});
