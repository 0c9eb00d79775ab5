/**
 * What the person is writing, per chat: the message box keeps each chat's own draft when another chat is opened,
 * so a draft never follows to a chat it was not meant for (where Enter would send it). The text is kept in the
 * page's storage (it survives a reload; the server is not told); attached files, which can be megabytes, in the
 * page's IndexedDB (read back after a reload, a moment after the texts).
 */
import { Attachment } from '../../shared/api';

export interface Draft {
  text: string;
  files: Attachment[];
}

/** The part of the Web Storage API drafts use (localStorage in the page, a Map in tests). */
export interface DraftStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/** Where drafts' files are kept across reloads (IndexedDB in the page; tests give their own). */
export interface DraftFileStore {
  /** Every chat's files as last kept. */
  readAll(): Promise<Array<[string, Attachment[]]>>;
  /** Keeps a chat's files (none: forgets them). Never fails: a draft is a convenience. */
  write(threadId: string, files: Attachment[]): void;
}

/** The key of the page's storage that holds the drafts' texts. */
export const DRAFTS_KEY = 'kvdesk.drafts';
/** How many chats' drafts are kept (the least recently written go first). */
export const MAX_DRAFTS = 50;
/** The draft of the message box before there is a chat (a first start): the chat made for it takes it. */
export const NO_CHAT = '';

const EMPTY: Draft = { text: '', files: [] };

export class Drafts {
  private readonly files = new Map<string, Attachment[]>();
  /** Chats whose files changed on this page before the kept ones were read: what was kept is older. */
  private readonly touched = new Set<string>();
  private readonly filesReadListeners = new Set<() => void>();
  /** The chats there are, as keepOnly last heard (null: not yet): files kept for others are let go when read. */
  private alive: ReadonlySet<string> | null = null;
  /** Texts by chat id, the most recently written last. */
  private texts: Map<string, string>;

  constructor(
    private readonly storage: DraftStorage | undefined,
    private readonly fileStore?: DraftFileStore,
  ) {
    this.texts = new Map(readTexts(storage));
    fileStore?.readAll().then(
      (kept) => {
        for (const [id, files] of kept) {
          if (this.alive !== null && id !== NO_CHAT && !this.alive.has(id)) {
            // A chat deleted (here before they were read, or elsewhere while the page was closed).
            fileStore.write(id, []);
            continue;
          }
          if (!this.touched.has(id) && files.length > 0) this.files.set(id, files);
        }
        for (const l of this.filesReadListeners) l();
      },
      () => {},
    );
  }

  /** Called once the files kept from before the page (re)loaded are read: a draft shown meanwhile may have some. */
  onFilesRead(listener: () => void): () => void {
    this.filesReadListeners.add(listener);
    return () => this.filesReadListeners.delete(listener);
  }

  /** The chat's draft (empty when it has none). */
  get(threadId: string | null): Draft {
    const id = threadId ?? NO_CHAT;
    const text = this.texts.get(id) ?? '';
    const files = this.files.get(id) ?? [];
    return text === '' && files.length === 0 ? EMPTY : { text, files };
  }

  /** Keeps the chat's draft; an empty one is forgotten. */
  set(threadId: string | null, draft: Draft): void {
    const id = threadId ?? NO_CHAT;
    const hadFiles = this.files.get(id) ?? [];
    if (hadFiles !== draft.files && (hadFiles.length > 0 || draft.files.length > 0)) {
      this.touched.add(id);
      this.fileStore?.write(id, draft.files);
      // The most recently given last; as many chats' files as texts are kept (megabytes each, at most).
      this.files.delete(id);
      if (draft.files.length > 0) this.files.set(id, draft.files);
      while (this.files.size > MAX_DRAFTS) {
        const oldest = this.files.keys().next().value as string;
        this.files.delete(oldest);
        this.fileStore?.write(oldest, []);
      }
    }
    const had = this.texts.get(id);
    if (had === draft.text || (had === undefined && draft.text === '')) return;
    // What the other tabs and windows of this page wrote meanwhile stays: only this chat's entry changes.
    this.reload();
    this.texts.delete(id);
    if (draft.text !== '') this.texts.set(id, draft.text);
    while (this.texts.size > MAX_DRAFTS) {
      const oldest = this.texts.keys().next().value as string;
      this.texts.delete(oldest);
    }
    this.save();
  }

