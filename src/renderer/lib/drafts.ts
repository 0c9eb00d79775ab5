/**
 * What the person is writing, per chat: the message box keeps each chat's own draft when another chat is opened,
 * so a draft never follows to a chat it was not meant for (where Enter would send it). The text is kept in the
 * page's storage (it survives a reload; the server is not told); attached files, which can be megabytes, in the
 * page's IndexedDB (read back after a reload, a moment after the texts). The page's other tabs and windows hear of
 * each change (the storage's event for the texts, a BroadcastChannel for the files), so a draft sent or changed in
 * one is not an older one in another (where Enter would send it again).
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

/** How the page's other tabs and windows are told of a chat's files changed here (a BroadcastChannel in the page). */
export interface DraftFilesShare {
  post(threadId: string, files: Attachment[]): void;
}

/** Told that another tab or window changed a chat's draft; `before`: the draft as this page had it until then. */
export type DraftChangedElsewhere = (threadId: string, before: Draft) => void;

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
  private readonly elsewhereListeners = new Set<DraftChangedElsewhere>();
  /** The chats there are, as keepOnly last heard (null: not yet): files kept for others are let go when read. */
  private alive: ReadonlySet<string> | null = null;
  /** Texts by chat id, the most recently written last. */
  private texts: Map<string, string>;

  constructor(
    private readonly storage: DraftStorage | undefined,
    private readonly fileStore?: DraftFileStore,
    private readonly share?: DraftFilesShare,
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

  /** Called when another tab or window changed a chat's draft (this page's copy already is the new one). */
  onChangedElsewhere(listener: DraftChangedElsewhere): () => void {
    this.elsewhereListeners.add(listener);
    return () => this.elsewhereListeners.delete(listener);
  }

  /**
   * Another tab or window wrote the texts (the storage's event: the value before and after; both null when it
   * cleared the storage): this page's copy is read again, and the chats whose text changed are told.
   */
  textsChangedElsewhere(oldValue: string | null, newValue: string | null): void {
    const had = new Map(this.texts);
    const before = oldValue === null && newValue === null ? had : new Map(parseTexts(oldValue));
    const after = new Map(parseTexts(newValue));
    // As stored now (a later write, of this page or another, may be there already: its own event follows).
    this.reload();
    for (const id of new Set([...before.keys(), ...after.keys()])) {
      if (before.get(id) === after.get(id)) continue;
      // What this page showed was that text (unless it had been changed here since: then this page's stays).
      this.tellElsewhere(id, { text: before.get(id) ?? '', files: this.files.get(id) ?? [] });
    }
  }

  /** Another tab or window changed a chat's files (sent, removed, attached): this page's are those now. */
  filesChangedElsewhere(threadId: string, files: Attachment[]): void {
    const before = this.get(threadId);
    // Newer than those kept from before this page loaded (should those be read later).
    this.touched.add(threadId);
    this.files.delete(threadId);
    if (files.length > 0) this.files.set(threadId, files);
    this.tellElsewhere(threadId, before);
  }

  private tellElsewhere(threadId: string, before: Draft): void {
    for (const l of this.elsewhereListeners) l(threadId, before);
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
    this.setFiles(threadId, draft.files);
    this.setText(threadId, draft.text);
  }

  /**
   * Keeps the chat's files, leaving its text as it is (the message box gives each part as it changes there: a
   * part it did not change may be newer in this page, from another tab, than the box shows yet).
   */
  setFiles(threadId: string | null, files: Attachment[]): void {
    const id = threadId ?? NO_CHAT;
    const hadFiles = this.files.get(id) ?? [];
    if (hadFiles === files || (hadFiles.length === 0 && files.length === 0)) return;
    this.touched.add(id);
    this.keepFiles(id, files);
    // The most recently given last; as many chats' files as texts are kept (megabytes each, at most).
    this.files.delete(id);
    if (files.length > 0) this.files.set(id, files);
    while (this.files.size > MAX_DRAFTS) {
      const oldest = this.files.keys().next().value as string;
      this.files.delete(oldest);
      this.keepFiles(oldest, []);
    }
  }

  /** Keeps the chat's text, leaving its files as they are (see setFiles). */
  setText(threadId: string | null, text: string): void {
    const id = threadId ?? NO_CHAT;
    const had = this.texts.get(id);
    if (had === text || (had === undefined && text === '')) return;
    // What the other tabs and windows of this page wrote meanwhile stays: only this chat's entry changes.
    this.reload();
    this.texts.delete(id);
    if (text !== '') this.texts.set(id, text);
    while (this.texts.size > MAX_DRAFTS) {
      const oldest = this.texts.keys().next().value as string;
      this.texts.delete(oldest);
    }
    this.save();
  }

  /**
   * A message this page took from the box and could not send (its chat could not be opened, the send was stopped):
   * the chat's draft again, and the message box showing that chat told, as of a change made elsewhere (what was
   * written there since stays, after it).
   */
  giveBack(threadId: string | null, draft: Draft): void {
    const before = this.get(threadId);
    const text = before.text === '' ? draft.text : draft.text === '' ? before.text : `${draft.text}\n\n${before.text}`;
    this.set(threadId, { text, files: [...draft.files, ...before.files] });
    this.tellElsewhere(threadId ?? NO_CHAT, before);
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
      this.keepFiles(id, []);
    }
    if (changed) this.save();
  }

  /** Keeps a chat's files (none: forgets them) across reloads, and tells the page's other tabs and windows. */
  private keepFiles(threadId: string, files: Attachment[]): void {
    this.fileStore?.write(threadId, files);
    this.share?.post(threadId, files);
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
    return parseTexts(storage?.getItem(DRAFTS_KEY));
  } catch {
    return []; // storage denied
  }
}

