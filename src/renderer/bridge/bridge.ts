/**
 * The one place that connects the transport to the store. It subscribes to
 * host events and generation streams, writes into the store from outside
 * React (through the frame coalescer, once per animation frame), and offers
 * the actions components call. Components never touch the transport.
 */
import type {
  ApiServerSettings,
  Attachment,
  BackendInfo,
  BudgetPatch,
  HubSearchHit,
  HubVariantsInfo,
  KvdeskApi,
  LoadModelRequest,
  McpStatus,
  ModelInfo,
  Preset,
  PromptMeasure,
  StoredMessage,
  Thread,
  ThreadFields,
  ThreadSummary,
  UiSettings,
} from '../../shared/api';
import { RECOVERED_FRAGMENT } from '../../shared/api';
import type { GenerateRequest, SamplingSettings, ToolCall } from '../../shared/contract';
import type { ErrorInfo, Result } from '../../shared/errors';
import { cutText } from '../../shared/text';
import { busyElsewhere, noteOwnRequest } from '../lib/busy-elsewhere';
import { isolated, quoted } from '../lib/direction';
import { type Draft, drafts } from '../lib/drafts';
import { autoRunCalls, chatTools, MAX_AUTO_ROUNDS, SKIPPED_ANSWER, toolKey } from '../lib/mcp-tools';
import {
  branchTitle,
  conflictCopy,
  conflictTitle,
  holdsAll,
  mergeThread,
  sameSettings,
  takeSettings,
} from '../lib/merge-thread';
import { loadedAnnouncement, unloadedAnnouncement, validatedAnnouncement } from '../lib/model-announcement';
import {
  type FieldsChange,
  forThisHost,
  indexedDbPending,
  type PendingChange,
  pagesOnline,
  whyNotKept,
} from '../lib/pending-changes';
import { blank, carriedSettings, chatSetup, presetName } from '../lib/presets';
import { openScrolledTo, type ScrollPlace, scrollPlaceOf } from '../lib/scroll-place';
import { importedTitle, parseThreadImport } from '../lib/thread-export';
import { turnModel } from '../lib/turn-model';
import type { AppStore } from '../store';
import { partialReply, UNTITLED } from '../store/chat-slice';
import type { PackageImport } from '../store/types';
import { OTHER_FOLDER, type Transport } from '../transport';
import { createFrameCoalescer, type Flush } from './frame-coalescer';
import { buildChatRequest, currentDrop, newId } from './prompt';

/** A file of a dropped folder, read in the browser. */
export interface DroppedFile {
  path: string;
  /** The dropped or chosen File: sent as it is read from disk. */
  data: Blob;
}

export interface Bridge {
  newThread(): Thread;
  /**
   * Imports a chat from a file's text (kvdesk's JSON export, or `{messages: [...]}`) as a new chat and opens it;
   * returns why not (naming the field) when the file cannot be read as one.
   */
  importThread(text: string, fileName: string): string | null;
  /**
   * The saved chats whose title, messages or attached files contain every word of the query, found by kvdesk (the
   * chat list's search of the chats this page has only the summary of); null when it could not search.
   */
  searchThreads(query: string): Promise<string[] | null>;
  /**
   * The desktop window's API server: serve the HTTP API on the port, on this computer or the local network, with
   * or without the API key (remembered, with whether it starts with kvdesk), or stop it. Resolves with why not
   * when it could not.
   */
  startApiServer(saved: ApiServerSettings): Promise<string | null>;
  /** Repositories on the hub with ONNX language models whose name matches, most downloaded first. */
  searchHub(query: string): Promise<Result<HubSearchHit[]>>;
  /** The packages a Hugging Face repository offers, or why not. */
  hubVariants(repo: string): Promise<Result<HubVariantsInfo>>;
  /** Starts a download into the library (its progress arrives as the store's downloads); why not, if refused. */
  downloadModel(repo: string, variant: string): Promise<string | null>;
  cancelDownload(id: string): void;
  stopApiServer(): Promise<string | null>;
  /**
   * What the next turn's prompt would be if `text` were sent in the thread now (tokens, context, what the
   * context would leave out); null without a model or a thread.
   */
  measureDraft(threadId: string, text: string, attachments?: Attachment[]): Promise<PromptMeasure | null>;
  /** The prompt of the thread's system prompt alone (with an empty message of the person's): null without one. */
  measureSystemPrompt(threadId: string): Promise<PromptMeasure | null>;
  /**
   * The conversation as the model sees it now (from where its latest reply's view starts), counted again as the
   * next turn would send it (a chat ending with the person's message: as the reply to it reads it) and all of it,
   * as `refuse` counts (leaving out the oldest messages would hide what an edit added) up to the context (past it,
   * `countedUpTo` says it is longer, from its newest turns alone); where the thread leaves out
   * its oldest messages, how many the next turn would leave out (the host leaves some out before the chat fills the
   * context, to leave its reply room). Null without a model or a thread.
   */
  measureContext(threadId: string): Promise<PromptMeasure | null>;
  /** Saves the thread's settings as a preset under `name` (replacing one of that name). */
  savePreset(threadId: string, name: string): void;
  /** Gives the thread a preset's settings (what the preset leaves out goes back to the package's defaults). */
  applyPreset(threadId: string, name: string): void;
  /**
   * The chat's settings came with it from the chat open when it was made, and it is untouched since: that chat's
   * title (null otherwise), so the composer can say where they came from.
   */
  settingsCarriedFrom(threadId: string): string | null;
  /** Every setting a new chat carries back to the package's defaults (the chat stays untouched). */
  startFromDefaults(threadId: string): void;
  deletePreset(name: string): void;
  /** The window's API server's settings, saved without starting it (whether it starts with kvdesk, and how). */
  saveApiServer(saved: ApiServerSettings): void;
  /** A new API key for the window's API server (the old one stops working); why not, if it could not. */
  newApiKey(): Promise<string | null>;
  selectThread(id: string): void;
  renameThread(id: string, title: string): void;
  /** Keeps a chat at the top of the list (or lets it go back to its place by activity). */
  pinThread(id: string, pinned: boolean): void;
  deleteThread(id: string): void;
  updateThreadSettings(
    id: string,
    patch: {
      systemPrompt?: string;
      sampling?: SamplingSettings;
      maxNewTokens?: number | undefined;
      responseFormat?: 'text' | 'json' | undefined;
      jsonSchema?: string | undefined;
      contextOverflow?: 'drop-oldest' | 'refuse' | undefined;
      stop?: string[] | undefined;
      thinking?: boolean | undefined;
      thinkingBudget?: number | undefined;
      reasoningEffort?: Thread['reasoningEffort'] | undefined;
      showProbabilities?: boolean | undefined;
      mcpServers?: string[] | undefined;
      toolsRequired?: boolean | undefined;
      toolsAllowed?: string[] | undefined;
    },
  ): void;
  /**
   * Sends a user message in the active thread (creating one if there is none); calls of the last reply still
   * waiting for Run or Skip are skipped first. False when it could not be sent now (a reply or a tool of the
   * chat still runs: the notice says so), so the message box keeps the text.
   */
  send(text: string, attachments?: Attachment[]): boolean;
  /** Stops the reply streaming in a thread (the active one by default). */
  stop(threadId?: string): void;
  /** Generates the last reply of a thread again. */
  regenerate(threadId: string): void;
  /** Shows another version of a reply (regenerating keeps the ones it replaced); not while the chat replies. */
  showVersion(threadId: string, messageId: string, index: number): void;
  /** Continues the last reply where it stopped (cut by max tokens, or stopped by the person). */
  continueReply(threadId: string): void;
  /** Replaces a user message, drops everything after it, and sends again. */
  editAndResend(threadId: string, messageId: string, text: string): void;
  /**
   * Edit-and-resend that keeps this chat whole: a new chat with the messages before `messageId` (and this chat's
   * settings), where the edited message is sent; it opens.
   */
  editInBranch(threadId: string, messageId: string, text: string): void;
  /** The MCP servers of mcp.json and their tools (the settings' tools section). */
  mcpStatus(): Promise<Result<McpStatus>>;
  /** What a chat template writes for a short conversation (a model card's template, before it is used). */
  previewChatTemplate(template: string, model?: string): Promise<Result<{ text: string }>>;
  /**
   * Answers a call the model made: runs the MCP tool (`run`) or says the person did not let it run; once every
   * call of the reply is answered, the model reads the answers and goes on.
   */
  answerToolCall(threadId: string, messageId: string, callId: string, run: boolean): Promise<void>;
  /** Runs the call, and every later call of that tool in this chat without asking (LM Studio's "Always allow"). */
  alwaysRunTool(threadId: string, messageId: string, callId: string): Promise<void>;
  /** Replaces a reply's text with the person's (saved; later turns and `continue` go on from it). */
  editReply(threadId: string, messageId: string, text: string): void;
  /**
   * A new chat with this one's settings and its messages up to and including `messageId` (to try another way
   * from there without losing this one); it opens.
   */
  branchThread(threadId: string, messageId: string): void;
  setActiveModel(id: string): void;
  importFiles(name: string, files: DroppedFile[]): Promise<void>;
  /** Stops the upload in flight (the host keeps nothing of it). */
  cancelImport(): void;
  /**
   * Checks a package folder on disk (the desktop window); `trustInstalled`: the person trusts an ORT package of
   * the "installed" layout, which its load then does too.
   */
  importPath(name: string, path: string, trustInstalled?: boolean): Promise<void>;
  /** Loads a package (again, when it is loaded), with the person's variant and backend when given. */
  /**
   * Loads (or loads again) the package; a refusal of the person's chat template is returned (for the card's
   * editor to show) rather than told in a notice.
   */
  loadPackage(path: string, how?: LoadModelRequest): Promise<string | null>;
  /** The backends onnxruntime can use here, and why not the others (asked once, then kept). */
  listBackends(): Promise<BackendInfo[]>;
  /** Loads a library package and makes it the model for new replies (the picker's library entries). */
  /** Loads a package (as picked) and makes it the model new replies go to. */
  loadAndUse(root: string, how?: LoadModelRequest): Promise<string | null>;
  unloadModel(id: string): Promise<void>;
  /** Removes a package from the library (an upload's files are deleted with it). */
  forgetPackage(root: string): Promise<void>;
  configureBudget(patch: BudgetPatch): Promise<Result<unknown>>;
  setInspectorOpen(open: boolean): void;
  /** Light, dark, or (undefined) as the OS is; kept with the settings. */
  setTheme(theme: 'light' | 'dark' | undefined): void;
  /** Electron only: the host path of a dropped file. */
  pathForFile(file: File): string | undefined;
  /** Electron only: the OS folder chooser; undefined where the page must use a file input. */
  readonly chooseFolder: (() => Promise<string | null>) | undefined;
  readonly api: KvdeskApi;
}

/** Where the coalescer schedules its flush: the next animation frame, or a timer when the page is hidden (rAF pauses then). */
function scheduleFrame(fn: () => void): void {
  if (typeof document !== 'undefined' && document.hidden) {
    setTimeout(fn, 100);
    return;
  }
  requestAnimationFrame(fn);
  // rAF stops firing if the page is hidden after this point; the timer makes sure a final frame still lands.
  setTimeout(fn, 250);
}

function packageError(error: ErrorInfo): NonNullable<PackageImport['error']> {
  const d = error.detail ?? {};
  const file = typeof d.file === 'string' ? d.file : undefined;
  const field = typeof d.field === 'string' ? d.field : undefined;
  return { code: error.code, message: error.message, ...(file ? { file } : {}), ...(field ? { field } : {}) };
}

