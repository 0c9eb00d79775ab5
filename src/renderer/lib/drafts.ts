/**
 * What the person is writing, per chat: the message box keeps each chat's own draft when another chat is opened,
 * so a draft never follows to a chat it was not meant for (where Enter would send it). The text is kept in the
 * page's storage (it survives a reload; the server is not told); attached files, which can be megabytes, in the
 * page's IndexedDB (read back after a reload, a moment after the texts). The page's other tabs and windows hear of
 * each change (the storage's event for the texts, a BroadcastChannel for the files), so a draft sent or changed in
 * one is not an older one in another (where Enter would send it again).
 *
 * A page served by `kvdesk serve` keeps each draft for the data folder its chat came from (the folder's id, as the
 * server's hello says it): a page kept open while kvdesk is started again on another folder, or loaded again on
 * one, shows that folder's drafts and keeps the others' (as many drafts as MAX_DRAFTS, of all folders together: the
 * least recently written go first) until kvdesk runs on their folder again. Drafts kept by a version before that (or
 * in the Electron window, whose page knows no folder id) are kept by chat id alone; such a draft is the draft of the
 * chat of that id in whichever folder's chats are read first, and is written back as that folder's.
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
  /** Every draft's files as last kept, by key (draftKey). */
  readAll(): Promise<Array<[string, Attachment[]]>>;
  /** Keeps a draft's files by key (none: forgets them). Never fails: a draft is a convenience. */
  write(key: string, files: Attachment[]): void;
}

/** How the page's other tabs and windows are told of a chat's files changed here (a BroadcastChannel in the page). */
export interface DraftFilesShare {
  /** `key`: the draft's (draftKey). */
  post(key: string, files: Attachment[]): void;
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

/** Between a data folder's id and a chat's id in the keys of a folder's drafts (no id has it). */
const SEP = '\u001f';

/** The key a chat's draft is kept under for a data folder (undefined: none known, the chat's id alone). */
export function draftKey(folder: string | undefined, threadId: string): string {
  return folder === undefined ? threadId : `${folder}${SEP}${threadId}`;
}

export class Drafts {
  private readonly files = new Map<string, Attachment[]>();
  /** Drafts (by key) whose files changed on this page before the kept ones were read: what was kept is older. */
  private readonly touched = new Set<string>();
  private readonly filesReadListeners = new Set<() => void>();
  private readonly elsewhereListeners = new Set<DraftChangedElsewhere>();
  /** The chats there are, as keepOnly last heard (null: not yet): files kept for others are let go when read. */
  private alive: ReadonlySet<string> | null = null;
  /** Texts by key (draftKey), the most recently written last. */
  private texts: Map<string, string>;
  /** The data folder whose chats the page shows (undefined: none known; drafts kept by chat id alone). */
  private folder: string | undefined;

  constructor(
    private readonly storage: DraftStorage | undefined,
    private readonly fileStore?: DraftFileStore,
    private readonly share?: DraftFilesShare,
  ) {
    this.texts = new Map(readTexts(storage));
    fileStore?.readAll().then(
      (kept) => {
        for (const [key, files] of kept) {
          const id = this.ownChat(key);
          if (this.alive !== null && id !== null && id !== NO_CHAT && !this.alive.has(id)) {
            // A chat deleted (here before they were read, or elsewhere while the page was closed).
            fileStore.write(key, []);
            continue;
          }
          if (!this.touched.has(key) && files.length > 0) this.files.set(key, files);
        }
        for (const l of this.filesReadListeners) l();
      },
      () => {},
    );
  }

  /**
   * The data folder whose chats the page shows now (the server's hello says its id; undefined: none said): its drafts
   * are the ones got, written and pruned from now on; other folders' stay as they are.
   */
  setFolder(folder: string | undefined): void {
    if (folder === this.folder) return;
    this.folder = folder;
    this.alive = null;
  }

  /** How many chats of the folder shown now have a draft (their text, their files, or both). */
  count(): number {
    const ids = new Set<string>();
    for (const key of [...this.texts.keys(), ...this.files.keys()]) {
      const id = this.visibleChat(key);
      if (id !== null) ids.add(id);
    }
    let n = 0;
    for (const id of ids) if (this.get(id) !== EMPTY) n++;
    return n;
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
    const ids = new Set<string>();
    for (const key of [...before.keys(), ...after.keys()]) {
      const id = this.visibleChat(key);
      if (id !== null) ids.add(id);
    }
    for (const id of ids) {
      const was = this.pick(before, id);
      if (was === this.pick(after, id)) continue;
      // What this page showed was that text (unless it had been changed here since: then this page's stays).
      this.tellElsewhere(id, { text: was ?? '', files: this.pick(this.files, id) ?? [] });
    }
  }

  /** Another tab or window changed a chat's files (sent, removed, attached): this page's are those now. */
  filesChangedElsewhere(key: string, files: Attachment[]): void {
    const id = this.visibleChat(key);
    const before = id === null ? EMPTY : this.get(id);
    // Newer than those kept from before this page loaded (should those be read later).
    this.touched.add(key);
    this.files.delete(key);
    if (files.length > 0) this.files.set(key, files);
    if (id !== null) this.tellElsewhere(id, before);
  }

