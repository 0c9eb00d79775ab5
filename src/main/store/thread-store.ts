/**
 * Persistence of chat threads and UI settings: one JSON file per thread under
 * `<dataDir>/threads/`, written atomically (temp file + rename) so a crash
 * never leaves half a thread. Files that fail validation are skipped, not fatal.
 */
import { readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { Thread, UiSettings } from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import { writeAtomic } from './write-atomic';

const SAFE_ID = /^[A-Za-z0-9_-]{1,100}$/;

/** Threads and settings on disk. */
export class ThreadStore {
  private readonly threadsDir: string;
  private readonly settingsFile: string;
  /** Files that could not be read, with why (shown in logs, never fatal). */
  readonly problems: string[] = [];
  /** Pending writes and deletes per file, run in call order: the last save wins, a delete stays deleted. */
  private readonly pending = new Map<string, Promise<void>>();

  private inOrder(file: string, op: () => Promise<void>): Promise<void> {
    const before = this.pending.get(file) ?? Promise.resolve();
    const next = before.catch(() => {}).then(op);
    this.pending.set(file, next);
    const forget = () => {
      if (this.pending.get(file) === next) this.pending.delete(file);
    };
    next.then(forget, forget);
    return next;
  }

  constructor(dataDir: string) {
    this.threadsDir = path.join(dataDir, 'threads');
    this.settingsFile = path.join(dataDir, 'settings.json');
  }

  private fileOf(id: string): string {
    if (!SAFE_ID.test(id)) {
      throw new KvdeskError('BAD_REQUEST', `thread id "${id}" may only use letters, digits, "-" and "_" (1–100 chars)`);
    }
    return path.join(this.threadsDir, `${id}.json`);
  }

  /** All readable threads, most recently updated first. */
  async list(): Promise<Thread[]> {
    let names: string[];
    try {
      names = await readdir(this.threadsDir);
    } catch {
      return [];
    }
    const threads: Thread[] = [];
    for (const name of names.filter((n) => n.endsWith('.json'))) {
      try {
        const parsed = Thread.safeParse(JSON.parse(await readFile(path.join(this.threadsDir, name), 'utf8')));
        if (parsed.success) threads.push(parsed.data);
        else this.problems.push(`${name}: ${parsed.error.issues[0]?.message ?? 'invalid thread'}`);
      } catch (err) {
        this.problems.push(`${name}: ${(err as Error).message}`);
      }
    }
    return threads.sort((a, b) => b.updatedAt - a.updatedAt);
  }

  async save(thread: Thread): Promise<void> {
    const file = this.fileOf(thread.id);
    const data = JSON.stringify(thread);
    await this.inOrder(file, () => writeAtomic(file, data));
  }

  async delete(id: string): Promise<void> {
    const file = this.fileOf(id);
    await this.inOrder(file, () => rm(file, { force: true }));
  }

  async getSettings(): Promise<UiSettings> {
    try {
      const parsed = UiSettings.safeParse(JSON.parse(await readFile(this.settingsFile, 'utf8')));
      return parsed.success ? parsed.data : {};
    } catch {
      return {};
    }
  }

  async saveSettings(settings: UiSettings): Promise<void> {
    const data = JSON.stringify(settings);
    await this.inOrder(this.settingsFile, () => writeAtomic(this.settingsFile, data));
  }
}