export function startBridge(transport: Transport, store: AppStore): Bridge {
  const api = transport.api;
  const s = () => store.getState();
  /** Cancel functions of generations in flight, by assistant message id. */
  const cancels = new Map<string, () => void>();
  /** Model each thread's host session was built with (a session cannot change model). */
  const sessionModel = new Map<string, string>();
  let settingsLoaded = false;
  /**
   * This page among the tabs and windows on one host: the chats it saves come back to the others, not to it. A new
   * one when the kvdesk on the page's address keeps another data folder (what the page kept in the browser for the
   * one before is then a gone page's: made by whichever page meets that folder's kvdesk again, this one too).
   * (Not crypto.randomUUID: a page served over plain http on the LAN is not a secure context.)
   */
  const newPageId = () => `page-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  let pageId = newPageId();
  /** A call or stream written for another data folder's kvdesk than the one connected now, ended unsent. */
  const forOtherFolder = (r: Result<unknown>) => !r.ok && r.error.detail?.reason === OTHER_FOLDER;

  /** The drafts of chats that are no longer here go (a chat's draft lives as long as the chat). */
  function forgetDrafts(): void {
    drafts().keepOnly(new Set(s().threads.map((t) => t.id)));
  }

  /**
   * A chat gone, deleted here or elsewhere: its reply stops, nothing of it is saved again, its draft goes. A message
   * waiting for it to open goes back to the message box (of the chat open now): whether one did, for the notice.
   */
  function dropThread(id: string): boolean {
    // A conflicted copy deleted while the reply it keeps is written: not made again (see copying).
    for (const copy of copying.values()) if (copy.id === id) copy.dropped = true;
    const waiting = takeWaiting(id);
    stop(id);
    endStreamSaves(id);
    // A save of it kept in the browser is not made (a delete made here is kept in its place).
    forgetKept(id, Number.POSITIVE_INFINITY);
    known.delete(id);
    s().removeThread(id);
    sessionModel.delete(id);
    pendingPicks.delete(id);
    forgetDrafts();
    if (waiting) drafts().giveBack(s().activeThreadId, { text: waiting.content, files: waiting.attachments });
    return waiting !== undefined;
  }

  /** Said when a chat a message waited for is gone. */
  const UNSENT = 'Your message in it was not sent: it is back in the message box.';

  /** A notice; `urgent`: a failure the person must hear now (an alert). */
  function notify(text: string, urgent = false): void {
    s().setNotice(text, false, urgent);
  }

  function report<T>(what: string, r: Result<T>, urgent = false): r is { ok: true; value: T } {
    if (!r.ok) notify(`${what}: ${r.error.message}`, urgent);
    return r.ok;
  }

  /** The page is going (its pagehide came): see saveThread. */
  let pageGoing = false;

  /**
   * Persists a thread. A reply still streaming goes with its text so far, marked interrupted (its end saves it
   * again, whole): a reload or a crash keeps what it had written, to continue or regenerate. One that has written
   * nothing goes too once the host has it (queued, reading its prompt), or as the page goes: a reload then shows it
   * interrupted where it was, to regenerate, not a message with no reply and nothing to do. Before the host has it,
   * it is left out (another tab would show it interrupted while it is only on its way, for as long as the chat's
   * tools take to start).
   */
  function saveThread(threadId: string): void {
    const t = s().threads.find((x) => x.id === threadId);
    if (!t) return;
    // Not fetched yet (its summary only, no messages): a rename or a pin from the list changes those fields only
    // (updateThread: the chat, tens of MB maybe, is neither fetched nor sent); anything else is saved once it is
    // here, with what was changed meanwhile.
    const summary = s().summaries[threadId];
    if (summary) {
      const fields = listFieldsChanged(summary, t);
      if (fields) {
        if (Object.keys(fields).length > 0) updateFields(threadId, t.title, { ...fields, revision: summary.revision });
        return;
      }
      saveOnFetch.add(threadId);
      fetchThread(threadId);
      return;
    }
    const live = s().live;
    const messages = t.messages.flatMap((m) => {
      const l = live[m.id];
      if (!l) return [m];
      const written = m.content || m.reasoning || m.toolCalls?.length || m.alternatives?.length;
      return written || l.phase !== 'sending' || pageGoing ? [partialReply(m, l)] : [];
    });
    const picked = pendingPicks.get(threadId);
    const thread: Thread = { ...t, messages, ...(picked ? { modelId: picked } : {}) };
    // Refused (another page saved first) while its reply is written here, and the page goes before that is
    // settled: what it has is saved as a chat of its own now, or it would go with the page.
    const doubtful = refused.has(threadId) || settling.has(threadId) || (heard.has(threadId) && saving.has(threadId));
    if (pageGoing && !copying.has(threadId) && liveIn(threadId) && doubtful) {
      startCopy(threadId, t.title);
    }
    const copy = copying.get(threadId);
    if (copy) {
      saveCopy(threadId, thread, copy);
      return;
    }
    // A save of it was refused (another page saved the chat first), not settled yet, and its reply streams: another
    // save while it does, made from the same revision, would be refused too. What it has now goes to the settling,
    // which starts once the saves on their way are answered (the reply's saves, one a second, each answered later
    // than that, kept one on its way for good: the chat was never settled, no copy made, every save refused until
    // the reply ended). The reply's last save goes as before.
    if (refused.has(threadId) && liveIn(threadId)) {
      refused.set(threadId, thread);
      if (!saving.has(threadId)) void settle(threadId);
      return;
    }
    saving.set(threadId, (saving.get(threadId) ?? 0) + 1);
    const at = stamp();
    // Made while kvdesk cannot be reached: kept in the browser until it is answered (a reload meanwhile keeps it).
    if (transport.state !== 'open') keep(threadId, t.title, at, { thread });
    void api.invoke('saveThread', { ...thread, savedBy: pageId }).then((r) => {
      const left = (saving.get(threadId) ?? 1) - 1;
      if (left > 0) saving.set(threadId, left);
      else saving.delete(threadId);
      // Written for another data folder's kvdesk than the one now on the address: kept in the browser for it.
      if (forOtherFolder(r)) return;
      // Answered: what the browser kept of it (and of this page's saves of it before) is let go; a refused one once
      // it is settled.
      if (r.ok || (r.error.code !== 'SAVE_CONFLICT' && r.error.detail?.reason !== 'disconnect')) {
        forgetKept(threadId, at);
      }
      if (r.ok) {
        known.set(threadId, thread);
        // The page's next save of it is made from this revision (or from a later one it heard of meanwhile).
        const now = s().threads.find((x) => x.id === threadId);
        if (now && (now.revision ?? 0) < r.value.revision) s().updateThread(threadId, { revision: r.value.revision });
      } else if (r.error.code === 'SAVE_CONFLICT') {
        refused.set(threadId, thread); // the later of this page's saves: what it has most
      } else if (r.error.detail?.reason === 'disconnect') {
        // The connection went before the host answered (it may have written it, or not): saved again once it is
        // back. Taken as this page's own save in a row either way, or refused and settled if another page saved
        // the chat meanwhile. Kept in the browser till then.
        unanswered.add(threadId);
        if ((kept.get(threadId) ?? 0) < at) keep(threadId, t.title, at, { thread });
      } else if (r.error.detail?.reason === 'deleted') {
        deletedElsewhere(threadId, t.title);
      } else {
        // Nothing of this save was written (too large to send, a disk kvdesk may not write): said at once, as what
        // the page shows is lost when it closes.
        notify(
          `${quoted(t.title)} was not saved: ${r.error.message.replace(/[.\s]+$/, '')}. What it shows since its last save is lost when this page closes.`,
          true,
        );
      }
      if (left === 0 && (refused.has(threadId) || heard.has(threadId))) void settle(threadId);
    });
  }

  /** Saves of each chat sent and not answered yet. */
  const saving = new Map<string, number>();
  /** Each chat's last save refused (another page saved the chat first), until settled. */
  const refused = new Map<string, Thread>();
  /** Chats another page saved while this page's own saves of them were on their way (so are refused). */
  const heard = new Set<string>();
  /** Chats being settled (the saved one on its way). */
  const settling = new Set<string>();
  /** Each chat as the host last had it, as far as this page knows (what it last heard of, or saved). */
  const known = new Map<string, Thread>();
  /** Chats whose last save the closing connection left unanswered: saved again once it is back. */
  const unanswered = new Set<string>();
  /** Chats whose settling the closing connection cut off (the saved one could not be read): settled once it is back. */
  const unsettled = new Set<string>();

  /**
   * The saves and deletes this page made while kvdesk could not be reached, kept in the browser (IndexedDB) until
   * answered, so that a reload or a closed tab meanwhile loses none (pending-changes.ts): by chat, when the last was
   * kept. Where the browser cannot keep one (its storage full, none at all), the window says so at once.
   */
  const pendingStore = indexedDbPending();
  const pages = pagesOnline(() => pageId);
  const kept = new Map<string, number>();
  /** The chats whose last change kept (in `kept`) this browser could not keep: only the page has it. */
  const unkept = new Set<string>();
  /** Chats deleted here whose delete the closing connection left unanswered: made again once it is back. */
  const undeleted = new Map<string, string>();
  let lastStamp = 0;
  /** A time that orders this page's saves and deletes (later ones later). */
  const stamp = () => {
    lastStamp = Math.max(lastStamp + 1, Date.now());
    return lastStamp;
  };

  /** The alert, showing now, that changes are only in this page until kvdesk is back (null: none). */
  let unsavedAlert: string | null = null;
  /** Alerts that a change is not saved yet (only this page has it): added to such an alert showing, not in its place. */
  function notSavedYet(text: string): void {
    const shown = (text: string) => s().notice === text || s().earlierNotices.some((n) => n.text === text);
    const showing = unsavedAlert !== null && shown(unsavedAlert) ? unsavedAlert : null;
    if (showing?.includes(text)) return;
    unsavedAlert = showing ? `${showing} ${text}` : text;
    // In its own place (not kept above as an earlier notice: the longer one says it all).
    if (showing) s().dropNotice(showing);
    notify(unsavedAlert, true);
  }

  /** A chat deleted in another tab before this page heard of it: gone here too, and said (nothing of it is saved). */
  function deletedElsewhere(threadId: string, title: string): void {
    const unsent = s().threads.some((x) => x.id === threadId) && dropThread(threadId);
    notify(
      `${quoted(title)} was deleted in another window or tab before this page's change to it was saved: the change is not kept.${unsent ? ` ${UNSENT}` : ''}`,
    );
  }

  /**
   * The list fields (name, pin) a chat the page has the summary of has changed since (none: {}); null when other
   * fields changed too (the chat is then fetched and saved whole).
   */
  function listFieldsChanged(summary: ThreadSummary, local: Thread): ThreadFields | null {
    const changed = changedSince(summary, local);
    const fields: ThreadFields = {};
    for (const k of Object.keys(changed)) {
      if (k === 'title') fields.title = local.title;
      else if (k === 'pinned') fields.pinned = local.pinned === true;
      else return null;
    }
    return fields;
  }

  /**
   * Changes the list fields of a chat the page has the summary of (updateThread), by a save's rules: kept in the
   * browser while kvdesk cannot be reached, made again when the connection's close left it unanswered.
   */
  function updateFields(threadId: string, title: string, fields: FieldsChange): void {
    const at = stamp();
    if (transport.state !== 'open') keep(threadId, title, at, { fields });
    void api.invoke('updateThread', { id: threadId, ...fields, savedBy: pageId }).then((r) => {
      if (forOtherFolder(r)) return; // kept in the browser for its data folder's kvdesk
      if (!r.ok && r.error.detail?.reason === 'disconnect') {
        // Sent again once the connection is back (saveThread finds what differs from the summary then).
        unanswered.add(threadId);
        if ((kept.get(threadId) ?? 0) < at) keep(threadId, title, at, { fields });
        return;
      }
      forgetKept(threadId, at);
      const summary = s().summaries[threadId];
      const local = s().threads.find((x) => x.id === threadId);
      if (r.ok) {
        // Its summary is now the one saved; a change made here since (on its way) stays in the list.
        if (!summary || !local) return;
        const { revision: _base, ...set } = fields;
        const saved: ThreadSummary = { ...summary, ...set, revision: r.value.revision };
        if (set.pinned === false) delete saved.pinned;
        if ((summary.revision ?? 0) > r.value.revision) return;
        s().receiveSummary(saved);
        const since = changedSince(saved, local);
        if (Object.keys(since).length > 0) s().updateThread(threadId, since);
      } else if (r.error.code === 'SAVE_CONFLICT') {
        notify(
          `${quoted(title)} was changed in another window or tab before its name or pin changed here was saved: it shows that one now. Make the change again if you still want it.`,
        );
        // The list shows the chat as saved (its summary, as the other's save told of it, comes or came).
        if (summary && local) s().receiveSummary(summary);
      } else if (r.error.detail?.reason === 'deleted' || r.error.detail?.reason === 'gone') {
        deletedElsewhere(threadId, title);
      } else {
        notify(`${quoted(title)} was not saved: ${r.error.message.replace(/[.\s]+$/, '')}.`, true);
        // The list shows the chat as its file has it (not pinned or renamed as the refused change would have).
        if (summary && local) s().receiveSummary(summary);
      }
    });
  }

  /**
   * Keeps this page's save of chat `threadId` (its delete: no `thread` nor `fields`) in the browser until kvdesk
   * answers it.
   */
  function keep(
    threadId: string,
    title: string,
    at: number,
    change: { thread?: Thread; fields?: FieldsChange } = {},
  ): void {
    const { thread, fields } = change;
    kept.set(threadId, at);
    const notKept = (why: string) => {
      if (kept.get(threadId) !== at) return; // a later change of it is kept, or it was answered meanwhile
      unkept.add(threadId);
      notSavedYet(
        thread || fields
          ? `Your change to ${quoted(title)} is not saved yet: kvdesk cannot be reached, and this browser could not keep the change until it can (${why}). Keep this page open: it is saved once kvdesk is back; closing or reloading the page loses it.`
          : `${quoted(title)} is not deleted yet: kvdesk cannot be reached, and this browser could not keep the delete until it can (${why}). Keep this page open: it is deleted once kvdesk is back; closing or reloading the page leaves it undeleted.`,
      );
    };
    if (!pendingStore) {
      notKept('it keeps no data for this page');
      return;
    }
    const dataId = transport.dataId;
    const pending: PendingChange = {
      threadId,
      savedBy: pageId,
      owner: pageId,
      at,
      ...(thread ? { thread } : {}),
      ...(fields ? { fields } : {}),
      ...(dataId !== undefined ? { dataId } : {}),
    };
    pendingStore.put(pending).then(
      () => {
        if (kept.get(threadId) === at) unkept.delete(threadId);
      },
      (err: unknown) => notKept(whyNotKept(err)),
    );
  }

  /** This page's change of the chat kept in the browser, if made at or before `upTo`, is answered: let go. */
  function forgetKept(threadId: string, upTo: number): void {
    const at = kept.get(threadId);
    if (at === undefined || at > upTo) return;
    kept.delete(threadId);
    unkept.delete(threadId);
    pendingStore?.forget(pageId, threadId, at).catch(() => {});
  }

  /**
   * Chats this page dropped from its list and asked the host to delete, as they were: put back if it refuses, with
   * their draft; the one that was open (`open`: where its list was scrolled, and the chat opened in its place) opens
   * again, unless another was opened since.
   */
  const deletedHere = new Map<
    string,
    {
      thread: Thread;
      summary?: ThreadSummary;
      known?: Thread;
      draft: Draft;
      open?: { place: ScrollPlace | null; next: string | null };
    }
  >();

  /** Deletes the chat on the host (this page dropped it already); one the connection's close left unanswered, again. */
  function deleteOnHost(id: string, title: string): void {
    const at = stamp();
    if (transport.state !== 'open') keep(id, title, at);
    // The host also closes the thread's session, giving its retained KV back to the budget.
    void api.invoke('deleteThread', { id }).then((r) => {
      if (forOtherFolder(r)) return; // kept in the browser for its data folder's kvdesk
      if (!r.ok && r.error.detail?.reason === 'disconnect') {
        undeleted.set(id, title);
        if ((kept.get(id) ?? 0) < at) keep(id, title, at);
        return;
      }
      forgetKept(id, at);
      const back = deletedHere.get(id);
      deletedHere.delete(id);
      if (r.ok) return;
      // The host still has it: back in the list, in its place (by its activity, as the list orders chats).
      if (back && !s().threads.some((t) => t.id === id)) {
        if (back.known) known.set(id, back.known);
        if (back.summary) s().receiveSummary(back.summary);
        else s().receiveThread(back.thread);
        // What was being written in it, unless something was written there since (another tab's).
        if (drafts().get(id).text === '' && drafts().get(id).files.length === 0) drafts().set(id, back.draft);
        // Open again, as it was, where the person was left (not when they opened another chat meanwhile).
        if (back.open && s().activeThreadId === back.open.next) {
          if (back.open.place) openScrolledTo(id, back.open.place);
          s().selectThread(id);
          restoreModel(id);
          rememberOpen(id);
        }
      }
      report(`Could not delete ${quoted(title)}`, r, true);
    });
  }

  /** Kept changes being made by this page for a page that is gone (by savedBy:threadId). */
  const replaying = new Set<string>();
  /** Whether the window said that changes kept for another data folder's kvdesk wait for it (said once). */
  let saidWaiting = false;

  /**
   * The changes kept in the browser by pages that are gone (reloaded, closed while kvdesk could not be reached): made
   * now, as the page that made them, by the rules its own would have had (refused when another page saved the chat
   * since: kept as a conflicted copy when it said more; not made when the chat was deleted elsewhere).
   */
  async function replayGone(): Promise<void> {
    if (!pendingStore) return;
    let all: PendingChange[];
    try {
      all = await pendingStore.readAll();
    } catch {
      return; // nothing could be kept either: each page said so as it made its changes
    }
    const gone = all.filter((c) => c.savedBy !== pageId && !replaying.has(`${c.savedBy}:${c.threadId}`));
    if (gone.length === 0) return;
    // Only those kept for this kvdesk's data folder: another folder's wait (kept) for a kvdesk of that one.
    const hello = transport.hello ? await transport.hello() : {};
    if (hello === null) return; // the connection closed first: at the next
    const theirs = gone.filter((c) => forThisHost(c, hello.dataId));
    if (theirs.length < gone.length && !saidWaiting) {
      saidWaiting = true;
      notify(
        'Changes made in this browser while kvdesk could not be reached belong to another kvdesk data folder than the one kvdesk runs on now: they are kept, and saved once kvdesk runs on that data folder at this address again.',
      );
    }
    if (theirs.length === 0) return;
    const alive = await pages.alive([...new Set(theirs.map((c) => c.owner).filter((o) => o !== pageId))]);
    for (const c of theirs) {
      if (c.owner !== pageId && (alive.has(c.owner) || !(await pendingStore.claim(c, pageId).catch(() => false)))) {
        continue;
      }
      void replayOne(c);
    }
  }

  async function replayOne(c: PendingChange): Promise<void> {
    const key = `${c.savedBy}:${c.threadId}`;
    replaying.add(key);
    const title = c.thread?.title ?? c.fields?.title ?? s().threads.find((t) => t.id === c.threadId)?.title ?? UNTITLED;
    // A delete: gone from this page at once, as where it was made (its event then finds nothing to tell of).
    if (!c.thread && !c.fields && s().threads.some((t) => t.id === c.threadId)) dropThread(c.threadId);
    const r = c.thread
      ? await api.invoke('saveThread', { ...c.thread, savedBy: c.savedBy })
      : c.fields
        ? await api.invoke('updateThread', { id: c.threadId, ...c.fields, savedBy: c.savedBy })
        : await api.invoke('deleteThread', { id: c.threadId });
    replaying.delete(key);
    // The connection went again, or came back to another data folder's kvdesk: made at the next of its own (kept).
    if (!r.ok && (r.error.detail?.reason === 'disconnect' || forOtherFolder(r))) return;
    if (c.thread && !r.ok && r.error.code === 'SAVE_CONFLICT') {
      // Another page saved the chat since: what the gone page said that the saved one lacks is kept as a copy.
      const opened = await api.invoke('openThread', { id: c.threadId });
      // Deleted since (its event says so): nothing to keep a copy beside. Otherwise read again at the next connection.
      if (!opened.ok && opened.error.detail?.reason !== 'gone') return;
      const saved = opened.ok ? opened.value : undefined;
      if (saved && !holdsAll(saved, c.thread)) {
        const now = Date.now();
        const copy = conflictCopy(c.thread, newId('t', now), newId('m', now), now);
        s().receiveThread(copy);
        saveThread(copy.id);
        notify(
          `${quoted(saved.title)} was changed in another window or tab before a change made while kvdesk could not be reached was saved. Both are kept: theirs as ${quoted(saved.title)}, that one as ${quoted(copy.title)}.`,
        );
      } else if (saved && !sameSettings(saved, c.thread)) {
        notify(
          `${quoted(saved.title)} was changed in another window or tab before a change of its name or settings made while kvdesk could not be reached was saved: it shows that one now. Make the change again if you still want it.`,
        );
      }
    } else if (c.fields && !r.ok && r.error.code === 'SAVE_CONFLICT') {
      notify(
        `${quoted(title)} was changed in another window or tab before a change of its name or pin made while kvdesk could not be reached was saved: it shows that one now. Make the change again if you still want it.`,
      );
    } else if (!r.ok && (r.error.detail?.reason === 'deleted' || (c.fields && r.error.detail?.reason === 'gone'))) {
      notify(
        `${quoted(title)} was deleted in another window or tab before a change to it made while kvdesk could not be reached was saved: the change is not kept.`,
      );
    } else if (!r.ok) {
      notify(
        c.thread || c.fields
          ? `A change to ${quoted(title)} made while kvdesk could not be reached was not saved: ${r.error.message.replace(/[.\s]+$/, '')}.`
          : `Could not delete ${quoted(title)}: ${r.error.message}`,
        true,
      );
    }
    await pendingStore?.forget(c.savedBy, c.threadId, c.at).catch(() => {});
  }
  /**
   * Chats whose saves were refused while a reply is written in them here, another page having added turns: what
   * this page has of each is saved, from then on, as a chat of its own (the copy's id, its messages' ids, when made;
   * `dropped`: the copy was deleted, and is not made again).
   */
  const copying = new Map<string, { id: string; messageId: string; at: number; dropped?: true }>();

  /** Chat `threadId`'s saves go to a copy of it from now on (see copying); the person is told. */
  function startCopy(threadId: string, title: string, mine = title): void {
    const now = Date.now();
    const copy = { id: newId('t', now), messageId: newId('m', now), at: now };
    copying.set(threadId, copy);
    notify(
      `${quoted(title)} was changed in another window or tab while this one's reply was being written. Both are kept: theirs as ${quoted(title)}, this one's as a chat of its own, ${quoted(conflictTitle(mine))}.`,
    );
  }

  /**
   * Saves `thread` (this page's copy of the chat, a reply so far included) as its conflicted copy; once its reply
   * ended, the chat here becomes the one saved.
   */
  function saveCopy(
    threadId: string,
    thread: Thread,
    copy: { id: string; messageId: string; at: number; dropped?: true },
  ): void {
    if (!copy.dropped) {
      const before = s().threads.find((x) => x.id === copy.id);
      const made = conflictCopy(thread, copy.id, copy.messageId, copy.at);
      s().receiveThread({ ...made, ...(before?.revision !== undefined ? { revision: before.revision } : {}) });
      saveThread(copy.id);
    }
    if (liveIn(threadId)) return;
    copying.delete(threadId);
    refused.delete(threadId);
    void settle(threadId);
  }

  /**
   * Another page saved the chat before this page's saves of it reached the host (they were refused, nothing
   * written): the chat here becomes the one saved, and nothing of either is lost. A reply being written in it here
   * goes on in it, merged with the saved one (as when the other's save is heard first), unless the other page added
   * turns: then, as when no reply is being written, this page's copy becomes a chat of its own, beside it, which
   * the person is told of, saved at once and as the reply goes on (a reload meanwhile keeps it); the chat here
   * becomes the saved one at the reply's end. What this page has as it last heard of it (another page's reply,
   * shown as it was then) is not its own to keep; a name or setting changed only here is taken.
   */
  async function settle(threadId: string): Promise<void> {
    if (settling.has(threadId) || copying.has(threadId)) return;
    settling.add(threadId);
    const upTo = stamp();
    const opened = await api.invoke('openThread', { id: threadId });
    settling.delete(threadId);
    if (forOtherFolder(opened)) return; // the page shows another data folder's chats now
    // More of this page's saves went meanwhile: settled once they are answered (the last refused has the most).
    if (saving.has(threadId)) return;
    const mine = refused.get(threadId);
    const local = s().threads.find((t) => t.id === threadId);
    // Deleted meanwhile (its event says so): none saved.
    const gone = !opened.ok && opened.error.detail?.reason === 'gone';
    if (!opened.ok && !gone) {
      // The connection closed on it: settled once it is back (onOpen).
      if (opened.error.detail?.reason === 'disconnect') {
        unsettled.add(threadId);
        return;
      }
      notify(
        `${quoted(local?.title ?? mine?.title ?? UNTITLED)} was saved in another window or tab, and could not be read: ${opened.error.message} Reload the page.`,
      );
      return;
    }
    // Settled below (what is kept of it goes on in the chat, or in a copy saved now): the browser lets it go.
    forgetKept(threadId, upTo);
    const saved = opened.ok ? opened.value : undefined;
    const live = liveIn(threadId);
    if (live && local && saved) {
      const added = saved.messages.some((m) => !local.messages.some((x) => x.id === m.id));
      if (mine && added) {
        // Its turns go on being saved, as a chat of their own, from now on: nothing of them waits in the page.
        startCopy(threadId, saved.title, local.title);
        saveThread(threadId);
        return;
      }
    }
    refused.delete(threadId);
    heard.delete(threadId);
    // Gone meanwhile (deleted: its event says so), or nothing to keep of this page's.
    if (!saved || !local) return;
    const base = known.get(threadId);
    known.set(threadId, saved);
    if (live) {
      s().receiveThread(mergeThread(saved, local, new Set([live])));
      saveThread(threadId);
      return;
    }
    s().receiveThread(saved);
    if (!mine) return;
    if (holdsAll(saved, mine, base)) {
      // Nothing said here is lost. A name or setting changed here that the other left as it was is taken; one
      // the other changed too is the other's (the person is told).
      const taken = takeSettings(saved, mine, base);
      if (taken) {
        s().receiveThread(taken);
        saveThread(threadId);
      } else if (!sameSettings(saved, mine)) {
        notify(
          `${quoted(saved.title)} was changed in another window or tab before this one's change of its name or settings was saved: it shows that one now. Make the change again if you still want it.`,
        );
      }
      return;
    }
    const now = Date.now();
    const copy = conflictCopy(mine, newId('t', now), newId('m', now), now);
    s().receiveThread(copy);
    saveThread(copy.id);
    notify(
      `${quoted(saved.title)} was changed in another window or tab before this one's changes were saved. Both are kept: theirs as ${quoted(saved.title)}, this one's as ${quoted(copy.title)}.`,
    );
  }

  /** At most one save a second of a chat whose reply streams (its text so far); the reply's end saves it whole. */
  const STREAM_SAVE_MS = 1000;
  const streamSaves = new Map<string, { last: number; timer: ReturnType<typeof setTimeout> | undefined }>();
  function saveWhileStreaming(threadId: string): void {
    let entry = streamSaves.get(threadId);
    if (!entry) {
      entry = { last: 0, timer: undefined };
      streamSaves.set(threadId, entry);
    }
    if (entry.timer !== undefined) return;
    const due = entry;
    const run = () => {
      due.timer = undefined;
      due.last = Date.now();
      if (liveIn(threadId)) saveThread(threadId);
    };
    const wait = due.last + STREAM_SAVE_MS - Date.now();
    if (wait <= 0) run();
    else due.timer = setTimeout(run, wait);
  }
  function endStreamSaves(threadId: string): void {
    const entry = streamSaves.get(threadId);
    if (entry?.timer !== undefined) clearTimeout(entry.timer);
    streamSaves.delete(threadId);
  }
  // The page going (a reload, the window closing): the replies streaming are saved as they are now. Every save
  // from then on (the settings' fields taken as the page goes, after this) keeps a reply not yet with the host too.
  if (typeof window !== 'undefined') {
    window.addEventListener('pagehide', () => {
      pageGoing = true;
      const threads = new Set(Object.values(s().live).map((l) => l.threadId));
      for (const id of threads) saveThread(id);
      // A message waiting for its chat to open is not sent now: it is the chat's draft again (a reload keeps it).
      for (const id of [...waitingSends.keys()]) giveBack(id);
    });
    // Back from the back/forward cache: the page stays after all.
    window.addEventListener('pageshow', () => {
      pageGoing = false;
    });
  }

  /**
   * The chat just opened, whose own model (the one its replies went to) the picker takes once the models are
   * known; a chat whose model is not loaded leaves the picker as it is (the chat says so).
   */
  let restoreFor: string | null = null;
  function restoreModel(threadId: string | null): void {
    restoreFor = threadId;
    applyRestore();
  }
  function applyRestore(): void {
    const id = restoreFor;
    const st = s();
    if (id === null || st.models.length === 0) return; // no models known yet: when they are
    restoreFor = null;
    const modelId = pendingPicks.get(id) ?? st.threads.find((t) => t.id === id)?.modelId;
    if (st.activeThreadId !== id || !modelId) return;
    if (modelId !== st.activeModelId && st.models.some((m) => m.id === modelId)) st.setActiveModel(modelId);
  }

  /**
   * Models picked in a chat while its reply runs: that reply goes on with the model it started on (its thread's
   * modelId until it ends), the chat's next turns go to the pick (saved with the chat, and its once the reply ends).
   */
  const pendingPicks = new Map<string, string>();

  /** The model a chat's next turn goes to (turn-model.ts). */
  const modelFor = (threadId: string) => turnModel(s(), threadId, pendingPicks.get(threadId));

  /** The person picks a model: new replies go to it, and it is the open chat's model from now on (as LM Studio's). */
  function pickModel(id: string): void {
    s().setActiveModel(id);
    restoreFor = null; // the pick, not the chat's earlier model
    const t = activeThread();
    if (!t) return;
    if (liveIn(t.id)) {
      if (id === t.modelId) pendingPicks.delete(t.id);
      else pendingPicks.set(t.id, id);
      saveThread(t.id);
      return;
    }
    pendingPicks.delete(t.id);
    if (t.modelId === id) return;
    s().updateThread(t.id, { modelId: id });
    saveThread(t.id);
  }

  /** A chat's reply ended: a model picked in it meanwhile becomes its model. */
  function takePendingPick(threadId: string): void {
    const picked = pendingPicks.get(threadId);
    if (picked === undefined) return;
    pendingPicks.delete(threadId);
    s().updateThread(threadId, { modelId: picked });
  }

  /** The last settings save the closing connection left unanswered: made again once it is back. */
  let settingsUnanswered = false;
  /** Settings saves sent and not answered yet. */
  let settingsOnTheirWay = 0;
  /**
   * The settings' fields this page changed and has not had answered yet: a save writes only these (another page of
   * this kvdesk may have changed another field at the same moment; this page's older value of it must not undo that).
   */
  const settingsChanged = new Set<keyof UiSettings>();
  /** Saves the settings, with `fields` changed by this page (and those changed before that were not answered). */
  function saveSettings(...fields: Array<keyof UiSettings>): void {
    for (const f of fields) settingsChanged.add(f);
    settingsUnanswered = false;
    if (!settingsLoaded) return; // never overwrite saved settings with defaults before they were read
    const changed = [...settingsChanged];
    settingsChanged.clear();
    const { lastThreadId, inspectorOpen, theme, apiServer, presets } = s().ui;
    settingsOnTheirWay++;
    void api
      .invoke('saveSettings', {
        ...(lastThreadId ? { lastThreadId } : {}),
        ...(inspectorOpen !== undefined ? { inspectorOpen } : {}),
        ...(theme ? { theme } : {}),
        ...(apiServer ? { apiServer } : {}),
        ...(presets && presets.length > 0 ? { presets } : {}),
        changed,
      })
      .then((r) => {
        settingsOnTheirWay--;
        // Another data folder's kvdesk on the address now (the page said so, and reads its settings).
        if (forOtherFolder(r)) return;
        // The connection went before kvdesk answered: saved again once it is back (only this page has them).
        if (!r.ok && r.error.detail?.reason === 'disconnect') {
          settingsUnanswered = true;
          for (const f of changed) settingsChanged.add(f);
          notSavedYet(
            'Your settings are not saved yet: kvdesk cannot be reached. They are saved once it is back; closing or reloading this page meanwhile loses the presets, theme and choices made since.',
          );
          return;
        }
        // The page shows them all the same: said at once, as they are gone at the next load.
        if (!r.ok) {
          notify(
            `Your settings were not saved: ${r.error.message.replace(/[.\s]+$/, '')}. The presets, theme and choices made since are lost when this page closes.`,
            true,
          );
        }
      });
  }

  const coalescer = createFrameCoalescer({
    schedule: scheduleFrame,
    apply(flush: Flush) {
      const before = s().live;
      if (flush.batches.length > 0) s().applyFrames(flush.batches, Date.now());
      if (flush.events.length > 0) s().pushEvents(flush.events);
      if (flush.snapshot) s().setSnapshot(flush.snapshot);
      const after = s().live;
      for (const b of flush.batches) {
        const was = before[b.messageId];
        const now = after[b.messageId];
        if (was && !now) {
          cancels.delete(b.messageId);
          endStreamSaves(was.threadId);
          takePendingPick(was.threadId);
          saveThread(was.threadId);
          runAllowedTools(was.threadId, b.messageId);
        } else if (now && now.tokens > 0) saveWhileStreaming(now.threadId);
        // Accepted (queued), or reading its prompt, with nothing written yet: saved as it is, where it is now.
        else if (now && was && now.phase !== was.phase && !now.continues) saveThread(now.threadId);
      }
    },
  });

  // --- host events -------------------------------------------------------------
  api.on('budget', (snap) => coalescer.snapshot(snap));
  api.on('scheduler', (e) => coalescer.event(e));
  api.on('models', (models) => {
    s().setModels(models);
    applyRestore();
  });
  api.on('library', (entries) => s().setLibrary(entries));
  api.on('apiServer', (status) => s().setApiServer(status));
  api.on('downloads', (list) => s().setDownloads(list));
  // Settings another window or page saved: what they share (presets, the API server's, the theme), not this
  // one's view (its thread, its inspector).
  api.on('settings', (saved) => {
    s().setUi({ presets: saved.presets, apiServer: saved.apiServer, theme: saved.theme });
  });
  // A chat another tab or window saved (its summary comes, not its messages): a chat this page has not fetched
  // takes the summary; one it has open (or writes a reply in) is fetched and shown as saved, so that its next save
  // builds on it instead of writing over it; one it has fetched and left goes back to its summary (fetched again
  // when opened).
  api.on('thread', ({ summary, savedBy }) => {
    if (savedBy === pageId) return;
    const id = summary.id;
    // This page's own saves of it on their way are refused (made from the copy before this one): settled when
    // answered, rather than this page's turns written over now.
    if (saving.has(id) || settling.has(id) || refused.has(id)) {
      heard.add(id);
      return;
    }
    const local = s().threads.find((t) => t.id === id);
    if (!local || s().summaries[id]) {
      if (fetching.has(id)) fetchAgain.add(id);
      else s().receiveSummary(summary);
      return;
    }
    if ((local.revision ?? 0) >= (summary.revision ?? 0)) return;
    if (!liveIn(id) && s().activeThreadId !== id && !copying.has(id) && !unanswered.has(id)) {
      known.delete(id);
      s().receiveSummary(summary, true);
      return;
    }
    void fetchSaved(id);
  });

  /** Chats being fetched as another page saved them; those saved again meanwhile (fetched again after). */
  const refreshing = new Set<string>();
  const refreshAgain = new Set<string>();
  async function fetchSaved(id: string): Promise<void> {
    if (refreshing.has(id)) {
      refreshAgain.add(id);
      return;
    }
    refreshing.add(id);
    const r = await api.invoke('openThread', { id });
    refreshing.delete(id);
    if (r.ok) takeSaved(r.value);
    if (refreshAgain.delete(id)) void fetchSaved(id);
  }

  /** Another page's save of a chat this page has, as fetched. */
  function takeSaved(thread: Thread): void {
    const id = thread.id;
    if (saving.has(id) || settling.has(id) || refused.has(id)) {
      heard.add(id);
      return;
    }
    const local = s().threads.find((t) => t.id === id);
    // Gone, or saved here since (this page's save came after the one fetched).
    if (!local || s().summaries[id] || (local.revision ?? 0) > (thread.revision ?? 0)) return;
    known.set(id, thread);
    const live = liveIn(id);
    // Writing a reply in it here: the other's copy, with this page's reply (and anything it has that the other
    // has not) kept, so the reply's end saves both.
    s().receiveThread(live ? mergeThread(thread, local, new Set([live])) : thread);
  }

  /**
   * Messages sent in a chat still being opened (a page opens on its last chat, fetched after the list): sent once its
   * messages are here, in that chat (another opened meanwhile or not). One whose chat cannot be opened, or is
   * deleted, or that is stopped (Esc) goes back to the message box, nothing lost.
   */
  const waitingSends = new Map<string, { content: string; attachments: Attachment[] }>();

  /** The message waiting for the chat to open, no longer waiting (undefined: none). */
  function takeWaiting(threadId: string): { content: string; attachments: Attachment[] } | undefined {
    const waiting = waitingSends.get(threadId);
    waitingSends.delete(threadId);
    s().setSendWaiting(threadId, null);
    return waiting;
  }

  /** The message waiting for the chat, back in its message box (`why`: the notice that says why it was not sent). */
  function giveBack(threadId: string, why?: string): void {
    const waiting = takeWaiting(threadId);
    if (!waiting) return;
    drafts().giveBack(threadId, { text: waiting.content, files: waiting.attachments });
    if (why) notify(why);
  }

  /** Whether the models are known (listModels answered): a turn goes to the chat's own model, restored from them. */
  let modelsHeard = false;

  /** The message waiting for the chat is sent, once its messages are here and the models known. */
  function sendWaiting(threadId: string): void {
    if (!waitingSends.has(threadId) || s().summaries[threadId] || !modelsHeard) return;
    if (!s().threads.some((t) => t.id === threadId)) return void takeWaiting(threadId);
    // Its reply being written in another window or tab: a turn now would be refused as busy.
    if (busyElsewhere(s().snapshot, threadId, Object.values(s().live), s().events)) {
      giveBack(
        threadId,
        'A reply to this chat is being written in another window or tab: your message was not sent (it is back in the message box); send it once that reply ends.',
      );
      return;
    }
    if (!canRun(threadId)) {
      giveBack(threadId); // the notice says why
      return;
    }
    const waiting = takeWaiting(threadId);
    if (!waiting) return;
    if (waiting.attachments.length > 0) drafts().unhold(threadId);
    sendNow(threadId, waiting.content, waiting.attachments);
  }

  /** Chats being fetched (their summary only here), those saved meanwhile elsewhere, and those to save once here. */
  const fetching = new Set<string>();
  const fetchAgain = new Set<string>();
  const saveOnFetch = new Set<string>();

  /**
   * Fetches a chat this page has only the summary of (it is opened, or changed from the list): its messages come
   * whole; a name or setting changed here meanwhile (a pin, a rename) is kept, and saved.
   */
  function fetchThread(id: string): void {
    if (!s().summaries[id] || fetching.has(id)) return;
    fetching.add(id);
    s().setOpenFailed(id, null);
    void api.invoke('openThread', { id }).then((r) => {
      fetching.delete(id);
      const summary = s().summaries[id];
      const local = s().threads.find((t) => t.id === id);
      if (!summary || !local) {
        // Here whole meanwhile (another way): a message waiting for it goes now.
        if (local) sendWaiting(id);
        return;
      }
      if (!r.ok) {
        // Fetched again when the connection is back (a change made meanwhile, a pin, is saved then).
        if (r.error.detail?.reason === 'disconnect') return;
        saveOnFetch.delete(id);
        // Deleted: its event says so; a message waiting for it goes back to the message box now, with the chat.
        if (r.error.detail?.reason === 'gone') {
          if (waitingSends.has(id)) deletedThere(id);
          return;
        }
        const unsent = waitingSends.has(id) ? ` ${UNSENT}` : '';
        giveBack(id);
        notify(`${quoted(local.title)} could not be opened: ${r.error.message}${unsent}`);
        // The chat's pane says so too, rather than "Opening the chat…" for good (opened again, it is tried again).
        s().setOpenFailed(id, r.error.message);
        return;
      }
      // A save elsewhere heard meanwhile: its summary is not this page's change.
      const again = fetchAgain.delete(id);
      const changed = again ? {} : changedSince(summary, local);
      const thread: Thread = { ...r.value, ...changed };
      known.set(id, r.value);
      if (thread.modelId) sessionModel.set(id, thread.modelId);
      s().receiveThread(thread);
      if (s().activeThreadId === id) restoreModel(id);
      if (saveOnFetch.delete(id) || Object.keys(changed).length > 0) saveThread(id);
      // Saved elsewhere while it was on its way: what was fetched may be from before that save (a message waiting
      // for the chat goes after the one saved, once that is here).
      if (again) void fetchSaved(id).then(() => sendWaiting(id));
      else sendWaiting(id);
    });
  }

  /** The fields of a listed chat changed here since its summary came (a pin, a rename from the list). */
  function changedSince(summary: ThreadSummary, local: Thread): Partial<Thread> {
    const changed: Record<string, unknown> = {};
    const keys = new Set([...Object.keys(summary), ...Object.keys(local)]);
    for (const k of keys) {
      if (k === 'messages' || k === 'bytes' || k === 'revision' || k === 'id') continue;
      const a = (summary as Record<string, unknown>)[k];
      const b = (local as Record<string, unknown>)[k];
      if (JSON.stringify(a) !== JSON.stringify(b)) changed[k] = b;
    }
    return changed as Partial<Thread>;
  }

  // The chat opened (picked, at load, in place of one deleted) is fetched when only its summary is here.
  store.subscribe((now, before) => {
    if (now.activeThreadId !== before.activeThreadId && now.activeThreadId) fetchThread(now.activeThreadId);
  });

  api.on('threadDeleted', ({ id }) => deletedThere(id));

  /** A chat deleted in another window or tab: gone here too (the notice says so where the person could miss it). */
  function deletedThere(id: string): void {
    const gone = s().threads.find((t) => t.id === id);
    if (!gone) return;
    const wasOpen = s().activeThreadId === id;
    // Deleted elsewhere: a reply this page writes in it stops, and nothing of it is saved again.
    const unsent = dropThread(id);
    // The chat open here: another takes its place, which the person must not take for it.
    if (wasOpen || unsent) {
      const where = wasOpen ? ' you had open' : '';
      notify(
        `The chat ${quoted(gone.title)}${where} was deleted in another window or tab.${unsent ? ` ${UNSENT}` : ''}`,
      );
    }
  }

  async function refreshHostState(replaceSnapshot: boolean): Promise<void> {
    const [models, snap, library, server, downloads] = await Promise.all([
      api.invoke('listModels', {}),
      api.invoke('getSnapshot', {}),
      api.invoke('listLibrary', {}),
      api.invoke('apiServerStatus', {}),
      api.invoke('listDownloads', {}),
    ]);
    if (models.ok) {
      s().setModels(models.value);
      applyRestore();
    }
    // Answered (the models, or why not): a message waiting for its chat's model goes once the chat is here.
    if (models.ok || models.error.detail?.reason !== 'disconnect') {
      modelsHeard = true;
      for (const id of [...waitingSends.keys()]) sendWaiting(id);
    }
    if (downloads.ok) s().setDownloads(downloads.value);
    if (snap.ok) s().setSnapshot(snap.value, replaceSnapshot);
    if (library.ok) s().setLibrary(library.value);
    if (server.ok) s().setApiServer(server.value);
  }

  /** The chats and settings are not read yet: the page's first connection closed before they came (read at the next). */
  let persistedUnread = false;

  async function loadPersisted(): Promise<void> {
    const [threads, settings] = await Promise.all([api.invoke('listThreads', {}), api.invoke('getSettings', {})]);
    const lost = (r: typeof threads | typeof settings) => !r.ok && r.error.detail?.reason === 'disconnect';
    // Not "could not read saved chats" with an empty list for good: read once the connection is there.
    persistedUnread = lost(threads) || lost(settings);
    if (persistedUnread) return;
    const ui = settings.ok ? settings.value : {};
    if (settings.ok) {
      s().setUi({ ...ui, inspectorOpen: ui.inspectorOpen ?? true });
      settingsLoaded = true;
    }
    if (threads.ok) {
      // The drafts shown (and pruned) are those of the data folder these chats came from.
      drafts().setFolder(transport.dataId);
      s().loadThreads(threads.value, ui.lastThreadId);
      for (const t of threads.value) if (t.modelId) sessionModel.set(t.id, t.modelId);
      forgetDrafts();
      const open = s().activeThreadId;
      if (open) fetchThread(open);
      restoreModel(open);
    } else {
      notify(`Could not read saved chats: ${threads.error.message}`);
      s().loadThreads([]);
    }
    // Saved data kvdesk could not use (a chat file left out, settings moved aside or unreadable; each file named with
    // what to do), and a page loaded again after its process was gone (window.ts): said together in the notice that
    // stays until dismissed.
    const stays: string[] = [];
    if (!settings.ok) stays.push(`Could not read your settings: ${settings.error.message}`);
    else if (threads.ok) {
      const problems = await api.invoke('dataProblems', {});
      if (problems.ok && problems.value.length > 0) {
        const more = problems.value.length - 1;
        stays.push(
          `Some saved data could not be used: ${problems.value[0]?.replace(/[.\s]+$/, '')}${more > 0 ? ` (and ${more} more: see kvdesk's log)` : ''}.`,
        );
      }
    }
    if (location.hash === RECOVERED_FRAGMENT) {
      history.replaceState(null, '', location.pathname + location.search);
      stays.unshift(
        "kvdesk's window stopped unexpectedly and was loaded again. A reply that was streaming stopped there; its text is saved up to its last second.",
      );
    }
    if (stays.length > 0) s().setNotice(stays.join(' '), true);
  }

  s().setTransport(api.transport);
  s().setConnection(transport.state);
  let firstOpen = true;
  const RECONNECTING = 'Connection to kvdesk lost; reconnecting…';
  const onOpen = () => {
    const replace = !firstOpen;
    // Changes kept in the browser by pages gone while kvdesk could not be reached: made once the chats are read.
    if (firstOpen || persistedUnread) void loadPersisted().then(replayGone);
    else void replayGone();
    firstOpen = false;
    for (const id of [...unanswered]) {
      unanswered.delete(id);
      saveThread(id);
    }
    for (const [id, title] of [...undeleted]) {
      undeleted.delete(id);
      deleteOnHost(id, title);
    }
    if (settingsUnanswered) saveSettings();
    // What only this page had is being saved now: the alert that said so goes.
    if (unsavedAlert !== null) s().dropNotice(unsavedAlert);
    unsavedAlert = null;
    for (const id of [...unsettled]) {
      unsettled.delete(id);
      void settle(id);
    }
    // The fetches the closing connection cut off: the open chat's, and those of chats changed from the list.
    const open = s().activeThreadId;
    if (replace && open) fetchThread(open);
    if (replace) for (const id of [...saveOnFetch, ...waitingSends.keys()]) fetchThread(id);
    void refreshHostState(replace);
    // Back: the notice that said the connection was lost goes; one said since (a save the close ended) stays.
    s().dropNotice(RECONNECTING);
  };
  /**
   * The kvdesk now on the page's address keeps another data folder than the one the page's chats came from (it was
   * started again with another --data-dir, or another kvdesk took the port): nothing the page made for the one
   * before is sent to it (the transport ended what waited, unsent). What the browser keeps of those changes stays
   * there, for that folder's kvdesk; the page takes a new id, so that they are a gone page's, made by whichever page
   * of this address meets that kvdesk again (this one too). The page forgets the other folder's chats and reads this
   * one's (onOpen, which follows), and says so.
   */
  transport.onOtherFolder?.(() => {
    const waiting = [...kept.keys()].filter((id) => !unkept.has(id)).length;
    const lost = unkept.size;
    const settingsLost = settingsUnanswered || settingsOnTheirWay > 0;
    pageId = newPageId();
    for (const set of [kept, unkept, unanswered, undeleted, unsettled, refused, heard, settling, known, saving]) {
      set.clear();
    }
    for (const set of [copying, fetching, fetchAgain, saveOnFetch, refreshing, refreshAgain, pendingPicks]) set.clear();
    for (const set of [sessionModel, madeAs, carriedFrom, cancels]) set.clear();
    for (const id of [...streamSaves.keys()]) endStreamSaves(id);
    settingsUnanswered = false;
    settingsChanged.clear();
    settingsLoaded = false; // not saved over this folder's before they are read
    restoreFor = null;
    saidWaiting = true; // said here
    persistedUnread = true; // read at the open that follows
    // A message waiting for its chat (of the folder before) to open is its draft again, kept with the others.
    for (const id of [...waitingSends.keys()]) giveBack(id);
    // The drafts of the folder before stay in the browser for it (shown again when the page meets its kvdesk).
    const draftsKept = drafts().count();
    drafts().setFolder(transport.dataId);
    s().forgetThreads();
    const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
    const parts = ['This kvdesk keeps another data folder than the one this page showed: it shows its chats now.'];
    if (waiting > 0) {
      parts.push(
        `${count(waiting, 'unsaved change made here is', 'unsaved changes made here are')} kept in this browser for the data folder ${waiting === 1 ? 'it was' : 'they were'} made in, and saved once kvdesk runs on that folder at this address again.`,
      );
    }
    if (lost > 0) {
      parts.push(
        `${count(lost, 'change', 'changes')} this browser could not keep ${lost === 1 ? 'is' : 'are'} not saved in either folder.`,
      );
    }
    if (draftsKept > 0) {
      parts.push(
        `${count(draftsKept, 'unsent draft', 'unsent drafts')} written here ${draftsKept === 1 ? 'is' : 'are'} kept in this browser for the data folder ${draftsKept === 1 ? 'it was' : 'they were'} written in, and shown again once kvdesk runs on that folder at this address.`,
      );
    }
    if (settingsLost) parts.push('Settings changed here since kvdesk was last reached are not saved.');
    s().setNotice(parts.join(' '), true);
  });
  transport.onConnection((state) => {
    s().setConnection(state);
    if (state === 'open') onOpen();
    else if (state === 'reconnecting') notify(RECONNECTING);
  });
  // A socket kvdesk refuses (this page's origin, its token) says only that it is reconnecting: why is asked and said
  // until it opens.
  let refusal: string | null = null;
  transport.onRefused?.((message) => {
    refusal = `kvdesk refuses this page's connection, so nothing here works yet: ${message}`;
    s().setNotice(refusal, true);
  });
  transport.onConnection((state) => {
    if (state !== 'open' || refusal === null) return;
    if (s().stickyNotice === refusal) s().setNotice(null, true);
    refusal = null;
  });
  // A page kept open while kvdesk was updated runs the old build against the new host: it is said (a notice that
  // stays) until the page is reloaded.
  transport.onOutdated?.(() =>
    s().setNotice(
      'kvdesk was updated since this page opened: reload the page to use this version (what you are writing in each chat is kept).',
      true,
    ),
  );
  // Calls queue until the socket opens, so the first load can start right away.
  onOpen();

  // --- chat --------------------------------------------------------------------
  function activeThread(): Thread | undefined {
    const st = s();
    return st.threads.find((t) => t.id === st.activeThreadId);
  }

  function rememberOpen(id: string | null): void {
    s().setUi({ lastThreadId: id ?? undefined });
    saveSettings('lastThreadId');
  }

  /** How each chat made in this page was set up when it was made (chatSetup), to tell an untouched one. */
  const madeAs = new Map<string, string>();
  /** The title of the chat each new one took its settings from (when it took any). */
  const carriedFrom = new Map<string, string>();

  /**
   * A chat with no messages whose settings (and name) are as they were made — for a saved one of an earlier page,
   * none at all: a new chat would be the same, so the new-chat action opens it instead of adding another.
   */
  function untouched(t: Thread): boolean {
    if (t.messages.length > 0 || liveIn(t.id) || s().summaries[t.id]) return false;
    const made = madeAs.get(t.id);
    return made !== undefined ? made === chatSetup(t) : t.title === UNTITLED && chatSetup(t) === chatSetup(bare(t));
  }
  const bare = (t: Thread): Thread => ({
    id: t.id,
    title: UNTITLED,
    createdAt: t.createdAt,
    updatedAt: t.updatedAt,
    messages: [],
  });

  function newThread(): Thread {
    const now = Date.now();
    const active = activeThread();
    if (active && untouched(active)) {
      s().setView('chat');
      s().setEditing(null);
      s().chatMade();
      return active;
    }
    const thread: Thread = {
      id: newId('t', now),
      title: UNTITLED,
      createdAt: now,
      updatedAt: now,
      messages: [],
      ...(active ? carriedSettings(active) : {}),
      // The preset those settings are, still named (its picker shows it, as in the chat they came from).
      ...(active?.preset ? { preset: active.preset } : {}),
    };
    s().addThread(thread);
    s().chatMade();
    madeAs.set(thread.id, chatSetup(thread));
    if (active && Object.keys(carriedSettings(active)).length > 0) carriedFrom.set(thread.id, active.title);
    s().setView('chat');
    restoreFor = null; // a new chat goes to the model picked now
    saveThread(thread.id);
    rememberOpen(thread.id);
    return thread;
  }

  function liveIn(threadId: string): string | undefined {
    return Object.values(s().live).find((l) => l.threadId === threadId)?.messageId;
  }

  /** The model a turn goes to: the one picked, else the default (first loaded), as the host resolves it. */
  function modelOf(modelId: string | null): ModelInfo | undefined {
    const models = s().models;
    return modelId ? models.find((m) => m.id === modelId) : (models.find((m) => m.isDefault) ?? models[0]);
  }

  /** Starts a turn: the store gets the new messages, the host gets the request, frames flow back through the coalescer. */
  function runTurn(threadId: string, append: StoredMessage[], keepBefore?: string, replaces?: string): boolean {
    if (!canRun(threadId)) return false;
    const modelId = modelFor(threadId);
    const assistantId = newId('m');
    s().startReply({
      threadId,
      assistantId,
      append,
      keepBefore,
      ...(replaces ? { replaces } : {}),
      now: Date.now(),
      ...(modelId ? { modelId } : {}),
    });
    const thread = s().threads.find((t) => t.id === threadId);
    if (!thread) return false;
    saveThread(threadId); // the person's message is kept even if the reply never comes
    const history = thread.messages.filter((m) => m.id !== assistantId);
    const servers = thread.mcpServers ?? [];
    if (servers.length === 0) {
      generateInto(threadId, assistantId, buildChatRequest(thread, history, modelId, modelOf(modelId)?.spec), modelId);
      return true;
    }
    // The chat's MCP tools: their servers started (the first time), their tools offered to the model.
    void (async () => {
      const status = await api.invoke('mcpStart', { servers });
      // The chat deleted meanwhile: nothing to send.
      if (!s().live[assistantId]) return;
      if (s().live[assistantId]?.stopping) {
        s().failReply(assistantId, { code: 'CANCELLED', message: 'stopped' });
        return;
      }
      const tools = status.ok ? chatTools(status.value, servers) : undefined;
      if (!status.ok) notify(`The chat's tools are not offered: ${status.error.message}`);
      // One notice for them all (one each would leave only the last on screen).
      const missing = tools?.missing ?? [];
      if (missing.length === 1)
        notify(`The tools of "${isolated(missing[0]?.server ?? '')}" are not offered: ${missing[0]?.why}`);
      if (missing.length > 1) {
        notify(`These tools are not offered: ${missing.map((m) => `"${isolated(m.server)}": ${m.why}`).join('; ')}`);
      }
      if (tools) s().setToolRoutes(threadId, assistantId, tools.routes);
      // Must call a tool in reply to the person; after a tool's answer, the model may reply in words.
      const required = thread.toolsRequired === true && history.at(-1)?.role === 'user';
      const request = buildChatRequest(thread, history, modelId, modelOf(modelId)?.spec, {
        definitions: tools?.definitions ?? [],
        required,
      });
      generateInto(threadId, assistantId, request, modelId);
    })();
    return true;
  }

  /**
   * A reply that ended with calls of tools the chat runs without asking: they run (the others wait for the
   * person), unless the model has called tools this many times since the person last wrote (a loop of calls).
   */
  function runAllowedTools(threadId: string, messageId: string): void {
    const thread = s().threads.find((t) => t.id === threadId);
    if (!thread) return;
    const { calls, capped } = autoRunCalls(thread, messageId);
    if (capped) notify(`The model has called tools ${MAX_AUTO_ROUNDS} times in a row: its next calls wait for you.`);
    for (const call of calls) void answerToolCall(threadId, messageId, call.id, true);
  }

  /** Runs the call, and from now on every call of that tool in this chat without asking. */
  async function alwaysRunTool(threadId: string, messageId: string, callId: string): Promise<void> {
    const thread = s().threads.find((t) => t.id === threadId);
    const message = thread?.messages.find((m) => m.id === messageId);
    const call = message?.toolCalls?.find((c) => c.id === callId);
    const route = call ? message?.toolRoutes?.[call.name] : undefined;
    if (!thread || !route) return;
    const key = toolKey(route);
    if (!(thread.toolsAllowed ?? []).includes(key)) {
      s().updateThread(threadId, { toolsAllowed: [...(thread.toolsAllowed ?? []), key] });
      saveThread(threadId);
    }
    await answerToolCall(threadId, messageId, callId, true);
  }

  async function answerToolCall(threadId: string, messageId: string, callId: string, run: boolean): Promise<void> {
    const find = () => {
      const thread = s().threads.find((t) => t.id === threadId);
      const message = thread?.messages.find((m) => m.id === messageId);
      return { thread, message, call: message?.toolCalls?.find((c) => c.id === callId) };
    };
    const { message, call } = find();
    // Once: a call running (or answered) is not run again.
    if (!message || !call || liveIn(threadId) || s().toolRuns[callId]) return;
    let content = SKIPPED_ANSWER;
    let isError = true;
    if (run) {
      const route = message.toolRoutes?.[call.name];
      if (!route) content = `This chat has no tool named ${call.name}.`;
      else {
        s().setToolRun(callId, threadId);
        try {
          const r = await api.invoke('mcpCall', { server: route.server, tool: route.tool, arguments: call.arguments });
          content = r.ok ? r.value.content : r.error.message;
          isError = r.ok ? r.value.isError : true;
        } finally {
          s().setToolRun(callId, null);
        }
      }
    }
    if (run) content = await fitAnswer(threadId, messageId, call, content);
    /** The messages after the reply now (undefined when the chat or the reply is gone). */
    const afterReply = () => {
      const messages = find().thread?.messages ?? [];
      const at = messages.findIndex((m) => m.id === messageId);
      return at < 0 ? undefined : messages.slice(at + 1);
    };
    // The chat deleted, or gone on past the call, while the tool ran: its answer has no place.
    const since = afterReply();
    if (!since || since.some((m) => m.role !== 'tool')) {
      if (since) notify(`${isolated(call.name)} answered after the chat went on: its answer is not added.`);
      return;
    }
    s().addToolResult(threadId, {
      id: newId('m'),
      role: 'tool',
      content,
      toolCallId: call.id,
      toolName: call.name,
      createdAt: Date.now(),
      ...(isError ? { isError: true } : {}),
    });
    saveThread(threadId);
    // Every call of the reply answered (only answers after it): the model reads them and goes on.
    const answered = new Set((afterReply() ?? []).map((m) => m.toolCallId));
    if ((message.toolCalls ?? []).every((c) => answered.has(c.id))) runTurn(threadId, []);
  }

  /** The share of the model's context a tool's answer may bring the prompt to: the rest is the reply's room. */
  const ANSWER_FILL = 0.75;

  /**
   * A tool's answer cut to what the model can read: the conversation with it must leave the reply room in the
   * model's context (a longer one would make every later turn of the chat a refusal, with nothing the person can
   * shorten). Measured with the model's own tokenizer; the cut says so in the answer.
   */
  async function fitAnswer(threadId: string, messageId: string, call: ToolCall, content: string): Promise<string> {
    const thread = s().threads.find((t) => t.id === threadId);
    const modelId = modelFor(threadId);
    const spec = modelOf(modelId)?.spec;
    if (!thread || !spec) return content;
    const at = thread.messages.findIndex((m) => m.id === messageId);
    // The prompt of the next turn: the conversation through this reply and the answers it has, then this one.
    const upTo = thread.messages
      .slice(0, at + 1)
      .concat(thread.messages.slice(at + 1).filter((m) => m.role === 'tool'));
    // The tools the next turn offers are part of its prompt too (their definitions can run to thousands of tokens).
    const servers = thread.mcpServers ?? [];
    const status = servers.length > 0 ? await api.invoke('mcpStatus', {}) : undefined;
    const definitions = status?.ok ? chatTools(status.value, servers).definitions : [];
    const measure = async (text: string) => {
      const answer: StoredMessage = { id: 'answer', role: 'tool', content: text, toolCallId: call.id, createdAt: 0 };
      // The whole conversation, as `refuse` measures it (drop-oldest would hide what the answer costs).
      const request = buildChatRequest({ ...thread, contextOverflow: 'refuse' }, [...upTo, answer], modelId, spec, {
        definitions,
        required: false,
      });
      const r = await api.invoke('measurePrompt', request);
      return r.ok ? r.value.promptTokens : undefined;
    };
    const limit = Math.floor(spec.contextLength * ANSWER_FILL);
    const whole = await measure(content);
    if (whole === undefined || whole <= limit) return content;
    const without = await measure('');
    const noteOf = (keep: number) =>
      `[kvdesk cut this answer to ${keep.toLocaleString('en-US')} of its ${content.length.toLocaleString('en-US')} characters: the model's context is ${spec.contextLength.toLocaleString('en-US')} tokens]`;
    // The note that says so takes room too.
    const noted = await measure(`\n${noteOf(content.length)}`);
    const answerTokens = whole - (without ?? whole);
    const room = limit - (noted ?? without ?? limit);
    const keep = answerTokens > 0 && room > 0 ? Math.floor((content.length * room) / answerTokens) : 0;
    return keep > 0 ? `${content.slice(0, keep)}\n${noteOf(keep)}` : noteOf(0);
  }

  /** Whether a turn may start in the chat now; if not, the notice says why. */
  function canRun(threadId: string): boolean {
    if (s().summaries[threadId]) {
      const failed = s().openFailed[threadId];
      fetchThread(threadId);
      notify(
        failed !== undefined
          ? `This chat could not be opened (${failed}): nothing can be sent in it until it is.`
          : 'This chat is still being opened: try again once its messages show.',
      );
      return false;
    }
    if (liveIn(threadId)) {
      notify('This chat is still replying. Stop it first (Esc).');
      return false;
    }
    if (Object.values(s().toolRuns).includes(threadId)) {
      notify('A tool of this chat is running: wait for its answer (the model reads it, then goes on).');
      return false;
    }
    return true;
  }

  /**
   * The person wrote on instead of choosing Run or Skip: the calls of the last reply still waiting are answered
   * as skipped (as Skip answers them), so the conversation stays one the model, and the host, can read.
   */
  function skipWaitingCalls(threadId: string): void {
    const messages = s().threads.find((t) => t.id === threadId)?.messages ?? [];
    const at = messages.findLastIndex((m) => m.role !== 'tool');
    const reply = messages[at];
    if (reply?.role !== 'assistant' || !reply.toolCalls?.length) return;
    const answered = new Set(messages.slice(at + 1).map((m) => m.toolCallId));
    for (const call of reply.toolCalls) {
      if (answered.has(call.id)) continue;
      s().addToolResult(threadId, {
        id: newId('m'),
        role: 'tool',
        content: SKIPPED_ANSWER,
        toolCallId: call.id,
        toolName: call.name,
        createdAt: Date.now(),
        isError: true,
      });
    }
  }

  /** Sends a turn's request; frames go to the reply's message. */
  function generateInto(threadId: string, messageId: string, request: GenerateRequest, modelId: string | null): void {
    const start = () => {
      const cancel = api.generate(request, (frame) => {
        // This page's own request: once its reply ends here, the budget may still list it for a moment.
        if (frame.type === 'accepted') noteOwnRequest(frame.requestId);
        if (request.continueFinal && frame.type === 'error' && frame.error.code !== 'CANCELLED') {
          notify(`Could not continue the reply: ${frame.error.message}`);
        }
        coalescer.frame(messageId, frame);
      });
      cancels.set(messageId, cancel);
    };
    // A host session is bound to the model it was built with: switching models starts it over.
    const previous = sessionModel.get(threadId);
    if (modelId) sessionModel.set(threadId, modelId);
    if (previous && modelId && previous !== modelId) {
      void api.invoke('closeSession', { sessionId: threadId }).then(start);
    } else start();
  }

  /** Continues the thread's last reply where it stopped (cut by max tokens, or stopped): its text goes on. */
  function continueReply(threadId: string): void {
    if (liveIn(threadId)) return;
    const thread = s().threads.find((t) => t.id === threadId);
    const last = thread?.messages[thread.messages.length - 1];
    if (!thread || last?.role !== 'assistant' || !last.content || last.stats?.error || last.format === 'json') return;
    // A reply that called tools goes on once they answer.
    if (last.toolCalls?.length) return;
    const modelId = modelFor(threadId);
    s().resumeReply({ threadId, messageId: last.id, now: Date.now(), ...(modelId ? { modelId } : {}) });
    const request = buildChatRequest(thread, thread.messages, modelId, modelOf(modelId)?.spec);
    generateInto(threadId, last.id, { ...request, continueFinal: true }, modelId);
  }

  function send(text: string, attachments: Attachment[] = []): boolean {
    const content = text.trim();
    if (!content && attachments.length === 0) return false;
    const thread = activeThread() ?? newThread();
    s().setView('chat');
    // Its messages still on their way (or their fetch failed: tried again): sent once they are here.
    if (s().summaries[thread.id]) {
      if (waitingSends.has(thread.id)) {
        notify('Your message before this one is sent once this chat is open: send this one after its reply.');
        return false;
      }
      waitingSends.set(thread.id, { content, attachments });
      drafts().hold(thread.id, attachments);
      s().setSendWaiting(thread.id, content);
      fetchThread(thread.id);
      return true;
    }
    if (!canRun(thread.id)) return false;
    return sendNow(thread.id, content, attachments);
  }

  /** The person's message, and the turn that answers it. */
  function sendNow(threadId: string, content: string, attachments: Attachment[]): boolean {
    skipWaitingCalls(threadId);
    return runTurn(threadId, [
      {
        id: newId('m'),
        role: 'user',
        content,
        createdAt: Date.now(),
        ...(attachments.length > 0 ? { attachments } : {}),
      },
    ]);
  }

  function stop(threadId?: string): void {
    const id = threadId ?? s().activeThreadId;
    if (!id) return;
    // A message waiting for the chat to open: not sent, back in the message box.
    giveBack(id);
    const messageId = liveIn(id);
    if (!messageId) return;
    s().markStopping(messageId);
    cancels.get(messageId)?.();
  }

  function regenerate(threadId: string): void {
    const thread = s().threads.find((t) => t.id === threadId);
    if (!thread) return;
    // A reply to tools' answers: that reply alone is written again (the calls and their answers stay).
    const last = thread.messages.at(-1);
    if (last?.role === 'assistant' && thread.messages.at(-2)?.role === 'tool') {
      runTurn(threadId, [], last.id, last.id);
      return;
    }
    // Keep everything up to the last user message; the reply(ies) after it are generated again.
    let lastUser = -1;
    thread.messages.forEach((m, i) => {
      if (m.role === 'user') lastUser = i;
    });
    const after = thread.messages[lastUser + 1];
    if (lastUser < 0) return;
    // The reply it replaces stays as another version of the new one.
    runTurn(threadId, [], after?.id, after?.role === 'assistant' ? after.id : undefined);
  }

  /**
   * A new chat with this one's settings and its first `count` messages (a reply still streaming is not part of
   * what was said yet); it opens.
   */
  function branchWith(t: Thread, count: number): Thread {
    const live = s().live;
    const now = Date.now();
    const branch: Thread = {
      ...t,
      id: newId('t', now),
      title: branchTitle(t.title),
      createdAt: now,
      updatedAt: now,
      messages: t.messages
        .slice(0, count)
        .filter((m) => live[m.id] === undefined)
        .map((m, i) => ({ ...m, id: `${newId('m', now)}-${i}` })),
    };
    s().addThread(branch);
    s().chatMade();
    s().setView('chat');
    saveThread(branch.id);
    rememberOpen(branch.id);
    return branch;
  }

  function editAndResend(threadId: string, messageId: string, text: string): void {
    const thread = s().threads.find((t) => t.id === threadId);
    const original = thread?.messages.find((m) => m.id === messageId);
    const content = text.trim();
    if (!thread || !original || !content) return;
    runTurn(threadId, [{ ...original, id: newId('m'), content, createdAt: Date.now() }], messageId);
  }

  function editReply(threadId: string, messageId: string, text: string): void {
    // Not while the thread writes: the reply being written, or the turn after it, would not read the change.
    if (liveIn(threadId)) return;
    s().editReply(threadId, messageId, text, Date.now());
    saveThread(threadId);
  }

  // --- models ------------------------------------------------------------------
  async function refreshModels(): Promise<ModelInfo[] | undefined> {
    const r = await api.invoke('listModels', {});
    if (r.ok) s().setModels(r.value);
    return r.ok ? r.value : undefined;
  }

  /** The upload in flight, to cancel. */
  let uploading: AbortController | null = null;

  async function importFiles(name: string, files: DroppedFile[]): Promise<void> {
    const bytes = files.reduce((n, f) => n + f.data.size, 0);
    s().setPackageImport({ name, status: 'uploading', files: files.length, bytes });
    s().setView('models');
    uploading?.abort();
    const control = new AbortController();
    uploading = control;
    // The bytes sent, shown at most every 100 ms (a big package reports thousands of times).
    let shownAt = 0;
    const onProgress = (sent: number, total: number) => {
      const now = performance.now();
      if (now - shownAt < 100 && sent < total) return;
      shownAt = now;
      const current = s().packageImport;
      if (uploading !== control || current?.status !== 'uploading') return;
      s().setPackageImport({ ...current, sent, total });
    };
    // Checked and into the library, not loaded: its card shows what it is and what it takes, and loads it as the
    // person picks (backend, variant, context), as a folder dropped in the Electron window does.
    const r = await api.importPackage(
      { kind: 'files', name, files },
      { onProgress, signal: control.signal, load: false },
    );
    // Another upload took its place (a drop while this one ran): the card is that one's now.
    const superseded = uploading !== control;
    if (!superseded) uploading = null;
    if (control.signal.aborted) {
      // Cancelled: its card goes.
      if (!superseded && s().packageImport?.status === 'uploading') s().setPackageImport(null);
      return;
    }
    if (superseded) return;
    if (r.ok) {
      s().announce(validatedAnnouncement(r.value.spec, s().snapshot?.devices ?? []));
      s().setPackageImport({
        name,
        status: 'ready',
        spec: r.value.spec,
        path: r.value.root,
        uploaded: true,
        ...(r.value.existing ? { existing: true } : {}),
        ...(r.value.nameTaken ? { nameTaken: true } : {}),
        files: files.length,
        bytes,
      });
    } else {
      s().setPackageImport({ name, status: 'error', error: packageError(r.error), files: files.length, bytes });
    }
  }

  /** The backend report, asked for once. */
  let backends: Promise<BackendInfo[]> | null = null;

  async function importPath(name: string, path: string, trustInstalled = false): Promise<void> {
    const trusted = trustInstalled ? { trusted: true } : {};
    s().setPackageImport({ name, status: 'reading', path, ...trusted });
    s().setView('models');
    const r = await api.invoke('checkPackage', { path, ...(trustInstalled ? { trustInstalled } : {}) });
    if (!r.ok) {
      s().setPackageImport({ name, status: 'error', path, error: packageError(r.error), ...trusted });
    } else if (!r.value.ok) {
      s().setPackageImport({ name, status: 'error', path, error: r.value.error, ...trusted });
    } else {
      s().announce(validatedAnnouncement(r.value.spec, s().snapshot?.devices ?? []));
      s().setPackageImport({ name, status: 'ready', path, spec: r.value.spec, ...trusted });
    }
  }

  async function loadPackage(path: string, how: LoadModelRequest = {}): Promise<string | null> {
    return (await loadPackageAs(path, how)).said;
  }

  /** A load: what the card's template editor is to say (a refusal of the person's template), and whether it loaded. */
  async function loadPackageAs(path: string, how: LoadModelRequest): Promise<{ said: string | null; id?: string }> {
    // Loaded again: its card shows it busy under its id too.
    const loaded = s().models.find((m) => m.spec.root === path);
    s().setModelBusy(path, true);
    if (loaded) s().setModelBusy(loaded.id, true);
    const r = await api.invoke('loadModel', { path, ...how });
    s().setModelBusy(path, false);
    if (loaded) s().setModelBusy(loaded.id, false);
    if (!r.ok) {
      const current = s().packageImport;
      // A chat template of one's own that does not render: the card (and what was written in it) stays, and its
      // editor says why.
      if (r.error.detail?.field === 'chatTemplate' && typeof how.chatTemplate === 'string') {
        return { said: r.error.message };
      }
      if (current?.path === path || current?.spec?.root === path) {
        s().setPackageImport({ ...current, status: 'error', error: packageError(r.error) });
      } else notify(`Could not load the model: ${r.error.message}`, true);
      return { said: null };
    }
    const current = s().packageImport;
    if (current && (current.path === path || current.spec?.root === path)) {
      s().setPackageImport({ ...current, modelId: r.value.id, spec: r.value.spec });
    }
    await refreshModels();
    // Said: the card's badge changes, or the card moves to the loaded ones, away from the focus. A template of the
    // person's own on a loaded model is said by its editor ("Yours is in use from the next reply").
    if (!loaded || how.chatTemplate === undefined) {
      s().announce(loadedAnnouncement(r.value.spec.displayName, r.value.backend, loaded !== undefined));
    }
    return { said: null, id: r.value.id };
  }

  async function unloadModel(id: string): Promise<void> {
    const model = s().models.find((m) => m.id === id);
    s().setModelBusy(id, true);
    const r = await api.invoke('unloadModel', { id });
    s().setModelBusy(id, false);
    if (!report('Could not unload the model', r, true)) return;
    const current = s().packageImport;
    if (current?.modelId === id) {
      const { modelId: _dropped, ...rest } = current;
      s().setPackageImport({ ...rest, path: model?.spec.root ?? current.path });
    }
    await refreshModels();
    s().announce(unloadedAnnouncement(model?.spec.displayName ?? id));
  }

  async function loadAndUse(root: string, how: LoadModelRequest = {}): Promise<string | null> {
    const { said, id } = await loadPackageAs(root, how);
    // Only a load that went through: a failed one leaves new replies where they went.
    if (id !== undefined && s().models.some((m) => m.id === id)) pickModel(id);
    return said;
  }

  /**
   * What a count of a thread's prompt starts from: the thread, its model, and its messages but those still being
   * written; null without the thread or a model.
   */
  function promptBase(threadId: string) {
    const thread = s().threads.find((t) => t.id === threadId);
    const modelId = modelFor(threadId);
    const model = modelOf(modelId);
    if (!thread || !model) return null;
    const live = s().live;
    return { thread, modelId, spec: model.spec, history: thread.messages.filter((m) => live[m.id] === undefined) };
  }

  /** The next turn's prompt with `text` (and its files) sent: the bridge's measureDraft, which measureContext uses too. */
  async function measureDraft(
    threadId: string,
    text: string,
    attachments: Attachment[] = [],
  ): Promise<PromptMeasure | null> {
    const base = promptBase(threadId);
    if (!base) return null;
    const { thread, modelId, spec, history } = base;
    const draft: StoredMessage = {
      id: 'draft',
      role: 'user',
      content: text,
      createdAt: 0,
      ...(attachments.length > 0 ? { attachments } : {}),
    };
    const request = buildChatRequest(thread, [...history, draft], modelId, spec);
    const r = await api.invoke('measurePrompt', request);
    return r.ok ? r.value : null;
  }

  async function forgetPackage(root: string): Promise<void> {
    s().setModelBusy(root, true);
    const r = await api.invoke('forgetModel', { root });
    s().setModelBusy(root, false);
    report('Could not remove the package from the library', r);
  }

  return {
    api,
    newThread,
    searchHub: (query) => api.invoke('searchHub', { query }),
    hubVariants: (repo) => api.invoke('hubVariants', { repo }),
    async downloadModel(repo, variant) {
      const r = await api.invoke('downloadModel', { repo, variant });
      return r.ok ? null : r.error.message;
    },
    cancelDownload(id) {
      void api.invoke('cancelDownload', { id });
    },
    async startApiServer(saved) {
      const { autostart: _, ...request } = saved;
      const r = await api.invoke('startApiServer', request);
      if (!r.ok) return r.error.message;
      s().setApiServer(r.value);
      // Remember the port asked for (0 stays "any free port"), how, and whether it starts with kvdesk.
      s().setUi({ apiServer: saved });
      saveSettings('apiServer');
      return null;
    },
    measureDraft,
    async measureSystemPrompt(threadId) {
      const base = promptBase(threadId);
      if (!base?.thread.systemPrompt?.trim()) return null;
      const empty: StoredMessage = { id: 'draft', role: 'user', content: '', createdAt: 0 };
      const r = await api.invoke('measurePrompt', buildChatRequest(base.thread, [empty], base.modelId, base.spec));
      return r.ok ? r.value : null;
    },
    async measureContext(threadId) {
      const base = promptBase(threadId);
      if (!base) return null;
      const { thread, modelId, spec, history } = base;
      // The next turn: a message of the person's, or, when the chat ends with one (imported so), the reply to it.
      const answers = history.at(-1)?.role === 'user';
      const next: StoredMessage[] = answers ? [] : [{ id: 'draft', role: 'user', content: '', createdAt: 0 }];
      // What the latest reply left out stays out: the count starts where its view does.
      const start = currentDrop(history, {})?.start ?? 0;
      // Counted up to the context: a chat longer than it (an imported one of tens of MB) is only said to be longer,
      // from its newest turns, not counted to its first message (that held the host for minutes).
      const whole = await api.invoke('measurePrompt', {
        ...buildChatRequest(
          { ...thread, contextOverflow: 'refuse' },
          [...history.slice(start), ...next],
          modelId,
          spec,
        ),
        countUpTo: spec.contextLength,
      });
      if (!whole.ok) return null;
      const { promptTokens, contextLength, countedUpTo } = whole.value;
      const counted = { promptTokens, contextLength, ...(countedUpTo !== undefined ? { countedUpTo } : {}) };
      if (thread.contextOverflow === 'refuse') return counted;
      // What the next turn leaves out, as the host would send it: also when the chat is shorter than the context,
      // since the host leaves out the oldest messages once it leaves the reply too little room (up to half of it).
      const fit = answers
        ? await api
            .invoke('measurePrompt', buildChatRequest(thread, history, modelId, spec))
            .then((r) => (r.ok ? r.value : null))
        : await measureDraft(threadId, '');
      const dropped = fit?.droppedMessages;
      return { ...counted, ...(dropped !== undefined ? { droppedMessages: dropped } : {}) };
    },
    savePreset(threadId, name) {
      const t = s().threads.find((x) => x.id === threadId);
      const clean = presetName(name);
      if (!t || !clean) return;
      const preset: Preset = { name: clean, ...carriedSettings(t) };
      const others = (s().ui.presets ?? []).filter((p) => p.name !== clean);
      s().setUi({ presets: [...others, preset].sort((a, b) => a.name.localeCompare(b.name)) });
      saveSettings('presets');
      s().updateThread(threadId, { preset: clean });
      saveThread(threadId);
    },
    settingsCarriedFrom(threadId) {
      const t = s().threads.find((x) => x.id === threadId);
      const from = carriedFrom.get(threadId);
      return t && from !== undefined && untouched(t) ? from : null;
    },
    startFromDefaults(threadId) {
      s().updateThread(threadId, blank());
      const t = s().threads.find((x) => x.id === threadId);
      // Still a chat New chat may open again: it is as a chat made from nothing would be.
      if (t && madeAs.has(threadId)) madeAs.set(threadId, chatSetup(t));
      carriedFrom.delete(threadId);
      saveThread(threadId);
    },
    applyPreset(threadId, name) {
      const p = s().ui.presets?.find((x) => x.name === name);
      if (!p) return;
      s().updateThread(threadId, {
        systemPrompt: p.systemPrompt,
        sampling: p.sampling,
        maxNewTokens: p.maxNewTokens,
        stop: p.stop,
        contextOverflow: p.contextOverflow,
        thinking: p.thinking,
        thinkingBudget: p.thinkingBudget,
        reasoningEffort: p.reasoningEffort,
        preset: p.name,
      });
      saveThread(threadId);
    },
    deletePreset(name) {
      s().setUi({ presets: (s().ui.presets ?? []).filter((p) => p.name !== name) });
      saveSettings('presets');
    },
    saveApiServer(saved) {
      s().setUi({ apiServer: saved });
      saveSettings('apiServer');
    },
    async newApiKey() {
      const r = await api.invoke('newApiKey', {});
      if (!r.ok) return r.error.message;
      s().setApiServer(r.value);
      return null;
    },
    async stopApiServer() {
      const r = await api.invoke('stopApiServer', {});
      if (!r.ok) return r.error.message;
      s().setApiServer(r.value);
      const was = s().ui.apiServer;
      if (was?.autostart) {
        s().setUi({ apiServer: { ...was, autostart: false } });
        saveSettings('apiServer');
      }
      return null;
    },
    async searchThreads(query) {
      const r = await api.invoke('searchThreads', { query: cutText(query, 1000) });
      return r.ok ? r.value : null;
    },
    importThread(text, fileName) {
      const r = parseThreadImport(text, fileName);
      if (!r.ok) return r.error;
      // Beside the chat it was exported from (or another of its name), told apart: "(imported)", "(imported 2)"…
      const taken = new Set(s().threads.map((t) => t.title));
      let title = r.thread.title;
      for (let n = 1; taken.has(title); n++) title = importedTitle(r.thread.title, n);
      s().addThread({ ...r.thread, title });
      s().chatMade();
      s().setView('chat');
      saveThread(r.thread.id);
      rememberOpen(r.thread.id);
      return null;
    },
    selectThread(id) {
      s().selectThread(id);
      s().setView('chat');
      restoreModel(id);
      rememberOpen(id);
    },
    pinThread(id, pinned) {
      s().updateThread(id, { pinned: pinned || undefined });
      saveThread(id);
    },
    renameThread(id, title) {
      s().renameThread(id, title);
      saveThread(id);
    },
    deleteThread(id) {
      const thread = s().threads.find((t) => t.id === id);
      const title = thread?.title ?? UNTITLED;
      const wasOpen = s().activeThreadId === id;
      const place = wasOpen ? scrollPlaceOf(id) : null;
      const draft = drafts().get(id);
      const summary = s().summaries[id];
      const host = known.get(id);
      if (dropThread(id))
        notify(`${quoted(title)} was deleted before your message in it was sent: it is back in the message box.`);
      if (thread) {
        deletedHere.set(id, {
          thread,
          draft,
          ...(summary ? { summary } : {}),
          ...(host ? { known: host } : {}),
          ...(wasOpen ? { open: { place, next: s().activeThreadId } } : {}),
        });
      }
      deleteOnHost(id, title);
      rememberOpen(s().activeThreadId);
    },
    updateThreadSettings(id, patch) {
      const next: Partial<Thread> = {};
      if ('systemPrompt' in patch) next.systemPrompt = patch.systemPrompt;
      if ('sampling' in patch) next.sampling = patch.sampling;
      if ('maxNewTokens' in patch) next.maxNewTokens = patch.maxNewTokens;
      if ('responseFormat' in patch) next.responseFormat = patch.responseFormat;
      if ('jsonSchema' in patch) next.jsonSchema = patch.jsonSchema;
      if ('contextOverflow' in patch) next.contextOverflow = patch.contextOverflow;
      if ('stop' in patch) next.stop = patch.stop;
      if ('thinking' in patch) next.thinking = patch.thinking;
      if ('thinkingBudget' in patch) next.thinkingBudget = patch.thinkingBudget;
      if ('reasoningEffort' in patch) next.reasoningEffort = patch.reasoningEffort;
      if ('showProbabilities' in patch) next.showProbabilities = patch.showProbabilities;
      if ('mcpServers' in patch) next.mcpServers = patch.mcpServers;
      if ('toolsRequired' in patch) next.toolsRequired = patch.toolsRequired;
      if ('toolsAllowed' in patch) next.toolsAllowed = patch.toolsAllowed;
      s().updateThread(id, next);
      saveThread(id);
    },
    send,
    stop,
    regenerate,
    showVersion(threadId, messageId, index) {
      if (liveIn(threadId)) return;
      s().showVersion(threadId, messageId, index);
      saveThread(threadId);
    },
    continueReply,
    editAndResend,
    editReply,
    answerToolCall,
    alwaysRunTool,
    mcpStatus: () => api.invoke('mcpStatus', {}),
    previewChatTemplate: (template, model) =>
      api.invoke('previewChatTemplate', { template, ...(model !== undefined ? { model } : {}) }),
    branchThread(threadId, messageId) {
      const t = s().threads.find((x) => x.id === threadId);
      const upTo = t ? t.messages.findIndex((m) => m.id === messageId) : -1;
      if (!t || upTo < 0) return;
      branchWith(t, upTo + 1);
    },
    editInBranch(threadId, messageId, text) {
      const t = s().threads.find((x) => x.id === threadId);
      const at = t ? t.messages.findIndex((m) => m.id === messageId) : -1;
      const original = t?.messages[at];
      const content = text.trim();
      if (!t || !original || !content) return;
      const branch = branchWith(t, at);
      runTurn(branch.id, [{ ...original, id: newId('m'), content, createdAt: Date.now() }]);
    },
    setActiveModel: pickModel,
    importFiles,
    cancelImport() {
      if (!uploading) return;
      const name = s().packageImport?.name ?? 'the package';
      uploading.abort();
      // Its card goes; what happened is said (a screen reader hears it too).
      notify(`The upload of ${isolated(name)} was cancelled; kvdesk kept nothing of it.`);
    },
    importPath,
    loadPackage,
    listBackends() {
      backends ??= api.invoke('listBackends', {}).then((r) => {
        if (!r.ok) backends = null; // asked again next time
        return r.ok ? r.value : [];
      });
      return backends;
    },
    loadAndUse,
    unloadModel,
    forgetPackage,
    async configureBudget(patch) {
      const r = await api.invoke('configureBudget', patch);
      if (r.ok) s().setSnapshot(r.value);
      return r;
    },
    setInspectorOpen(open) {
      s().setUi({ inspectorOpen: open });
      saveSettings('inspectorOpen');
    },
    setTheme(theme) {
      s().setUi({ theme });
      saveSettings('theme');
    },
    chooseFolder:
      transport.api.transport === 'electron' && transport.api.chooseFolder
        ? () => (transport.api.chooseFolder as () => Promise<string | null>)()
        : undefined,
    pathForFile(file) {
      const t = transport.api;
      if (t.transport !== 'electron' || !t.getPathForFile) return undefined;
      try {
        return t.getPathForFile(file) || undefined;
      } catch {
        return undefined;
      }
    },
  };
}
