/**
 * settings.json that kvdesk cannot use (ThreadStore.getSettings / saveSettings): never written over. One that is
 * not JSON is moved aside; one with values of a newer kvdesk keeps its valid parts (the file as it was kept
 * aside); one that cannot be read at all is an error naming it, and saves are refused until it can be.
 */
import { chmodSync, lstatSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ThreadStore } from '../../../src/main/store/thread-store';
import { tempStore } from './temp-store';

function store() {
  const made = tempStore('kvdesk-settings-', () => 4242);
  return { ...made, file: path.join(made.dir, 'settings.json') };
}

const saved = {
  theme: 'dark',
  presets: [
    { name: 'Brief', systemPrompt: 'Be brief.' },
    { name: 'Pirate', systemPrompt: 'Talk like a pirate.' },
  ],
};

async function rejectionOf(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

describe('settings.json that cannot be parsed', () => {
  it('is moved aside (never written over), said in the log, and the settings start empty', async () => {
    const { s, dir, file, log } = store();
    const text = JSON.stringify(saved).slice(0, 40);
    writeFileSync(file, text);
    expect(await s.getSettings()).toEqual({});
    const aside = path.join(dir, 'settings.json.unreadable-4242');
    expect(readFileSync(aside, 'utf8')).toBe(text);
    expect(log.join('\n')).toContain(file);
    expect(log.join('\n')).toContain(aside);
    // The page's save lands in a fresh file; the person's stays aside.
    await s.saveSettings({ lastThreadId: 't2' });
    expect(readFileSync(aside, 'utf8')).toBe(text);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ lastThreadId: 't2' });
  });

  it('a save without a read first still moves it aside', async () => {
    const { s, dir, file } = store();
    writeFileSync(file, '{"theme":"da');
    await s.saveSettings({ inspectorOpen: true });
    expect(readFileSync(path.join(dir, 'settings.json.unreadable-4242'), 'utf8')).toBe('{"theme":"da');
  });
});

describe('settings.json with values of a newer kvdesk', () => {
  it('keeps the valid parts, leaves out only the invalid entry, and keeps the file as it was aside', async () => {
    const { s, dir, file, log } = store();
    const newer = { ...saved, presets: [saved.presets[0], { ...saved.presets[1], reasoningEffort: 'max' }] };
    const text = JSON.stringify(newer);
    writeFileSync(file, text);
    expect(await s.getSettings()).toEqual({ theme: 'dark', presets: [saved.presets[0]] });
    expect(readFileSync(path.join(dir, 'settings.json.unreadable-4242'), 'utf8')).toBe(text);
    expect(log.join('\n')).toMatch(/presets\.1\.reasoningEffort/);
    expect(log.join('\n')).toContain('Pirate');
    // Read again: the file now holds what was kept, and nothing more is set aside.
    expect(await s.getSettings()).toEqual({ theme: 'dark', presets: [saved.presets[0]] });
    expect(readdirSync(dir).filter((n) => n.includes('unreadable'))).toHaveLength(1);
  });

  it('a field of a newer kvdesk is kept through the saves of this one', async () => {
    const { s, file } = store();
    writeFileSync(file, JSON.stringify({ ...saved, fontSize: 15 }));
    expect(await s.getSettings()).toEqual(saved);
    await s.saveSettings({ theme: 'light' });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ fontSize: 15, theme: 'light' });
  });
});