  /** Forgets the drafts of chats that are gone (deleted here or elsewhere). */
  keepOnly(threadIds: ReadonlySet<string>): void {
    this.alive = threadIds;
    this.reload();
    let changed = false;
    for (const id of [...this.texts.keys()]) {
      if (id === NO_CHAT || threadIds.has(id)) continue;
      this.texts.delete(id);
      changed = true;
    }
    for (const id of [...this.files.keys()]) {
      if (id === NO_CHAT || threadIds.has(id)) continue;
      this.files.delete(id);
      this.fileStore?.write(id, []);
    }
    if (changed) this.save();
  }

  /** The stored texts as they are now (another tab may have written since this one read them). */
  private reload(): void {
    if (this.storage) this.texts = new Map(readTexts(this.storage));
  }

  private save(): void {
    try {
      this.storage?.setItem(DRAFTS_KEY, JSON.stringify(Object.fromEntries(this.texts)));
    } catch {
      // Storage full or refused (a private window): the drafts stay for this page's life.
    }
  }
}

/** The stored texts; anything unreadable there is no draft (never an error: a draft is a convenience). */
function readTexts(storage: DraftStorage | undefined): Array<[string, string]> {
  try {
    const raw = storage?.getItem(DRAFTS_KEY);
    if (!raw) return [];
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return [];
    return Object.entries(parsed).filter((e): e is [string, string] => typeof e[1] === 'string' && e[1] !== '');
  } catch {
    return [];
  }
}

/** The page's drafts (one for all its components), kept in its localStorage where it has one. */
let pageDrafts: Drafts | undefined;
export function drafts(): Drafts {
  if (!pageDrafts) {
    let storage: DraftStorage | undefined;
    try {
      storage = (globalThis as { localStorage?: DraftStorage }).localStorage;
    } catch {
      storage = undefined; // storage denied (sandboxed page): drafts for this page's life only
    }
    pageDrafts = new Drafts(storage, indexedDbFiles());
  }
  return pageDrafts;
}

/** The part of IndexedDB the drafts' files use (this file is also type-checked without the DOM library). */
interface IdbRequest<T> {
  result: T;
  error: unknown;
  onsuccess: (() => void) | null;
  onerror: (() => void) | null;
}
interface IdbCursor {
  key: unknown;
  value: unknown;
  continue(): void;
}
interface IdbStore {
  put(value: unknown, key: string): unknown;
  delete(key: string): unknown;
  openCursor(): IdbRequest<IdbCursor | null>;
}
interface IdbDatabase {
  createObjectStore(name: string): unknown;
  transaction(store: string, mode?: 'readonly' | 'readwrite'): { objectStore(name: string): IdbStore };
}
interface IdbFactory {
  open(name: string, version: number): IdbRequest<IdbDatabase> & { onupgradeneeded: (() => void) | null };
}

const FILES_STORE = 'files';

/** The drafts' files in the page's IndexedDB (none where the page has none, or may not open it). */
function indexedDbFiles(): DraftFileStore | undefined {
  let idb: IdbFactory | undefined;
  try {
    idb = (globalThis as { indexedDB?: IdbFactory }).indexedDB;
  } catch {
    return undefined;
  }
  if (!idb) return undefined;
  const factory = idb;
  const opened = new Promise<IdbDatabase>((resolve, reject) => {
    const req = factory.open('kvdesk-drafts', 1);
    req.onupgradeneeded = () => req.result.createObjectStore(FILES_STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  opened.catch(() => {});
  return {
    async readAll() {
      const db = await opened;
      return new Promise((resolve, reject) => {
        const out: Array<[string, Attachment[]]> = [];
        const req = db.transaction(FILES_STORE).objectStore(FILES_STORE).openCursor();
        req.onsuccess = () => {
          const cursor = req.result;
          if (!cursor) {
            resolve(out);
            return;
          }
          // What another version wrote and this one cannot read is no draft.
          const files = Attachment.array().safeParse(cursor.value);
          if (typeof cursor.key === 'string' && files.success) out.push([cursor.key, files.data]);
          cursor.continue();
        };
        req.onerror = () => reject(req.error);
      });
    },
    write(threadId, files) {
      opened.then(
        (db) => {
          try {
            const store = db.transaction(FILES_STORE, 'readwrite').objectStore(FILES_STORE);
            if (files.length > 0) store.put(files, threadId);
            else store.delete(threadId);
          } catch {
            // Quota or a closed database: the files stay for this page's life.
          }
        },
        () => {},
      );
    },
  };
}
