/**
 * The shape of the one renderer store. Each slice owns its data and the pure
 * reducers that change it; the bridge (../bridge) does all I/O and calls them.
 */
import type {
  ApiServerStatus,
  DownloadStatus,
  LibraryEntry,
  ModelInfo,
  PackageProblem,
  StoredMessage,
  Thread,
  ThreadSummary,
  ToolRoute,
  UiSettings,
} from '../../shared/api';
import type { BudgetCap, ContextClip, ContextDrop, StreamFrame } from '../../shared/contract';
import type { ErrorInfo } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import type { BudgetSnapshot, SchedulerEvent } from '../../shared/scheduler-types';

/** A package a person dropped or chose: being read, validated, or the outcome. */
export interface PackageImport {
  /** Folder name as dropped. */
  name: string;
  status: 'reading' | 'uploading' | 'ready' | 'error';
  /** Files and bytes read so far (progress while reading a big folder). */
  files?: number;
  bytes?: number;
  /** An upload: the bytes of its request sent so far, of its total (undefined until the first report). */
  sent?: number;
  total?: number;
  /** On success: the validated spec, and the model id when the host loaded it. */
  spec?: ModelSpec;
  modelId?: string;
  /** The path on disk (checked first, loaded on request): the folder itself, or kvdesk's copy of an upload. */
  path?: string;
  /** An upload: the package is kvdesk's copy in the library (`existing`: these files were there already). */
  uploaded?: boolean;
  existing?: boolean;
  /** An upload kept under another name (`<name>-2`): the library has another package of its name. */
  nameTaken?: boolean;
  /** The person trusts it (an ORT package of the "installed" layout, whose files may lie outside its folder). */
  trusted?: boolean;
  error?: PackageProblem;
}

export interface ModelsSlice {
  models: ModelInfo[];
  /** The model new turns use; null until the host reports one. */
  activeModelId: string | null;
  /** Outcome of the last drop or choice. */
  packageImport: PackageImport | null;
  /** Packages loaded before (the host's library, most recently loaded first). */
  library: LibraryEntry[];
  /** Model ids with a load/unload in flight. */
  busyModels: string[];
  /** Downloads from the Hugging Face Hub: running, and those that ended. */
  downloads: DownloadStatus[];
  setDownloads(list: DownloadStatus[]): void;
  setModels(models: ModelInfo[]): void;
  setActiveModel(id: string | null): void;
  setPackageImport(state: PackageImport | null): void;
  setModelBusy(id: string, busy: boolean): void;
  setLibrary(entries: LibraryEntry[]): void;
}

/** Where a reply is between the click and its first token. */
export type ReplyPhase = 'sending' | 'queued' | 'running';

/** A reply being generated (runtime only, never persisted). */
export interface LiveReply {
  threadId: string;
  messageId: string;
  requestId?: string;
  /** The model the host runs it on (from its acceptance). */
  modelId?: string;
  phase: ReplyPhase;
  /** Client clock when the request was sent. */
  startedAt: number;
  promptTokens?: number;
  maxNewTokens?: number;
  /** A static KV cache's positions, which the request needs whole. */
  fixedTokens?: number;
  admittedMaxTokens?: number;
  reservedBytes?: number;
  tokens: number;
  /** A long prompt's reading progress (prompt positions), until the first token. */
  prefill?: { done: number; total: number };
  budgetCap?: BudgetCap;
  clipped?: ContextClip;
  /** The conversation outgrew the context: the reply sees it without its first messages. */
  contextDrop?: ContextDrop;
  /**
   * A continued reply: what it said before (its new text follows), the tokens it had, and how many of its tokens'
   * probabilities it kept (the continuation's follow them).
   */
  continues?: { text: string; tokens: number; probabilities?: number };
  stopping?: boolean;
  /** The window's clock when the first tokens arrived, how many came then, and when the latest arrived. */
  firstTokenAt?: number;
  firstTokens?: number;
  lastTokenAt?: number;
}