/** The texts a stored value holds (none where it holds nothing readable). */
function parseTexts(raw: string | null | undefined): Array<[string, string]> {
  try {
    if (!raw) return [];
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return [];
    return Object.entries(parsed).filter((e): e is [string, string] => typeof e[1] === 'string' && e[1] !== '');
  } catch {
    return [];
  }
}

/** The part of the page's window drafts use (this file is also type-checked without the DOM library). */
interface DraftWindow {
  localStorage?: DraftStorage;
  addEventListener?(
    type: 'storage',
    listener: (e: { key: string | null; oldValue: string | null; newValue: string | null }) => void,
  ): void;
  BroadcastChannel?: new (
    name: string,
  ) => { postMessage(message: unknown): void; onmessage: ((e: { data: unknown }) => void) | null };
}

/**
 * The page's drafts (one for all its components), kept in its localStorage where it has one; its other tabs and
 * windows hear of each change.
 */
let pageDrafts: Drafts | undefined;
export function drafts(): Drafts {
  if (!pageDrafts) {
    const page = globalThis as unknown as DraftWindow;
    let storage: DraftStorage | undefined;
    try {
      storage = page.localStorage;
    } catch {
      storage = undefined; // storage denied (sandboxed page): drafts for this page's life only
    }
    const channel = page.BroadcastChannel ? new page.BroadcastChannel('kvdesk.drafts') : undefined;
    const made = new Drafts(
      storage,
      indexedDbFiles(),
      channel && { post: (threadId, files) => channel.postMessage({ threadId, files }) },
    );
    if (channel) {
      channel.onmessage = (e) => {
        const data = e.data as { threadId?: unknown; files?: unknown } | null;
        // What another version of the page sent and this one cannot read is left.
        const files = Attachment.array().safeParse(data?.files);
        if (typeof data?.threadId === 'string' && files.success) made.filesChangedElsewhere(data.threadId, files.data);
      };
    }
    // Another tab's write (the event does not come for this page's own).
    page.addEventListener?.('storage', (e) => {
      if (e.key === DRAFTS_KEY || e.key === null) made.textsChangedElsewhere(e.oldValue, e.newValue);
    });
    pageDrafts = made;
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
