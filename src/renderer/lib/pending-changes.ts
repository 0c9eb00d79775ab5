/**
 * The chat saves, list changes (a rename or pin of a chat not opened) and deletes a page made while kvdesk could not
 * be reached (`serve`, the connection lost), kept in the browser's IndexedDB until kvdesk answered them: a reload, or
 * the tab closed meanwhile, does not lose them. The page that made one makes it again once the connection is back;
 * one whose page is gone is made by the next page of kvdesk's address to connect, as the page that made it
 * (bridge.ts). Pages tell each other they are alive over a BroadcastChannel, so that no page makes a change another
 * page still holds.
 */
import { z } from 'zod';
import { Thread, ThreadFields } from '../../shared/api';

/**
 * A change of a chat's list fields only (its name, its pin: updateThread), made from the chat's revision `revision`:
 * what the chat list changes of a chat the page has only the summary of.
 */
export const FieldsChange = ThreadFields.extend({ revision: z.number().int().min(0).optional() });
export type FieldsChange = z.infer<typeof FieldsChange>;

export interface PendingChange {
  threadId: string;
  /** The page whose change it is: kvdesk is told, so that a save of it kvdesk wrote before is taken as its own. */
  savedBy: string;
  /** The page that makes it (its own page while that is open; then the one that took it). */
  owner: string;
  /** When it was kept: a later change of the same page to the same chat replaces it. */
  at: number;
  /** The chat as saved; none (nor `fields`): the chat deleted. */
  thread?: Thread;
  /** Its list fields changed (a rename, a pin of a chat not opened), in place of the whole chat. */
  fields?: FieldsChange;
  /**
   * The id of the data folder of the kvdesk the page was talking to (its hello's): made only in a kvdesk of that
   * folder, never in another one started later on the same address. None: kept where none was said; made anywhere.
   */
  dataId?: string;
}

/** Whether a kept change may be made in the kvdesk whose data folder has id `hostDataId` (undefined: none said). */
export function forThisHost(change: PendingChange, hostDataId: string | undefined): boolean {
  return change.dataId === undefined || change.dataId === hostDataId;
}

/** Where the changes are kept (IndexedDB in the page; tests give their own). */
export interface PendingStore {
  /** Every change kept (of every page of this address). */
  readAll(): Promise<PendingChange[]>;
  /** Keeps a change (in place of the same page's change of the chat); rejects, saying why, when it cannot. */
  put(change: PendingChange): Promise<void>;
  /** Forgets a page's change of a chat, if it is still the one kept at `at`. */
  forget(savedBy: string, threadId: string, at: number): Promise<void>;
  /** Makes `owner` the change's owner if it is still as read (no other page took it meanwhile); whether it did. */
  claim(change: PendingChange, owner: string): Promise<boolean>;
}

const DB = 'kvdesk-pending';
const STORE = 'changes';
const keyOf = (savedBy: string, threadId: string) => `${savedBy}:${threadId}`;

/** A change as kept, or null when it is not one (another version's). */
function readChange(value: unknown): PendingChange | null {
  if (typeof value !== 'object' || value === null) return null;
  const v = value as Record<string, unknown>;
  if (typeof v.threadId !== 'string' || typeof v.savedBy !== 'string' || typeof v.owner !== 'string') return null;
  if (typeof v.at !== 'number') return null;
  if (v.dataId !== undefined && typeof v.dataId !== 'string') return null;
  const base: PendingChange = {
    threadId: v.threadId,
    savedBy: v.savedBy,
    owner: v.owner,
    at: v.at,
    ...(v.dataId !== undefined ? { dataId: v.dataId } : {}),
  };
  if (v.fields !== undefined) {
    const fields = FieldsChange.safeParse(v.fields);
    if (!fields.success || v.thread !== undefined) return null;
    return { ...base, fields: fields.data };
  }
  if (v.thread === undefined) return base;
  const thread = Thread.safeParse(v.thread);
  if (!thread.success || thread.data.id !== v.threadId) return null;
  return { ...base, thread: thread.data };
}

/** What an IndexedDB failure was (QuotaExceededError: …), for the person. */
export function whyNotKept(err: unknown): string {
  if (err && typeof err === 'object' && 'name' in err) {
    const { name, message } = err as { name: unknown; message?: unknown };
    if (name === 'QuotaExceededError') return "the browser's storage for this page is full";
    return typeof message === 'string' && message !== '' ? `${String(name)}: ${message}` : String(name);
  }
  return err instanceof Error ? err.message : String(err);
}