/** Frames of one generation, in order, merged by the coalescer since the last animation frame. */
export interface FrameBatch {
  messageId: string;
  frames: StreamFrame[];
}

export interface ChatSlice {
  threads: Thread[];
  activeThreadId: string | null;
  /** False until listThreads answered (the UI shows nothing rather than an empty list that then jumps). */
  threadsLoaded: boolean;
  live: Record<string, LiveReply>;
  /** Full error detail of refusals this run saw; persistence keeps only code and message. */
  errorDetails: Record<string, ErrorInfo>;
  /** Message being edited (edit-and-resend). */
  editingMessageId: string | null;
  /** Tool calls running now (their MCP tool called, its answer not back): call id → thread id. */
  toolRuns: Record<string, string>;
  setToolRun(callId: string, threadId: string | null): void;
  /**
   * The chats whose messages this page has not fetched: each one's summary as it last heard of it (the chat is in
   * `threads` with its fields and no messages). Fetched when opened (openThread); never saved before that.
   */
  summaries: Record<string, ThreadSummary>;
  /** Listed chats whose fetch failed (a damaged file, one too big to send): why, by id, until fetched again. */
  openFailed: Record<string, string>;
  /** Says (or, with null, forgets) why a listed chat could not be opened. */
  setOpenFailed(id: string, why: string | null): void;
  /**
   * Listed chats a message was sent in while their messages were on their way: the message's text, by id, until it
   * is sent (once they are here) or given back to the message box (the chat could not be opened, the send stopped).
   */
  sendWaiting: Record<string, string>;
  /** Says (or, with null, forgets) the message waiting for a chat to open. */
  setSendWaiting(id: string, text: string | null): void;
  /**
   * The chat list as listed (summaries: their messages are fetched when opened; a chat given whole is here whole);
   * chats this page has stay.
   */
  loadThreads(threads: Array<ThreadSummary | Thread>, openThreadId?: string): void;
  /**
   * Every chat goes, with what the page had of them (replies streaming, errors, the one open): the kvdesk now on the
   * page's address keeps another data folder, whose chats are read again (not loaded until then).
   */
  forgetThreads(): void;
  /**
   * Another page saved a chat this page has not fetched (or not heard of): its summary takes the place of the one
   * here, or joins the list. With `unload`, a chat fetched here goes back to its summary (not open, nothing of it on
   * its way).
   */
  receiveSummary(summary: ThreadSummary, unload?: boolean): void;
  addThread(thread: Thread): void;
  /**
   * Counts the chats made (or, New chat on an untouched open chat, opened again) here: New chat, Ctrl+N, a branch,
   * an import. The chat list empties a search that would hide the chat each time.
   */
  chatsMade: number;
  chatMade(): void;
  /**
   * A chat another tab or window saved, or one fetched: it replaces this page's copy (or joins the list) where its
   * activity puts it (newest first), the open one stays; it is here whole from now on.
   */
  receiveThread(thread: Thread): void;
  selectThread(id: string | null): void;
  renameThread(id: string, title: string): void;
  removeThread(id: string): void;
  updateThread(id: string, patch: Partial<Omit<Thread, 'id' | 'messages'>>): void;
  setEditing(messageId: string | null): void;
  /**
   * Starts a reply: keeps the thread's messages up to (not including) `keepBefore`
   * when given, appends `append` (e.g. the user's message) and an empty assistant
   * message with a live entry.
   */
  startReply(args: {
    threadId: string;
    assistantId: string;
    append: StoredMessage[];
    keepBefore?: string;
    /** Regenerate: the reply this one replaces, whose versions it keeps (lib/versions.ts). */
    replaces?: string;
    now: number;
    modelId?: string;
  }): void;
  /** Applies coalesced stream frames; one store update per animation frame. */
  applyFrames(batches: FrameBatch[], now: number): void;
  /**
   * Continues the thread's last reply (it was cut short): a live entry on that message, whose new text is
   * appended to what it already says.
   */
  resumeReply(args: { threadId: string; messageId: string; now: number; modelId?: string }): void;
  /**
   * The person's own text for a reply (the version shown): what later turns send the model, and what continuing
   * it goes on from. A message that is no reply, or a reply streaming now, is left as it is.
   */
  editReply(threadId: string, messageId: string, content: string, now: number): void;
  /** The MCP server and tool of each function name a reply was offered (when its tools are known). */
  setToolRoutes(threadId: string, messageId: string, routes: Record<string, ToolRoute>): void;
  /** A tool's answer to a call, after the thread's last message. */
  addToolResult(threadId: string, result: StoredMessage): void;
  /** Shows version `index` of a reply (one regenerating it kept). */
  showVersion(threadId: string, messageId: string, index: number): void;
  /** A reply failed before any frame arrived (transport down, rejected send). */
  failReply(messageId: string, error: ErrorInfo): void;
  markStopping(messageId: string): void;
}

