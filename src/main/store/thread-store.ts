/**
 * Persistence of chat threads and UI settings: one JSON file per thread under
 * `<dataDir>/threads/`, written atomically (temp file + rename) so a crash
 * never leaves half a thread.
 *
 * Files kvdesk cannot use are never lost (data-file.ts): a thread file that does not parse or validate, or whose
 * id is not its file name (a copy, a sync tool's conflict file) or not a safe id, is left as it is, unlisted, and said in the log (nothing writes over it: a save of that chat is refused, naming the file); settings.json
 * that does not parse is moved aside, one with values of a newer kvdesk keeps its valid part (the file as it was
 * kept aside), and one that cannot be read is an error, with every save refused until it can be. Fields of a
 * newer kvdesk that this one does not know are written back with each save.
 *
 * A chat file is written with its messages last: the chat list reads each file's head (its fields before the
 * messages, and that the file ends where its messages do), not the tens of MB a chat's attached files can make.
 * A file written otherwise (by kvdesk before this order, or by hand) is read whole, once while it stays unchanged.
 */
import { open, readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import {
  type SaveSettingsRequest,
  StoredMessage,
  Thread,
  type ThreadFields,
  ThreadHead,
  type ThreadSummary,
  UI_SETTINGS_FIELDS,
  UiSettings,
} from '../../shared/api';
import { KvdeskError } from '../../shared/errors';
import { searchForm } from '../../shared/text';
import { fieldsUnknown, isPlainObject, readIfThere, setAside, unreadableFile } from './data-file';
import { withFileLock } from './file-lock';
import { issueText, salvageSettings } from './settings-salvage';
import { writeAtomic } from './write-atomic';

/** How many deleted chats' ids the data folder keeps, to refuse a late save of one from another window or tab. */
export const DELETED_THREADS_KEPT = 1000;
/** The file in the data folder that names the chats deleted (the latest DELETED_THREADS_KEPT). */
export const DELETED_FILE = 'deleted-threads.json';

const SAFE_ID = /^[A-Za-z0-9_-]{1,100}$/;
const SAFE_ID_TEXT = 'letters, digits, "-" and "_" only (1–100 chars)';

/** A thread's fields of a newer kvdesk: its own, and its messages' (by message id). */
interface ThreadExtras {
  top: Record<string, unknown>;
  messages: Map<string, Record<string, unknown>>;
}

/** What a chat's file holds, as last read or written, with the stat it had then. */
interface Held {
  file: string;
  revision: number;
  /** The page that saved it last. */
  by?: string;
  grants: string[];
}

/** The settings file as read: what this kvdesk uses, and the fields of a newer one, kept as they are. */
interface SettingsRead {
  settings: UiSettings;
  newer: Record<string, unknown>;
}

/** How a store reports, and the clock that names a file moved aside. */
export interface ThreadStoreOptions {
  /** Where problems with the files are said; by default stderr, as the host's own log. */
  log?: (line: string) => void;
  now?: () => number;
  /** Told the settings when a read finds them changed by another kvdesk on the same data folder. */
  onSettings?: (settings: UiSettings) => void;
}

/** Threads and settings on disk. */
export class ThreadStore {
  private readonly threadsDir: string;
  private readonly settingsFile: string;
  private readonly log: (line: string) => void;
  private readonly now: () => number;
  /** What the last list found wrong with thread files; what was done to the settings file since start. */
  private threadProblems: string[] = [];
  private settingsProblems: string[] = [];
  /** Lines said already: a file that stays unusable is said once, not at every page load. */
  private readonly said = new Set<string>();
  /** Files whose last write failed, with what the log said of it. */
  private readonly failing = new Map<string, string>();
  /** Fields of a newer kvdesk in the threads listed, by thread id: written back when this one saves them. */
  private readonly extras = new Map<string, ThreadExtras>();
  /** Pending writes and deletes per file, run in call order: the last save wins, a delete stays deleted. */
  private readonly pending = new Map<string, Promise<unknown>>();
  /**
   * What each chat's file held when last read or written, with that file's stat (read again only when the file
   * changed): its revision, the page that saved it last (its `savedBy`, kept in the file: a page's save the host wrote
   * just before it stopped, its answer lost, is that page's own once kvdesk is back) and its tool grants.
   */
  private readonly held = new Map<string, Held>();
  /** Each chat file's summary (the chat list's), with the file's stat: read again only when the file changed. */
  private readonly summaries = new Map<string, { file: string; summary: ThreadSummary }>();
  /** Each chat's searchable text (title, messages, attached files; lower case), with its file's stat. */
  private readonly haystacks = new Map<string, { file: string; text: string }>();
  /**
   * The chats deleted (id → when), as `deleted-threads.json` in the data folder keeps them, the latest
   * DELETED_THREADS_KEPT: a late save of one (a page that had not heard of the delete, also across a restart) is
   * refused. Read at the first save or delete, and again whenever the file changed (another kvdesk on the same data
   * folder deleted a chat): `stat` is the file's when read.
   */
  private deleted: { stat: string | null; chats: Map<string, number> } | null = null;
  private readonly deletedFile: string;
  /** Deletes noted here and not yet written to the file (they count as deleted already). */
  private readonly deletesToWrite = new Map<string, number>();
  /** Deletes noted, and how many of them the file has. */
  private deletedNoted = 0;
  private deletedWritten = 0;
  /** The settings as this store last read or wrote them (what its pages hold); null before the first. */
  private settingsKnown: UiSettings | null = null;
  private readonly onSettings: ((settings: UiSettings) => void) | undefined;

  constructor(dataDir: string, opts: ThreadStoreOptions = {}) {
    this.threadsDir = path.join(dataDir, 'threads');
    this.settingsFile = path.join(dataDir, 'settings.json');
    this.deletedFile = path.join(dataDir, DELETED_FILE);
    this.log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.now = opts.now ?? Date.now;
    this.onSettings = opts.onSettings;
  }

  /**
   * The data files kvdesk could not use, each naming the file, what was done and what to do: the thread files the
   * last list left out, then what happened to settings.json since start (for a front end to show).
   */
  get problems(): readonly string[] {
    return [...this.threadProblems, ...this.settingsProblems];
  }

  private inOrder<T>(file: string, op: () => Promise<T>): Promise<T> {
    const before = this.pending.get(file) ?? Promise.resolve();
    const next = before.catch(() => {}).then(op);
    this.pending.set(file, next);
    const forget = () => {
      if (this.pending.get(file) === next) this.pending.delete(file);
    };
    next.then(forget, forget);
    return next;
  }

  /**
   * Writes a data file; one that cannot be written (a folder kvdesk may not write in, a full disk) is an error that
   * names the file and what to do, said in the log too: once while each file keeps failing the same way (a reply's
   * text is saved each second), again once it was written and fails anew.
   */
  private async write(file: string, data: string, what: string): Promise<void> {
    try {
      await writeAtomic(file, data);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const why = e.code ?? e.message;
      const fix =
        e.code === 'ENOSPC' || e.code === 'EDQUOT'
          ? 'free some space on its disk'
          : e.code === 'EISDIR' || e.code === 'ENOTEMPTY' || e.code === 'ENOTDIR' || e.code === 'EEXIST'
            ? 'move away what is in its place (a folder where the file belongs, or a file where a folder does)'
            : `give your user write access to ${path.dirname(file)}`;
      const message = `could not write ${what} to ${file} (${why}): ${fix}`;
      if (this.failing.get(file) !== message) {
        this.failing.set(file, message);
        this.log(`kvdesk: ${message}`);
      }
      throw new KvdeskError('INTERNAL', message, { file });
    }
    this.failing.delete(file);
  }

  private sayOnce(line: string): void {
    if (this.said.has(line)) return;
    this.said.add(line);
    this.log(`kvdesk: ${line}`);
  }

  private fileOf(id: string): string {
    if (!SAFE_ID.test(id)) {
      throw new KvdeskError('BAD_REQUEST', `thread id "${id}" may only use letters, digits, "-" and "_" (1–100 chars)`);
    }
    return path.join(this.threadsDir, `${id}.json`);
  }

  /**
   * Every readable chat's summary (its fields, not its messages), most recently updated first; the files left out
   * are in `problems` and the log. Each file's head is read (see the top of this file), once while it is unchanged.
   */
  async list(): Promise<ThreadSummary[]> {
    const summaries: ThreadSummary[] = [];
    const problems: string[] = [];
    const names = await this.threadFileNames();
    for (const name of names) {
      const read = await this.readSummary(path.join(this.threadsDir, name));
      if ('summary' in read) summaries.push(read.summary);
      else problems.push(read.problem);
    }
    const ids = new Set(names.map((n) => path.basename(n, '.json')));
    for (const id of this.summaries.keys()) if (!ids.has(id)) this.summaries.delete(id);
    this.threadProblems = problems;
    for (const p of problems) this.sayOnce(p);
    return summaries.sort((a, b) => b.updatedAt - a.updatedAt);
  }

  /** The size of chat `id`'s file as this store last wrote or read it (0: not known). */
  bytesOf(id: string): number {
    return this.summaries.get(id)?.summary.bytes ?? 0;
  }

  /**
   * Chat `id` whole, as its file holds it (its fields of a newer kvdesk noted, for its saves). A chat with no file
   * (deleted meanwhile), or whose file cannot be used, is an error that says so.
   */
  async get(id: string): Promise<Thread> {
    const file = this.fileOf(id);
    return this.inOrder(file, async () => {
      const now = await statOf(file);
      if (now === null) {
        throw new KvdeskError('BAD_REQUEST', `there is no chat "${id}" (deleted in another window or tab?)`, {
          field: 'id',
          reason: 'gone',
        });
      }
      const read = await this.readThread(file);
      if (!('thread' in read)) throw this.unopenable(file, read.problem);
      const { thread, savedBy } = read;
      this.held.set(id, {
        file: now,
        revision: thread.revision ?? 0,
        ...(savedBy ? { by: savedBy } : {}),
        grants: thread.toolsAllowed ?? [],
      });
      this.summaries.set(id, { file: now, summary: summaryOf(thread, Number(now.split(':')[1])) });
      return thread;
    });
  }

  /**
   * The chats whose title, messages or attached files contain every word of `query` (compared in search's form:
   * lower case, composed), as their files hold them; each file's text is read once while it is unchanged.
   */
  async search(query: string): Promise<string[]> {
    const words = searchForm(query).split(/\s+/).filter(Boolean);
    const found: string[] = [];
    for (const name of await this.threadFileNames()) {
      const id = path.basename(name, '.json');
      const file = path.join(this.threadsDir, name);
      const now = await statOf(file);
      if (now === null || !SAFE_ID.test(id)) continue;
      let text = this.haystacks.get(id)?.file === now ? this.haystacks.get(id)?.text : undefined;
      if (text === undefined) {
        const read = await this.readThread(file);
        if (!('thread' in read)) continue;
        const t = read.thread;
        text = searchForm(
          [
            t.title,
            ...t.messages.flatMap((m) => [m.content, ...(m.attachments ?? []).flatMap((a) => [a.name, a.text])]),
          ].join('\n'),
        );
        this.haystacks.delete(id);
        this.haystacks.set(id, { file: now, text });
        this.trimHaystacks();
      }
      const haystack = text;
      if (words.every((w) => haystack.includes(w))) found.push(id);
    }
    return found;
  }

  /** The search's texts kept: at most HAYSTACK_CHARS in all, the least recently read go first. */
  private trimHaystacks(): void {
    let total = 0;
    for (const h of this.haystacks.values()) total += h.text.length;
    for (const [id, h] of this.haystacks) {
      if (total <= HAYSTACK_CHARS || this.haystacks.size <= 1) break;
      total -= h.text.length;
      this.haystacks.delete(id);
    }
  }

  /**
   * One chat file's summary: from its head when its messages are its last field (as this kvdesk writes it), else
   * from the file read whole; or what is wrong with it (a file whose messages are not valid is listed from its head,
   * and opening it says what is wrong).
   */
  private async readSummary(file: string): Promise<{ summary: ThreadSummary } | { problem: string }> {
    const id = path.basename(file, '.json');
    const now = await statOf(file);
    const known = this.summaries.get(id);
    if (now !== null && known?.file === now) return { summary: known.summary };
    const leftAlone = `it is not listed, and left as it is: mend it, or move it out of ${this.threadsDir}`;
    let read: { head: unknown; bytes: number } | null;
    try {
      read = await readHead(file);
    } catch (err) {
      const why = (err as Error).message;
      return {
        problem: `the chat file ${file} could not be read (${why}); it is not listed: give your user access to it`,
      };
    }
    let summary: ThreadSummary;
    if (read === null) {
      // Not written with its messages last: read whole.
      const whole = await this.readThread(file);
      if (!('thread' in whole)) return whole;
      summary = summaryOf(whole.thread, now === null ? 0 : Number(now.split(':')[1]));
    } else {
      const parsed = ThreadHead.safeParse(read.head);
      if (!parsed.success) {
        const why = issueText(parsed.error, []);
        return { problem: `the chat file ${file} is not valid (${why}; a newer kvdesk's?); ${leftAlone}` };
      }
      const problem = this.idProblem(file, parsed.data.id, leftAlone);
      if (problem) return { problem };
      summary = { ...parsed.data, bytes: read.bytes };
    }
    if (now !== null) this.summaries.set(id, { file: now, summary });
    return { summary };
  }

  /**
   * A listed chat whose file cannot be used whole (its head reads): said once in the log as the error says it, and
   * returned to be thrown.
   */
  private unopenable(file: string, problem: string): KvdeskError {
    const said = problem.replace('it is not listed, and left', 'it is left');
    this.sayOnce(said);
    return new KvdeskError('INTERNAL', said, { file });
  }

  /** What is wrong with a chat file's id (not its name, or not a safe id), if anything. */
  private idProblem(file: string, id: string, leftAlone: string): string | null {
    const name = path.basename(file, '.json');
    if (id !== name) {
      // A copy beside the chat's own file (abc-backup.json, a sync tool's conflict file): listed, it would be a
      // second chat of the same id, and deleting that chat would remove only the other file.
      return `the chat file ${file} holds the chat "${id}", not "${name}" as its name says (a copy, or a sync tool's conflict file?); ${leftAlone}`;
    }
    if (!SAFE_ID.test(id)) {
      // Such a chat could be listed but never saved nor deleted (fileOf refuses its id).
      return `the chat file ${file} has the id "${id}", which is not ${SAFE_ID_TEXT}; ${leftAlone}`;
    }
    return null;
  }

  /** The thread files; none before the first save. A folder that cannot be read is an error, not "no chats". */
  private async threadFileNames(): Promise<string[]> {
    try {
      return (await readdir(this.threadsDir)).filter((n) => n.endsWith('.json'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      const error = unreadableFile('the chats folder', this.threadsDir, err, 'reload the page');
      this.sayOnce(error.message);
      throw error;
    }
  }

  /** One thread file: its thread (with its fields of a newer kvdesk noted, for its saves), or what is wrong. */
  private async readThread(file: string): Promise<{ thread: Thread; savedBy?: string } | { problem: string }> {
    const leftAlone = `it is not listed, and left as it is: mend it, or move it out of ${this.threadsDir}`;
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      const why = (err as Error).message;
      return {
        problem: `the chat file ${file} could not be read (${why}); it is not listed: give your user access to it`,
      };
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (err) {
      return { problem: `the chat file ${file} is not valid JSON (${(err as Error).message}); ${leftAlone}` };
    }
    const parsed = Thread.safeParse(raw);
    if (!parsed.success) {
      const why = issueText(parsed.error, []);
      return { problem: `the chat file ${file} is not valid (${why}; a newer kvdesk's?); ${leftAlone}` };
    }
    const id = parsed.data.id;
    const problem = this.idProblem(file, id, leftAlone);
    if (problem) return { problem };
    this.noteExtras(id, raw);
    const savedBy = isPlainObject(raw) && typeof raw.savedBy === 'string' ? raw.savedBy : undefined;
    return { thread: parsed.data, ...(savedBy !== undefined ? { savedBy } : {}) };
  }

  private noteExtras(id: string, raw: unknown): void {
    // The last saver is the store's (each save writes its own), not a newer kvdesk's field to write back.
    const { savedBy: _savedBy, ...top } = fieldsUnknown(raw, Thread.shape);
    const messages = new Map<string, Record<string, unknown>>();
    const rawMessages: unknown[] = isPlainObject(raw) && Array.isArray(raw.messages) ? raw.messages : [];
    for (const m of rawMessages) {
      const extra = fieldsUnknown(m, StoredMessage.shape);
      if (Object.keys(extra).length > 0 && isPlainObject(m) && typeof m.id === 'string') messages.set(m.id, extra);
    }
    if (Object.keys(top).length === 0 && messages.size === 0) this.extras.delete(id);
    else this.extras.set(id, { top, messages });
  }

  /** The thread as written: with the fields of a newer kvdesk it had when listed (the page never sees them). */
  private withExtras(thread: Thread): Record<string, unknown> {
    const extra = this.extras.get(thread.id);
    if (!extra) return thread;
    const messages = thread.messages.map((m) => ({ ...extra.messages.get(m.id), ...m }));
    return { ...extra.top, ...thread, messages };
  }

  /** The tools chat `id` runs without asking, as its file says now: none when there is no such chat to read. */
  async toolGrants(id: string): Promise<string[]> {
    if (!SAFE_ID.test(id)) return [];
    const file = path.join(this.threadsDir, `${id}.json`);
    // A page without a token asks before each save (about once a second while a reply streams): a long chat's file
    // is read and checked again only when another process (or a hand) changed it.
    return this.inOrder(file, async () => {
      const held = await this.heldBy(id, file);
      return held && 'grants' in held ? held.grants : [];
    });
  }

  /**
   * Writes the chat as revision (its file's revision, or the one it was made from, whichever is later) + 1, and
   * returns that revision. Refused with SAVE_CONFLICT, nothing written, when the file has moved on from the revision
   * the chat was made from (`thread.revision`, absent: 0) through another saver's save: that saver's turns would be
   * lost. The same saver's own saves may overtake each other (a page sends the next before the last is answered, or
   * kvdesk wrote its last and stopped before answering): the file names its last saver (`savedBy`, never listed).
   */
  async save(thread: Thread, savedBy?: string): Promise<number> {
    const file = this.fileOf(thread.id);
    return this.inOrder(file, () => this.writeThread(file, thread, savedBy));
  }

  /**
   * save's work, in the file's turn, holding the chat's lock (`threads/<id>.json.lock`, file-lock.ts) from reading its
   * revision to writing it: another kvdesk on the same data folder (a window and `kvdesk serve`) saving the same chat
   * from the same revision at once is refused, as a page of this one's would be. Without it each read revision 1, both
   * were written, and the turns of the one written first were lost.
   */
  private writeThread(file: string, thread: Thread, savedBy?: string): Promise<number> {
    const lockFile = `${file}.lock`;
    return withFileLock(lockFile, () => this.writeThreadLocked(file, thread, savedBy), {
      what: `the chat "${thread.title}"`,
    }).catch((err: unknown) => {
      // The lock could not be made (a folder kvdesk may not write in): said in the log, as a write that failed is.
      if (err instanceof KvdeskError && err.detail?.file === lockFile) this.sayOnce(err.message);
      throw err;
    });
  }

  private async writeThreadLocked(file: string, thread: Thread, savedBy?: string): Promise<number> {
    const base = thread.revision ?? 0;
    const held = await this.heldBy(thread.id, file);
    if (held && 'problem' in held) {
      // A file it cannot use (cut short, a newer kvdesk's): it may hold turns this copy lacks, so it is left as it is.
      const said = held.problem.replace(/it is not listed, and left as it is|it is not listed/, 'it is left as it is');
      this.sayOnce(said);
      throw new KvdeskError('INTERNAL', `the chat "${thread.title}" was not saved over its file: ${said}`, { file });
    }
    const stored = held;
    // Deleted, and not put back since (by a hand): a page that had not heard of the delete must not bring it back.
    if ((await this.deletedChats()).has(thread.id) && (await statOf(file)) === null) {
      throw new KvdeskError('BAD_REQUEST', `the chat "${thread.title}" was deleted in another window or tab`, {
        field: 'id',
        reason: 'deleted',
      });
    }
    if (stored && stored.revision !== base && !(stored.revision > base && savedBy && stored.by === savedBy)) {
      throw new KvdeskError(
        'SAVE_CONFLICT',
        `the chat "${thread.title}" was saved in another window or tab since this copy of it (revision ${stored.revision}, this copy's ${base}): not saved over it; reload the page to see the one saved`,
        { id: thread.id, revision: stored.revision, base },
      );
    }
    const revision = Math.max(stored?.revision ?? 0, base) + 1;
    // Its messages last: the chat list reads the fields before them (readHead).
    const { messages, ...fields } = this.withExtras({ ...thread, revision });
    const data = JSON.stringify({ ...fields, ...(savedBy ? { savedBy } : {}), messages });
    this.held.delete(thread.id);
    this.summaries.delete(thread.id);
    await this.write(file, data, `the chat "${thread.title}"`);
    const now = await statOf(file);
    if (now !== null) {
      this.held.set(thread.id, {
        file: now,
        revision,
        ...(savedBy ? { by: savedBy } : {}),
        grants: thread.toolsAllowed ?? [],
      });
      this.summaries.set(thread.id, {
        file: now,
        summary: summaryOf({ ...thread, revision }, Number(now.split(':')[1])),
      });
    }
    return revision;
  }

  /**
   * Changes only chat `id`'s list fields (its name, its pin) and returns its new revision: what the chat list does to
   * a chat it has not opened, without sending it whole (its messages can be tens of MB). The rules are a save's: made
   * from revision `base` (refused with SAVE_CONFLICT when another saver's save came since), refused as 'deleted' for
   * a deleted chat, 'gone' for one with no file.
   */
  async update(
    id: string,
    fields: ThreadFields,
    base: number,
    savedBy?: string,
  ): Promise<{ revision: number; thread: Thread }> {
    const file = this.fileOf(id);
    return this.inOrder(file, async () => {
      if ((await statOf(file)) === null) {
        const deleted = (await this.deletedChats()).has(id);
        throw new KvdeskError(
          'BAD_REQUEST',
          deleted
            ? `the chat "${fields.title ?? id}" was deleted in another window or tab`
            : `there is no chat "${id}"`,
          { field: 'id', reason: deleted ? 'deleted' : 'gone' },
        );
      }
      const read = await this.readThread(file);
      if (!('thread' in read)) throw this.unopenable(file, read.problem);
      const { pinned, ...rest } = fields;
      const { pinned: _was, ...thread } = read.thread;
      const changed: Thread = {
        ...thread,
        ...rest,
        ...((pinned ?? read.thread.pinned) ? { pinned: true } : {}),
        revision: base,
      };
      const revision = await this.writeThread(file, changed, savedBy);
      return { revision, thread: { ...changed, revision } };
    });
  }

  /**
   * What chat `id`'s file holds (its revision: 0 for a file from before revisions); null when there is no file (or a
   * folder in its place: the write says so); what is wrong with a file this kvdesk cannot use (cut short, a newer
   * kvdesk's, one it may not read).
   */
  private async heldBy(id: string, file: string): Promise<Held | { problem: string } | null> {
    const now = await statOf(file);
    if (now === null) return null;
    const known = this.held.get(id);
    if (known?.file === now) return known;
    const read = await this.readThread(file);
    if (!('thread' in read)) return (await stat(file).catch(() => null))?.isDirectory() ? null : read;
    const found: Held = {
      file: now,
      revision: read.thread.revision ?? 0,
      ...(read.savedBy !== undefined ? { by: read.savedBy } : {}),
      grants: read.thread.toolsAllowed ?? [],
    };
    this.held.set(id, found);
    return found;
  }

  /**
   * Deletes chat `id`'s file. It is noted as deleted first (in deleted-threads.json: a save of it from a page that
   * had not heard of it is refused, also after a restart); one that cannot be noted is not deleted (the error names
   * the file). An id that is no chat's file name is refused and not noted.
   */
  async delete(id: string): Promise<void> {
    const file = this.fileOf(id);
    // Holding the chat's lock, as a save does: another kvdesk's save of it either comes before (and is deleted) or
    // after (and is refused as deleted), never between the check and the write.
    await this.inOrder(file, async () => {
      // Noted in call order (the latest deletes are the ones kept), written once the lock is held.
      const noted = this.noteDelete(id);
      try {
        await withFileLock(
          `${file}.lock`,
          async () => {
            await this.writeDeleted(noted.version);
            await rm(file, { force: true });
          },
          { what: `the chat "${id}"` },
        );
      } catch (err) {
        if (this.deletesToWrite.get(id) === noted.at) this.deletesToWrite.delete(id);
        throw err;
      }
      // Gone: forgotten here too (a delete refused leaves the chat as this store knew it: listed, its size known).
      this.extras.delete(id);
      this.held.delete(id);
      this.summaries.delete(id);
      this.haystacks.delete(id);
    });
  }

  /** The chats deleted: deleted-threads.json's (read again when it changed) and those being written to it. */
  private deletedChats(): Promise<Map<string, number>> {
    return this.inOrder(this.deletedFile, async () => {
      const chats = new Map(await this.deletedOnDisk());
      for (const [id, at] of this.deletesToWrite) chats.set(id, at);
      return chats;
    });
  }

  /** deleted-threads.json's chats, read again only when the file changed since (run in the file's turn). */
  private async deletedOnDisk(): Promise<Map<string, number>> {
    const stat = await statOf(this.deletedFile);
    if (this.deleted === null || this.deleted.stat !== stat) {
      this.deleted = { stat, chats: await this.readDeleted() };
    }
    return this.deleted.chats;
  }

  private async readDeleted(): Promise<Map<string, number>> {
    const file = this.deletedFile;
    let text: string | null;
    try {
      text = await readIfThere(file);
    } catch (err) {
      // Unreadable (access): chats are still deleted; a late save of one may bring it back until it can be read.
      this.sayOnce(unreadableFile('the list of deleted chats', file, err, 'restart kvdesk').message);
      return new Map();
    }
    if (text === null) return new Map();
    const entries = readDeletedEntries(text);
    if (entries === null) {
      const aside = await setAside(file, this.now(), 'move').catch((err: KvdeskError) => err.message);
      this.sayOnce(
        `the list of deleted chats ${file} is not valid (it should be {"deleted": [{"id", "at"}]}); it was moved to ${aside}, and a new one is started`,
      );
      return new Map();
    }
    return new Map(entries);
  }

  /**
   * Notes chat `id` as deleted now (the latest DELETED_THREADS_KEPT are kept): it counts as deleted at once, and
   * writeDeleted writes it before the delete is answered. The file is read again just before it is written, holding its lock (`deleted-threads.json.lock`, file-lock.ts), so
   * that the deletes another kvdesk on the same data folder writes there meanwhile stay: without it, two kvdesks
   * deleting at once each wrote what it had read, and one's delete was lost.
   */
  private noteDelete(id: string): { at: number; version: number } {
    const at = this.now();
    this.deletesToWrite.delete(id);
    this.deletesToWrite.set(id, at);
    return { at, version: ++this.deletedNoted };
  }

  /** Writes the deletes noted, up to `version` at least (the caller forgets its note when this fails). */
  private async writeDeleted(version: number): Promise<void> {
    await this.inOrder(this.deletedFile, async () => {
      // Written already with this one in it (deletes in a row: one write for those that waited).
      if (this.deletedWritten >= version) return;
      const upTo = this.deletedNoted;
      const writing = [...this.deletesToWrite];
      await withFileLock(
        `${this.deletedFile}.lock`,
        async () => {
          // Read as it is now, under the lock (not as held: another kvdesk may have written it a moment ago).
          this.deleted = null;
          const chats = new Map(await this.deletedOnDisk());
          for (const [key, when] of writing) {
            chats.delete(key);
            chats.set(key, when);
          }
          while (chats.size > DELETED_THREADS_KEPT) chats.delete(chats.keys().next().value as string);
          const entries = [...chats].map(([key, when]) => ({ id: key, at: when }));
          await this.write(this.deletedFile, JSON.stringify({ deleted: entries }), 'the list of deleted chats');
        },
        { what: 'the list of deleted chats' },
      );
      // Read again at the next check (its stat is the one written, unless another kvdesk wrote it since).
      this.deleted = null;
      for (const [key, when] of writing) if (this.deletesToWrite.get(key) === when) this.deletesToWrite.delete(key);
      this.deletedWritten = upTo;
    });
  }

  /**
   * The settings; none when there is no file yet. Throws (naming the file) when it exists but cannot be read. Ones
   * another kvdesk on the same data folder saved since this one last read or wrote them are told to `onSettings`
   * (for the pages that hold the older ones).
   */
  async getSettings(): Promise<UiSettings> {
    return this.inOrder(this.settingsFile, async () => {
      const { settings } = await this.readSettings();
      const before = this.settingsKnown;
      this.settingsKnown = settings;
      if (before !== null && JSON.stringify(before) !== JSON.stringify(settings)) this.onSettings?.(settings);
      return settings;
    });
  }

  /**
   * Saves the settings a page sends (all of them) and returns them as written. Only the fields the page changed are
   * written over the file as it is now: those it names in `changed`, or (a page that names none, of an earlier
   * version) those that differ from what this kvdesk last read or wrote, which its pages hold. Another page of this
   * kvdesk, or another kvdesk on the same data folder (the window and `kvdesk serve`), may have saved since, a preset
   * say, and a theme changed here must not erase it. Read first, holding `settings.json.lock` (file-lock.ts) to the
   * write: a file that cannot be read is refused (never written over, whoever saves), one that does not parse is moved
   * aside, and fields of a newer kvdesk stay.
   */
  async saveSettings({ changed, ...settings }: SaveSettingsRequest): Promise<UiSettings> {
    return this.inOrder(this.settingsFile, () =>
      withFileLock(
        `${this.settingsFile}.lock`,
        async () => {
          const now = await this.readSettings();
          const base = this.settingsKnown ?? now.settings;
          const merged: Record<string, unknown> = { ...now.settings };
          for (const key of UI_SETTINGS_FIELDS) {
            // Not changed by the page: as the file has it (another page's change of it stays).
            if (changed ? !changed.includes(key) : JSON.stringify(settings[key]) === JSON.stringify(base[key]))
              continue;
            if (settings[key] === undefined) delete merged[key];
            else merged[key] = settings[key];
          }
          await this.write(this.settingsFile, JSON.stringify({ ...now.newer, ...merged }), 'the settings');
          this.settingsKnown = merged as UiSettings;
          return merged as UiSettings;
        },
        { what: 'the settings' },
      ).catch((err: unknown) => {
        // The lock could not be made (a folder kvdesk may not write in): said in the log, as a write that failed is.
        if (err instanceof KvdeskError && err.detail?.file === `${this.settingsFile}.lock`) this.sayOnce(err.message);
        throw err;
      }),
    );
  }

  private async readSettings(): Promise<SettingsRead> {
    const file = this.settingsFile;
    let text: string | null;
    try {
      text = await readIfThere(file);
    } catch (err) {
      throw this.settingsProblem(unreadableFile('the settings file', file, err, 'reload the page'));
    }
    if (text === null) return { settings: {}, newer: {} };
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (err) {
      return this.setSettingsAside(`is not valid JSON (${(err as Error).message})`);
    }
    const newer = fieldsUnknown(raw, UiSettings.shape);
    const parsed = UiSettings.safeParse(raw);
    if (parsed.success) return { settings: parsed.data, newer };
    return this.salvageSettingsFile(raw, newer);
  }

  /** Nothing of the file is usable: moved aside (the page then saves its settings in a new one). */
  private async setSettingsAside(why: string): Promise<SettingsRead> {
    const file = this.settingsFile;
    const aside = await setAside(file, this.now(), 'move').catch((err) => {
      throw this.settingsProblem(err as KvdeskError);
    });
    this.settingsNotice(
      `the settings file ${file} ${why}; it was moved to ${aside}, and the settings start afresh. To have them back, mend that file and put it in place of settings.json while kvdesk is closed`,
    );
    return { settings: {}, newer: {} };
  }

  /**
   * Values this kvdesk cannot use (a newer one's): the rest is kept and written back at once, so that the page's
   * saves start from it; the file as it was is copied aside first.
   */
  private async salvageSettingsFile(raw: unknown, newer: Record<string, unknown>): Promise<SettingsRead> {
    const file = this.settingsFile;
    const { settings, dropped } = salvageSettings(raw);
    const aside = await setAside(file, this.now(), 'copy').catch((err) => {
      throw this.settingsProblem(err as KvdeskError);
    });
    await writeAtomic(file, JSON.stringify({ ...newer, ...settings }));
    this.settingsNotice(
      `the settings file ${file} has values this kvdesk cannot use (a newer kvdesk's?), left out: ${dropped.join('; ')}. The rest is kept; the file as it was is in ${aside}`,
    );
    return { settings, newer };
  }

  private settingsNotice(text: string): void {
    this.settingsProblems.push(text);
    this.log(`kvdesk: ${text}`);
  }

  /** An error about settings.json: said once in the log, and returned to be thrown to the caller. */
  private settingsProblem(error: KvdeskError): KvdeskError {
    this.sayOnce(error.message);
    return error;
  }
}

/** Most characters of chats' text the search keeps between searches (the least recently read go first). */
const HAYSTACK_CHARS = 128 * 1024 * 1024;

/** A chat's summary: its fields without its messages, and its file's size. */
export function summaryOf(thread: Thread, bytes: number): ThreadSummary {
  return { ...ThreadHead.parse(thread), bytes };
}

/** The most of a chat file's head (its fields before its messages) read before it is read whole instead. */
const HEAD_MAX_BYTES = 4 * 1024 * 1024;
const HEAD_CHUNK_BYTES = 64 * 1024;

/** How much of a chat file's end is read for the fields after its messages (an older kvdesk's revision and saver). */
const TAIL_BYTES = 4096;

/**
 * The fields of a chat file without its `messages` (parsed), and the file's size: those before the messages from
 * its head, those after them (kvdesk before messages were written last put its revision and saver there) from its
 * end. Null when the file is not read so (read it whole, which says what is wrong with it, if anything).
 */
export async function readHead(file: string): Promise<{ head: unknown; bytes: number } | null> {
  const fd = await open(file, 'r');
  try {
    const { size } = await fd.stat();
    const tailBytes = Math.min(size, TAIL_BYTES);
    const tail = Buffer.alloc(tailBytes);
    await fd.read(tail, 0, tailBytes, size - tailBytes);
    const after = fieldsAfterMessages(tail.toString('utf8'));
    if (after === null) return null;
    const decoder = new StringDecoder('utf8');
    let text = '';
    const chunk = Buffer.alloc(HEAD_CHUNK_BYTES);
    for (let at = 0; at < Math.min(size, HEAD_MAX_BYTES); ) {
      const { bytesRead } = await fd.read(chunk, 0, chunk.length, at);
      if (bytesRead === 0) break;
      at += bytesRead;
      text += decoder.write(chunk.subarray(0, bytesRead));
      const end = messagesKeyAt(text);
      if (end === 'no') return null;
      if (end !== 'more') {
        const fields = text.slice(0, end).replace(/,\s*$/, '');
        try {
          const head: unknown = JSON.parse(`${fields}}`);
          return isPlainObject(head) ? { head: { ...head, ...after }, bytes: size } : null;
        } catch {
          return null;
        }
      }
    }
    return null;
  } finally {
    await fd.close();
  }
}

/**
 * The fields after a chat file's messages, from the file's end: what follows the array's `]` up to the object's
 * `}` (none, or `,"pinned":true,"revision":3,"toolsAllowed":["files/read_file"],"savedBy":"page-…"`); null when
 * the end is not one of a chat file. The messages' `]` is the earliest whose rest reads as fields: a later one may
 * close a list field after them (`toolsAllowed`, `stop`), whose rest reads as fields too, fewer.
 */
function fieldsAfterMessages(tail: string): Record<string, unknown> | null {
  if (!tail.trimEnd().endsWith('}')) return null;
  let found: Record<string, unknown> | null = null;
  let tries = 0;
  for (let i = tail.lastIndexOf(']'); i >= 0 && tries < 64; i = tail.lastIndexOf(']', i - 1), tries++) {
    const members = tail
      .slice(i + 1)
      .trim()
      .slice(0, -1)
      .trim();
    if (members === '') {
      found = {};
      continue;
    }
    if (!members.startsWith(',')) continue;
    try {
      const parsed: unknown = JSON.parse(`{${members.slice(1)}}`);
      if (isPlainObject(parsed) && !('messages' in parsed)) found = parsed;
    } catch {
      // A `]` inside a field's text, or inside the messages: not the messages' end.
    }
  }
  return found;
}

/**
 * Where the top-level `"messages"` key starts in the beginning of a JSON object's text: its offset, `more` when
 * the text ends before it, `no` when the text is not an object's beginning.
 */
function messagesKeyAt(text: string): number | 'more' | 'no' {
  let depth = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text[i];
    if (c === '"') {
      // A string: at depth 1 after `{` or `,`, a key.
      const start = i;
      i++;
      while (i < n && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      if (i >= n) return 'more';
      i++;
      if (depth === 1) {
        let j = start - 1;
        while (j >= 0 && /\s/.test(text[j] as string)) j--;
        const before = text[j];
        if ((before === '{' || before === ',') && text.slice(start, i) === '"messages"') return start;
      }
      continue;
    }
    if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      depth--;
      if (depth <= 0) return 'no';
    } else if (depth === 0 && !/\s/.test(c as string)) return 'no';
    i++;
  }
  return 'more';
}

/** A file's stat as a string that changes whenever the file does (null: none there). */
async function statOf(file: string): Promise<string | null> {
  const s = await stat(file).catch(() => null);
  return s ? `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}` : null;
}

/** deleted-threads.json's entries (id, when deleted), oldest first; null when it is not such a file. */
function readDeletedEntries(text: string): Array<[string, number]> | null {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return null;
  }
  if (!isPlainObject(raw) || !Array.isArray(raw.deleted)) return null;
  const out: Array<[string, number]> = [];
  for (const e of raw.deleted) {
    if (!isPlainObject(e) || typeof e.id !== 'string' || typeof e.at !== 'number') return null;
    out.push([e.id, e.at]);
  }
  return out.slice(-DELETED_THREADS_KEPT);
}