  private tellElsewhere(threadId: string, before: Draft): void {
    for (const l of this.elsewhereListeners) l(threadId, before);
  }

  /** The chat's draft (empty when it has none). */
  get(threadId: string | null): Draft {
    const id = threadId ?? NO_CHAT;
    const text = this.pick(this.texts, id) ?? '';
    const files = this.pick(this.files, id) ?? [];
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
    const hadFiles = this.pick(this.files, id) ?? [];
    if (hadFiles === files || (hadFiles.length === 0 && files.length === 0)) return;
    const key = this.key(id);
    this.touched.add(key);
    this.keepFiles(key, files);
    // Files kept by chat id alone (an earlier version) were these: this folder's now.
    if (key !== id && this.files.delete(id)) this.keepFiles(id, []);
    // The most recently given last; as many chats' files as texts are kept (megabytes each, at most).
    this.files.delete(key);
    if (files.length > 0) this.files.set(key, files);
    while (this.files.size > MAX_DRAFTS) {
      const oldest = this.files.keys().next().value as string;
      this.files.delete(oldest);
      this.keepFiles(oldest, []);
    }
  }

  /** Keeps the chat's text, leaving its files as they are (see setFiles). */
  setText(threadId: string | null, text: string): void {
    const id = threadId ?? NO_CHAT;
    const had = this.pick(this.texts, id);
    if (had === text || (had === undefined && text === '')) return;
    // What the other tabs and windows of this page wrote meanwhile stays: only this chat's entry changes.
    this.reload();
    const key = this.key(id);
    this.texts.delete(key);
    // A text kept by chat id alone (an earlier version) was this one: this folder's now.
    this.texts.delete(id);
    if (text !== '') this.texts.set(key, text);
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

  /**
   * A message taken from the box that waits for its chat to open: its files are kept in the store as the chat's
   * (with the draft's own), not shown, so that a reload meanwhile, which gives the message back as the draft, keeps
   * them (the store's write as the page goes may not finish). {@link unhold} once it is sent.
   */
  hold(threadId: string, files: Attachment[]): void {
    if (files.length === 0) return;
    this.fileStore?.write(this.key(threadId), [...files, ...(this.pick(this.files, threadId) ?? [])]);
  }

  /** The held message was sent: the stored files are the draft's own again. */
  unhold(threadId: string): void {
    this.fileStore?.write(this.key(threadId), this.pick(this.files, threadId) ?? []);
  }

  /**
   * The folder shown now has these chats: the drafts of its chats that are gone (deleted here or elsewhere) are
   * forgotten. Other folders' drafts stay. Drafts kept by chat id alone (an earlier version) become this folder's
   * where it has their chat; the others stay as they are (they may be another folder's).
   */
  keepOnly(threadIds: ReadonlySet<string>): void {
    this.alive = threadIds;
    this.reload();
    let changed = false;
    const alive = (id: string) => id === NO_CHAT || threadIds.has(id);
    for (const [key, text] of [...this.texts]) {
      const id = this.ownChat(key);
      if (id !== null) {
        if (alive(id)) continue;
        this.texts.delete(key);
        changed = true;
      } else if (this.adopts(key) && alive(key)) {
        this.texts.delete(key);
        if (!this.texts.has(this.key(key))) this.texts.set(this.key(key), text);
        changed = true;
      }
    }
    for (const [key, files] of [...this.files]) {
      const id = this.ownChat(key);
      if (id !== null) {
        if (alive(id)) continue;
        this.files.delete(key);
        this.keepFiles(key, []);
      } else if (this.adopts(key) && alive(key)) {
        this.files.delete(key);
        this.keepFiles(key, []);
        const own = this.key(key);
        if (!this.files.has(own)) {
          this.files.set(own, files);
          this.keepFiles(own, files);
        }
      }
    }
    if (changed) this.save();
  }

  /** The key of a chat's draft for the folder shown now. */
  private key(threadId: string): string {
    return draftKey(this.folder, threadId);
  }

  /** The chat whose draft a key keeps, when it is one of the folder shown now's own (null: another's, or untold). */
  private ownChat(key: string): string | null {
    if (this.folder === undefined) return key.includes(SEP) ? null : key;
    const prefix = `${this.folder}${SEP}`;
    return key.startsWith(prefix) ? key.slice(prefix.length) : null;
  }

  /** A key of a draft kept by chat id alone (an earlier version), while a folder is shown: its chat's if it has it. */
  private adopts(key: string): boolean {
    return this.folder !== undefined && !key.includes(SEP);
  }

  /** The chat whose draft a key may be shown as, in the folder shown now (its own, or one kept by chat id alone). */
  private visibleChat(key: string): string | null {
    return this.ownChat(key) ?? (this.adopts(key) ? key : null);
  }

  /** A chat's entry for the folder shown now: its own, else one kept by chat id alone (an earlier version). */
  private pick<T>(map: ReadonlyMap<string, T>, threadId: string): T | undefined {
    const own = map.get(this.key(threadId));
    return own !== undefined || this.folder === undefined ? own : map.get(threadId);
  }

  /** Keeps a draft's files (none: forgets them) across reloads, and tells the page's other tabs and windows. */
  private keepFiles(key: string, files: Attachment[]): void {
    this.fileStore?.write(key, files);
    this.share?.post(key, files);
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