/** The part of IndexedDB used here (this file is also type-checked without the DOM library). */
interface Req<T> {
  result: T;
  error: unknown;
  onsuccess: (() => void) | null;
  onerror: (() => void) | null;
}
interface Tx {
  objectStore(name: string): {
    put(value: unknown, key: string): Req<unknown>;
    get(key: string): Req<unknown>;
    delete(key: string): Req<unknown>;
    getAll(): Req<unknown[]>;
  };
  oncomplete: (() => void) | null;
  onerror: (() => void) | null;
  onabort: (() => void) | null;
  error: unknown;
}
interface Db {
  createObjectStore(name: string): unknown;
  transaction(store: string, mode?: 'readonly' | 'readwrite'): Tx;
}
interface Factory {
  open(name: string, version: number): Req<Db> & { onupgradeneeded: (() => void) | null };
}

/** The page's kept changes in its IndexedDB; undefined where the page has none (or may not use it). */
export function indexedDbPending(): PendingStore | undefined {
  let factory: Factory | undefined;
  try {
    factory = (globalThis as { indexedDB?: Factory }).indexedDB;
  } catch {
    return undefined;
  }
  if (!factory) return undefined;
  const idb = factory;
  let opened: Promise<Db> | null = null;
  // Opened at the first use (a page that is never offline never opens it); opened again after a failure.
  const db = () => {
    opened ??= new Promise<Db>((resolve, reject) => {
      const req = idb.open(DB, 1);
      req.onupgradeneeded = () => req.result.createObjectStore(STORE);
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
    opened.catch(() => {
      opened = null;
    });
    return opened;
  };
  /** Runs `body` in a transaction; resolves once it is written (rejects with why not). */
  const run = async <T>(mode: 'readonly' | 'readwrite', body: (tx: Tx) => T): Promise<T> => {
    const tx = (await db()).transaction(STORE, mode);
    return new Promise<T>((resolve, reject) => {
      let out: T;
      tx.oncomplete = () => resolve(out);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error('the write was aborted'));
      try {
        out = body(tx);
      } catch (err) {
        reject(err);
      }
    });
  };
  return {
    async readAll() {
      const req = await run('readonly', (tx) => tx.objectStore(STORE).getAll());
      return (req.result ?? []).map(readChange).filter((c): c is PendingChange => c !== null);
    },
    async put(change) {
      await run('readwrite', (tx) => tx.objectStore(STORE).put(change, keyOf(change.savedBy, change.threadId)));
    },
    async forget(savedBy, threadId, at) {
      await run('readwrite', (tx) => {
        const store = tx.objectStore(STORE);
        const key = keyOf(savedBy, threadId);
        const got = store.get(key);
        got.onsuccess = () => {
          if (readChange(got.result)?.at === at) store.delete(key);
        };
      });
    },
    async claim(change, owner) {
      let took = false;
      await run('readwrite', (tx) => {
        const store = tx.objectStore(STORE);
        const key = keyOf(change.savedBy, change.threadId);
        const got = store.get(key);
        got.onsuccess = () => {
          const now = readChange(got.result);
          if (now?.at !== change.at || now.owner !== change.owner) return;
          store.put({ ...now, owner }, key);
          took = true;
        };
      });
      return took;
    },
  };
}

/** The part of BroadcastChannel used here. */
interface Channel {
  postMessage(message: unknown): void;
  addEventListener(type: 'message', listener: (e: { data: unknown }) => void): void;
  removeEventListener(type: 'message', listener: (e: { data: unknown }) => void): void;
}

/** How long a page waits for the pages it asks of to say they are alive. */
export const ALIVE_WAIT_MS = 300;

/**
 * This page among the others of its address: it answers when asked whether it is alive, and asks of others (those
 * that do not answer in ALIVE_WAIT_MS are gone: their kept changes are for another page to make). `pageId` may be a
 * function: the page answers to its id now (a page that took another id answers no more for the one before, whose
 * changes are then a gone page's).
 */
export function pagesOnline(pageId: string | (() => string)): { alive(ids: string[]): Promise<Set<string>> } {
  const Made = (globalThis as unknown as { BroadcastChannel?: new (name: string) => Channel }).BroadcastChannel;
  const channel = Made ? new Made('kvdesk.pages') : undefined;
  const self = typeof pageId === 'string' ? () => pageId : pageId;
  channel?.addEventListener('message', (e) => {
    const ask = (e.data as { ask?: unknown } | null)?.ask;
    const id = self();
    if (Array.isArray(ask) && ask.includes(id)) channel.postMessage({ alive: id });
  });
  return {
    async alive(ids) {
      const heard = new Set<string>();
      if (!channel || ids.length === 0) return heard;
      const listen = (e: { data: unknown }) => {
        const alive = (e.data as { alive?: unknown } | null)?.alive;
        if (typeof alive === 'string') heard.add(alive);
      };
      channel.addEventListener('message', listen);
      channel.postMessage({ ask: ids });
      await new Promise((r) => setTimeout(r, ALIVE_WAIT_MS));
      channel.removeEventListener('message', listen);
      return heard;
    },
  };
}