describe('two kvdesks on one data folder', () => {
  it("a setting changed through one keeps what the other saved since (a preset): only the page's changes are written", async () => {
    const { s: a, dir, file } = store();
    const b = new ThreadStore(dir, { log: () => {} });
    const heard: unknown[] = [];
    const a2 = new ThreadStore(dir, { log: () => {}, onSettings: (x) => heard.push(x) });
    const brief = { name: 'Brief', systemPrompt: 'Be brief.' };
    const pirate = { name: 'Pirate', systemPrompt: 'Talk like a pirate.' };
    await a.getSettings();
    await a.saveSettings({ theme: 'dark', presets: [brief] });
    expect(await a2.getSettings()).toEqual({ theme: 'dark', presets: [brief] });
    // B's page adds a preset; A's pages never heard of it and change the theme from what they hold.
    const fromB = await b.getSettings();
    await b.saveSettings({ ...fromB, presets: [brief, pirate] });
    const written = await a.saveSettings({ theme: 'light', presets: [brief] });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ theme: 'light', presets: [brief, pirate] });
    expect(written).toEqual({ theme: 'light', presets: [brief, pirate] }); // told to A's pages
    // A page of A's removing a preset (now that it holds both) removes it; the last one, sent as no presets, too.
    expect(await a.saveSettings({ theme: 'light', presets: [pirate] })).toEqual({ theme: 'light', presets: [pirate] });
    expect(await a.saveSettings({ theme: 'light' })).toEqual({ theme: 'light' });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ theme: 'light' });
    // A reader that held older settings hears of the ones found changed (its pages are told).
    expect(await a2.getSettings()).toEqual({ theme: 'light' });
    expect(heard).toEqual([{ theme: 'light' }]);
  });

  it('two pages of one kvdesk saving different fields at once keep both: each save writes the fields it names changed', async () => {
    const { s, file } = store();
    await s.saveSettings({ theme: 'dark', inspectorOpen: true, lastThreadId: 't1' });
    // Both pages hold these; one hides its inspector, the other opens another chat, at the same moment.
    const held = await s.getSettings();
    await Promise.all([
      s.saveSettings({ ...held, inspectorOpen: false, changed: ['inspectorOpen'] }),
      s.saveSettings({ ...held, lastThreadId: 't2', changed: ['lastThreadId'] }),
    ]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ theme: 'dark', inspectorOpen: false, lastThreadId: 't2' });
    // A field named changed and absent is removed (the theme back to the OS's); one not named stays as it is.
    expect(await s.saveSettings({ inspectorOpen: true, changed: ['theme'] })).toEqual({
      inspectorOpen: false,
      lastThreadId: 't2',
    });
  });
});

describe('settings.json that cannot be read', () => {
  // A link to itself cannot be opened (ELOOP) whoever runs the test; the same path as EACCES for a non-root user.
  it('is an error naming the file and what to do, and a save never writes over it', async () => {
    const { s, file } = store();
    symlinkSync('settings.json', file);
    const err = await rejectionOf(s.getSettings());
    expect(err.message).toContain(file);
    expect(err.message).toMatch(/access/);
    // Also from a store that never read it (another window's save).
    const other = new ThreadStore(path.dirname(file), { log: () => {} });
    const saveErr = await rejectionOf(other.saveSettings({ theme: 'light' }));
    expect(saveErr.message).toContain(file);
    expect(lstatSync(file).isSymbolicLink()).toBe(true);
    expect(readdirSync(path.dirname(file))).toEqual(['settings.json']);
  });

  it.skipIf(process.getuid?.() === 0)(
    'in a folder kvdesk may not write in: an error naming it, and the log says so',
    async () => {
      const { s, file, dir, log } = store();
      writeFileSync(file, JSON.stringify(saved));
      chmodSync(dir, 0o500);
      try {
        // Its lock (held from the read to the write) is the first file it cannot make there.
        await expect(s.saveSettings({ theme: 'light' })).rejects.toThrow(
          `could not make the lock file ${file}.lock for the settings (EACCES): give your user write access to ${dir}`,
        );
        expect(log.join('\n')).toContain(`could not make the lock file ${file}.lock`);
      } finally {
        chmodSync(dir, 0o700);
      }
      expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(saved);
    },
  );

  it.skipIf(process.getuid?.() === 0)('without read permission (EACCES): not written over', async () => {
    const { s, file } = store();
    writeFileSync(file, JSON.stringify(saved));
    chmodSync(file, 0o200);
    await expect(s.getSettings()).rejects.toThrow(file);
    await expect(s.saveSettings({ theme: 'light' })).rejects.toThrow(file);
    chmodSync(file, 0o600);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(saved);
  });
});
