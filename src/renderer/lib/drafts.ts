/**
 * What the person is writing, per chat: the message box keeps each chat's own draft when another chat is opened,
 * so a draft never follows to a chat it was not meant for (where Enter would send it). The text is kept in the
 * page's storage (it survives a reload; the server is not told); attached files stay with the draft only while the
 * page is open (they can be megabytes).
 */
import type { Attachment } from '../../shared/api';

export interface Draft {
  text: string;
  files: Attachment[];
}

/** The part of the Web Storage API drafts use (localStorage in the page, a Map in tests). */
export interface DraftStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
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
  /** Texts by chat id, the most recently written last. */
  private texts: Map<string, string>;

  constructor(private readonly storage: DraftStorage | undefined) {
    this.texts = new Map(readTexts(storage));
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
    if (draft.files.length > 0) this.files.set(id, draft.files);
    else this.files.delete(id);
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
    this.reload();
    let changed = false;
    for (const id of [...this.texts.keys()]) {
      if (id === NO_CHAT || threadIds.has(id)) continue;
      this.texts.delete(id);
      changed = true;
    }
    for (const id of [...this.files.keys()]) if (id !== NO_CHAT && !threadIds.has(id)) this.files.delete(id);
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
    pageDrafts = new Drafts(storage);
  }
  return pageDrafts;
}