/** Timeline entries; `progress` events are left out because the snapshot carries the same numbers. */
export type TimelineEvent = Exclude<SchedulerEvent, { type: 'progress' }>;

export interface SchedulerSlice {
  snapshot: BudgetSnapshot | null;
  events: TimelineEvent[];
  setSnapshot(snapshot: BudgetSnapshot, replace?: boolean): void;
  pushEvents(events: SchedulerEvent[]): void;
}

export type ConnectionState = 'connecting' | 'open' | 'reconnecting';
export type MainView = 'chat' | 'models';

export interface SettingsSlice {
  ui: UiSettings;
  view: MainView;
  connection: ConnectionState;
  transport: 'electron' | 'websocket' | null;
  /** Short message under the header (failed save, connection lost); it goes by itself. */
  notice: string | null;
  /**
   * One that stays until dismissed (saved data that could not be read, a page out of date: the person must see it),
   * beside the passing ones, which never take its place.
   */
  stickyNotice: string | null;
  /** The passing notice is a failure the person must hear now: said as an alert, not politely. */
  noticeUrgent: boolean;
  /**
   * Passing notices a newer one came after while they were showing, oldest first (at most EARLIER_NOTICES_KEPT):
   * still shown, above the newest, each for a notice's time from then or until dismissed. A second failure never hides
   * the first (a chat's delete refused, then the settings' save it made refused too).
   */
  earlierNotices: Array<{ text: string; seq: number; since: number }>;
  /**
   * What a screen reader is told politely of a change done without a sign where the focus is (a model loaded or
   * unloaded, a package validated, a control's value set); `seq` tells the same words said again from the last.
   */
  announcement: { text: string; seq: number } | null;
  /** Where the HTTP API answers (null until the host said). */
  apiServer: ApiServerStatus | null;
  /** A narrow window's chat list, shown as a drawer over the chat (a wide one always shows it). */
  sidebarOpen: boolean;
  setSidebarOpen(open: boolean): void;
  /**
   * A narrow window's inspector, shown as a drawer over the chat: closed until asked for there (the persisted
   * `ui.inspectorOpen` is the wide window's), so a small window opens on the chat.
   */
  inspectorDrawer: boolean;
  setInspectorDrawer(open: boolean): void;
  setApiServer(status: ApiServerStatus): void;
  setUi(patch: Partial<UiSettings>): void;
  setView(view: MainView): void;
  setConnection(state: ConnectionState): void;
  setTransport(kind: 'electron' | 'websocket'): void;
  setNotice(text: string | null, stays?: boolean, urgent?: boolean): void;
  /** Takes a passing notice away wherever it is shown (the newest, or an earlier one): its cause is over. */
  dropNotice(text: string): void;
  announce(text: string): void;
}

export type AppState = ModelsSlice & ChatSlice & SchedulerSlice & SettingsSlice;
