/**
 * Every call, event stream and token stream between a front end (renderer over
 * Electron IPC or WebSocket) and the host. Adapters (ipc/, server/) validate
 * each request with these schemas and forward to RunnerService; they hold no
 * business logic. Responses travel in the Result envelope of ./errors.
 */
import { z } from 'zod';
import { GenerateRequest, SamplingSettings, type StreamFrame, ToolCall } from './contract';
import type { Result } from './errors';
import type { ModelSpec } from './model-spec';
import type { BudgetSnapshot, SchedulerEvent } from './scheduler-types';

/** A model the host has loaded, as front ends see it. */
export interface ModelInfo {
  id: string;
  spec: ModelSpec;
  loadMs: number;
  /** Execution provider the model runs on, e.g. "cpu". */
  backend: string;
  /** True for the package kvdesk generated and loads at first start. */
  isDefault: boolean;
  /**
   * Whether the engine feeds the LM head the last position only (prefill
   * computes no logits it would discard), and what it changed or why not.
   */
  logits?: { last: boolean; detail: string };
  /**
   * Loaded by a request that named it (just in time), not by the person: it is unloaded after `ttlMs` without
   * requests (null: never), counted from `lastUsedAt`.
   */
  firstUse?: { ttlMs: number | null; lastUsedAt: number };
  /** Being loaded again (another variant, backend or template): requests sent to it wait until the load is in. */
  reloading?: boolean;
}

/**
 * A package handed over as files (a browser's upload): kvdesk's copy of it in the library, read and checked as a
 * folder on disk is; with the model when the upload loaded it too.
 */
export interface ImportedPackage {
  /** Where kvdesk keeps it (the library's folder of uploads). */
  root: string;
  spec: ModelSpec;
  model?: ModelInfo;
  /** The library had these very files already: that copy is the one answered (no second one was made). */
  existing?: boolean;
  /**
   * Another package has the name it was given (another upload: this copy's folder is `<name>-2`; a folder of that
   * name elsewhere): it is known by another id than its name's, `<name>-2` (its spec's id).
   */
  nameTaken?: boolean;
}

/** Why a package is refused: the error code and message, and the file and field at fault when known. */
export interface PackageProblem {
  code: string;
  message: string;
  file?: string;
  field?: string;
}

/** The outcome of validating a package without loading it (drop → validation card). */
export type PackageCheck = { ok: true; spec: ModelSpec } | { ok: false; error: PackageProblem };

/** A model package kvdesk has loaded before (the Models view's library; the APIs load it on first use). */
export interface LibraryEntry {
  /** The package folder (absolute). */
  root: string;
  /** The id it loads as. */
  id: string;
  /** Its validation at the last check: what the card shows; absent while the first check runs. */
  spec?: ModelSpec;
  /** Why the last check failed (files changed since it was loaded); the card says what to do. */
  error?: PackageProblem;
  /** The folder is gone (moved, deleted, an unplugged disk). */
  missing: boolean;
  /** kvdesk's own copy of a browser upload (under `<data-dir>/models`): forgetting it deletes the files. */
  uploaded: boolean;
  /** When it joined the library and when it was last loaded (ms since the epoch; the time it joined until loaded). */
  addedAt: number;
  lastLoadedAt: number;
  /** Added (an upload, a download) and not loaded since. */
  neverLoaded?: boolean;
  /** Downloaded from the Hugging Face Hub: the repository, revision (and the commit it was at) and variant. */
  source?: { repo: string; revision: string; variant: string; commit?: string };
  /** How the person last loaded it (variant, backend, trust): its next load is the same. */
  load?: LoadModelRequest;
}

/** A text file attached to a message: the model reads it with the message (see withAttachments). */
export const Attachment = z.object({
  name: z.string().min(1).max(255),
  text: z.string().max(2_000_000),
});
export type Attachment = z.infer<typeof Attachment>;

/** Generation facts shown under an assistant reply. */
export const MessageStats = z.object({
  ttftMs: z.number().optional(),
  tokensPerSecond: z.number().optional(),
  tokens: z.number().optional(),
  /** The prompt the reply continued (the conversation as the model saw it), in tokens. */
  promptTokens: z.number().optional(),
  finishReason: z.string().optional(),
  /** A thinking model's reply: its reasoning's tokens, and how long they took (at the reply's decode rate). */
  reasoningTokens: z.number().optional(),
  reasoningMs: z.number().optional(),
  budgetCap: z
    .object({
      requestedMaxTokens: z.number(),
      admittedMaxTokens: z.number(),
      requestedBytes: z.number(),
      admittedBytes: z.number(),
      availableBytes: z.number(),
    })
    .optional(),
  clipped: z
    .object({ requestedMaxTokens: z.number(), clippedMaxTokens: z.number(), contextLength: z.number() })
    .optional(),
  /** The reply saw the conversation without its first `messages` messages (it outgrew the context). */
  contextDrop: z.object({ messages: z.number().int().min(0).max(10_000), contextLength: z.number() }).optional(),
  /** Lookup decoding: tokens guessed from earlier text, and those the model took (each a decode step saved). */
  lookup: z.object({ drafted: z.number().int().min(0), accepted: z.number().int().min(0) }).optional(),
  /** A reply stopped before its first token: where it was then (sent, waiting in the queue, reading its prompt). */
  stoppedWhile: z.enum(['sending', 'queued', 'reading']).optional(),
  /**
   * An interrupted reply (finishReason `interrupted`) that the page did not end by going: kvdesk stopped while it was
   * written (`shutdown`), or the page's connection to it was lost (`disconnect`).
   */
  interruptedBy: z.enum(['shutdown', 'disconnect']).optional(),
  error: z.object({ code: z.string(), message: z.string() }).optional(),
});

/** A model as a reply keeps it: its id, and its name as the window showed it then (absent when not known). */
export const ModelRef = z.object({ id: z.string().min(1).max(200), name: z.string().max(200).optional() });
export type ModelRef = z.infer<typeof ModelRef>;

/** One version of a reply: what regenerating it replaced, or what replaced it. */
/** Most tokens a reply keeps the probabilities of (a reply longer than that keeps its first ones). */
export const MAX_PROBABILITY_TOKENS = 4096;

/**
 * A generated token as a reply keeps it for the window's probabilities view (a thread set to keep them): its
 * UTF-8 bytes (a character split over tokens decodes whole across them), its log-probability, and the likeliest
 * alternatives at its place (most likely first). Log-probabilities are finite (a masked token's is -1e4).
 */
export const TokenProbability = z.object({
  b: z.array(z.number().int().min(0).max(255)).max(256),
  lp: z.number(),
  top: z.array(z.object({ t: z.string().max(1000), lp: z.number() })).max(20),
});
export type TokenProbability = z.infer<typeof TokenProbability>;

/** Which MCP server and tool a function name given to the model stands for (lib/mcp-tools.ts). */
export const ToolRoute = z.object({ server: z.string().min(1).max(100), tool: z.string().min(1).max(200) });
export type ToolRoute = z.infer<typeof ToolRoute>;

/**
 * What one version of a reply has of its own (a regenerated reply keeps its earlier versions: lib/versions.ts
 * takes these fields, and only these, from the message to a version and back).
 */
export const MessageVersion = z.object({
  content: z.string().max(2_000_000),
  /** A thinking model's reasoning before its reply (`content` is the reply). */
  reasoning: z.string().max(2_000_000).optional(),
  createdAt: z.number(),
  /** `json`: a reply written in JSON mode, shown as a JSON code block. */
  format: z.enum(['json']).optional(),
  /** Generation facts shown under an assistant reply. */
  stats: MessageStats.optional(),
  /** The models that wrote a reply, in order (a reply continued on another model has both; older chats none). */
  writtenBy: z.array(ModelRef).min(1).max(16).optional(),
  /** A reply whose text the person changed (what the model reads in later turns, and goes on from). */
  edited: z.boolean().optional(),
  /** Each token the reply's generation wrote, with its probability (a thread set to keep them). */
  probabilities: z.array(TokenProbability).max(MAX_PROBABILITY_TOKENS).optional(),
  /** A reply's calls of the chat's MCP tools (each answered by a `tool` message after it, or not yet). */
  toolCalls: z.array(ToolCall).max(128).optional(),
  /** The MCP server and tool of each function name the reply was offered. */
  toolRoutes: z.record(z.string().max(64), ToolRoute).optional(),
});
export type MessageVersion = z.infer<typeof MessageVersion>;

/** A chat message as stored in a thread: a version's fields, and those of the message itself. */
export const StoredMessage = MessageVersion.extend({
  id: z.string().min(1).max(100),
  /** `tool`: an MCP tool's answer to a call of the reply before it. */
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  /** Text files sent with a user message. */
  attachments: z.array(Attachment).max(8).optional(),
  /** A `tool` message: the call it answers, its function name, and whether the answer is an error. */
  toolCallId: z.string().min(1).max(200).optional(),
  toolName: z.string().min(1).max(64).optional(),
  isError: z.boolean().optional(),
  /** A regenerated reply's other versions (lib/versions.ts), and where the shown one sits among all of them. */
  alternatives: z.array(MessageVersion).max(16).optional(),
  altIndex: z.number().int().min(0).max(16).optional(),
});
export type StoredMessage = z.infer<typeof StoredMessage>;

/**
 * A chat's (and a preset's) stop strings: at most this many, each of at most this many characters (UTF-16 code
 * units, as JavaScript counts them). The settings panel checks its field against the same numbers.
 */
export const STOP_MAX_COUNT = 16;
export const STOP_MAX_CHARS = 200;

/** A chat thread with its settings. */
export const Thread = z.object({
  id: z.string().min(1).max(100),
  title: z.string().max(200),
  createdAt: z.number(),
  updatedAt: z.number(),
  modelId: z.string().max(200).optional(),
  systemPrompt: z.string().max(100_000).optional(),
  sampling: SamplingSettings.optional(),
  maxNewTokens: z.number().int().min(1).max(1_000_000).optional(),
  /** `json`: every reply is one JSON object (JSON mode). */
  responseFormat: z.enum(['text', 'json']).optional(),
  /** With JSON mode: a JSON Schema (as typed) the replies conform to (structured output). */
  jsonSchema: z.string().max(100_000).optional(),
  /**
   * When the chat outgrows the model's context: leave out its oldest messages (`drop-oldest`, also when
   * absent) or refuse the turn (`refuse`).
   */
  contextOverflow: z.enum(['drop-oldest', 'refuse']).optional(),
  /** Replies end where one of these strings would appear (it is not shown). */
  stop: z.array(z.string().min(1).max(STOP_MAX_CHARS)).max(STOP_MAX_COUNT).optional(),
  /** A thinking model reasons before it replies (true) or replies at once (false); absent: as the model does. */
  thinking: z.boolean().optional(),
  /** A thinking model's reasoning is closed for it after this many tokens (absent: no limit but max tokens). */
  thinkingBudget: z.number().int().min(0).max(1_000_000).optional(),
  /** How hard a thinking model reasons (GenerateRequest.reasoningEffort); absent: as the model does. */
  reasoningEffort: z.enum(['minimal', 'low', 'medium', 'high']).optional(),
  /** Replies keep each token's probability and its likeliest alternatives (the probabilities view). */
  showProbabilities: z.boolean().optional(),
  /** MCP servers (names in mcp.json) whose tools the model may call in this chat. */
  mcpServers: z.array(z.string().min(1).max(100)).max(64).optional(),
  /** The model must call one of the tools in reply to each of your messages (after a tool's answer it may not). */
  toolsRequired: z.boolean().optional(),
  /** The preset last applied to this chat or saved from it: the picker shows it while the settings are still its. */
  preset: z.string().min(1).max(80).optional(),
  /** Kept at the top of the chat list. */
  pinned: z.boolean().optional(),
  /** Tools (`server/tool`) this chat runs without asking (the person's "Always"). */
  toolsAllowed: z.array(z.string().min(3).max(301)).max(256).optional(),
  /**
   * The store's count of this chat's saves (absent: never saved with one, as 0). A save names the revision it was
   * made from; one made from an older revision than the file's (another page saved since) is refused.
   */
  revision: z.number().int().min(0).optional(),
  messages: z.array(StoredMessage).max(10_000),
});
export type Thread = z.infer<typeof Thread>;

/** The fields of a chat the chat list changes (updateThread): its name, its pin (false: unpinned). */
export const ThreadFields = z.object({ title: z.string().max(200).optional(), pinned: z.boolean().optional() });
export type ThreadFields = z.infer<typeof ThreadFields>;

/** A chat's fields without its messages: what a chat file's head holds (see ThreadSummary). */
export const ThreadHead = Thread.omit({ messages: true });

/**
 * A chat as the chat list has it (listThreads, and the `thread` event of another page's save): its fields without
 * its messages, read from the head of its file, and its file's size. Its messages (attachments included, which can
 * run to tens of MB) come with `openThread`, when the chat is opened.
 */
export type ThreadSummary = z.infer<typeof ThreadHead> & {
  /** Its file's size on disk, in bytes. */
  bytes: number;
};

/**
 * The OpenAI-, Anthropic- and Ollama-compatible HTTP API: whether it answers, where, and who runs it — the
 * desktop window (started and stopped from the Models view), `kvdesk serve` (for as long as it runs), or
 * nobody (a host without a server).
 */
export interface ApiServerStatus {
  running: boolean;
  controlledBy: 'window' | 'serve' | 'none';
  /** Base URL for clients, e.g. http://127.0.0.1:1234. */
  url?: string;
  port?: number;
  /** Clients must send a bearer token. */
  tokenRequired: boolean;
  /** The window's server listens on every address, for the local network. */
  lan?: boolean;
  /** Its addresses on the local network (this computer's IPv4 addresses), while it runs with `lan`. */
  lanUrls?: string[];
  /** Web pages of any site may call its model APIs (CORS). */
  cors?: boolean;
  /** The window's API key (the bearer token), while its server wants one: shown to the person to give to clients. */
  key?: string;
}

/** One backend of onnxruntime-node on this machine (src/main/backends detectBackends): usable, or why not. */
export interface BackendInfo {
  /** onnxruntime-node's name: cpu, webgpu, cuda, tensorrt, dml, coreml. */
  name: string;
  /** The execution provider's ORT name. */
  provider: string;
  usable: boolean;
  reason?: string;
  hint?: string;
}

/**
 * How a package is loaded: the person's pick of variant and backend (absent: kvdesk's), and whether they trust an
 * ORT package of the "installed" layout (its files may lie anywhere on this machine).
 */
export interface LoadModelRequest {
  variant?: string;
  backend?: string;
  trustInstalled?: boolean;
  /** A chat template (Jinja) used instead of the package's; null: the package's again. */
  chatTemplate?: string | null;
}

/** The longest chat template kvdesk takes from a person (real models' run to tens of KiB). */
export const CHAT_TEMPLATE_MAX = 256 * 1024;

/** The fragment of a window's page loaded again after its process was gone (Electron), so the page can say so. */
export const RECOVERED_FRAGMENT = '#recovered';

/** What a request's prompt would be (measurePrompt): its tokens, the model's context, what would be left out. */
export interface PromptMeasure {
  promptTokens: number;
  contextLength: number;
  /** With `drop-oldest`: the oldest messages it would leave out. */
  droppedMessages?: number;
  /**
   * The `countUpTo` asked, when the prompt has more tokens: only its newest turns were counted (those that already
   * pass it), and `promptTokens` is theirs — the whole prompt has at least that many.
   */
  countedUpTo?: number;
}

/**
 * measurePrompt's request: a generation request, and, for a conversation sent whole (not `drop-oldest`), how far to
 * count it (a chat longer than the context is only said to be longer, not counted to its first message).
 */
export const MeasurePromptRequest = z.intersection(
  GenerateRequest,
  z.object({ countUpTo: z.number().int().min(1).max(100_000_000).optional() }),
);
export type MeasurePromptRequest = z.infer<typeof MeasurePromptRequest>;

/** A repository on the Hugging Face Hub: `owner/name`, optionally `@revision`. */
export const HubRepoRequest = z.object({ repo: z.string().min(3).max(300) }).strict();

/** One package a hub repository offers (see src/main/host/hub-download.ts). */
export interface HubVariantInfo {
  name: string;
  layout: 'hf-optimum' | 'ort-genai' | 'onnx-genai';
  bytes: number;
  files: number;
}

/** A hub repository's packages, and the one kvdesk takes when none is named (the best on a CPU). */
export interface HubVariantsInfo {
  repo: string;
  revision: string;
  variants: HubVariantInfo[];
  recommended: string;
}

/** A tool an MCP server offers (src/main/host/mcp.ts): its name, what it does, its arguments' JSON Schema. */
export interface McpToolInfo {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

/**
 * An MCP server of mcp.json: not started yet, starting, running (its tools), why it did not start (`failed`), or
 * why it stopped on its own after it ran (`exited`: it starts again when a chat uses it).
 */
export interface McpServerStatus {
  name: string;
  /** Set for a server at an address (mcp.json's `url`): kvdesk connects to it rather than starting it. */
  remote?: true;
  state: 'idle' | 'starting' | 'ready' | 'failed' | 'exited';
  error?: string;
  tools: McpToolInfo[];
}

/** The MCP servers kvdesk knows (from `configPath`), and what is wrong with that file, if anything. */
export interface McpStatus {
  configPath: string;
  error?: string;
  /** Why this front end runs no tools (a page served without a token), when it runs none. */
  blocked?: string;
  servers: McpServerStatus[];
}

/** A tool's answer: its text for the model, and whether it says the call failed. */
export interface McpToolResult {
  content: string;
  isError: boolean;
}

/** A search of the hub for models kvdesk can download (see src/main/host/hub-search.ts). */
export const HubSearchRequest = z
  .object({ query: z.string().trim().min(1).max(200), limit: z.number().int().min(1).max(100).optional() })
  .strict();

/** A repository a hub search found: look it up (hubVariants) for what it offers. */
export interface HubSearchHit {
  /** owner/name. */
  repo: string;
  downloads: number;
  likes: number;
  /** When it last changed (ISO 8601). */
  updatedAt?: string;
  /** Its terms must be accepted on huggingface.co, and HF_TOKEN set, before it downloads. */
  gated: boolean;
  private?: boolean;
  /** The library its card names (transformers.js, onnxruntime-genai…). */
  library?: string;
}

/** A model download: running, or how it ended (a finished one is in the library as `libraryId`). */
export interface DownloadStatus {
  id: string;
  repo: string;
  revision: string;
  variant: string;
  state: 'running' | 'done' | 'failed' | 'cancelled';
  doneBytes: number;
  totalBytes: number;
  startedAt: number;
  /** How fast it goes now (over its last seconds), while it runs; absent until it knows. */
  bytesPerSecond?: number;
  /** Where the package landed, and its library id. */
  root?: string;
  libraryId?: string;
  error?: { code: string; message: string };
}

/**
 * Starts (or moves, or changes) the window's API server: on 127.0.0.1, or with `lan` on every address of this
 * computer, for other devices of the local network; with `requireKey` (always on the network) every request must
 * carry the window's API key.
 */
export const ApiServerRequest = z
  .object({
    port: z.number().int().min(0).max(65_535),
    lan: z.boolean().optional(),
    requireKey: z.boolean().optional(),
    /** Web pages of any site may call the model APIs from a browser (CORS), as LM Studio's "Enable CORS". */
    cors: z.boolean().optional(),
  })
  .strict();
export type ApiServerRequest = z.infer<typeof ApiServerRequest>;

/** A named set of chat settings the person saved, to start other chats the same way (LM Studio's presets). */
export const Preset = z.object({
  name: z.string().trim().min(1).max(80),
  systemPrompt: z.string().max(100_000).optional(),
  sampling: SamplingSettings.optional(),
  maxNewTokens: z.number().int().min(1).max(1_000_000).optional(),
  stop: z.array(z.string().min(1).max(STOP_MAX_CHARS)).max(STOP_MAX_COUNT).optional(),
  contextOverflow: z.enum(['drop-oldest', 'refuse']).optional(),
  thinking: z.boolean().optional(),
  thinkingBudget: z.number().int().min(0).max(1_000_000).optional(),
  reasoningEffort: z.enum(['minimal', 'low', 'medium', 'high']).optional(),
});
export type Preset = z.infer<typeof Preset>;

/** Persistent UI settings. */
export const UiSettings = z.object({
  lastThreadId: z.string().max(100).optional(),
  inspectorOpen: z.boolean().optional(),
  /** Light or dark: as the OS is (absent), or the person's pick. */
  theme: z.enum(['light', 'dark']).optional(),
  /** The desktop window's API server: its port, whether it starts with the app, on the network, with the key. */
  apiServer: z
    .object({
      port: z.number().int().min(0).max(65_535),
      autostart: z.boolean(),
      lan: z.boolean().optional(),
      requireKey: z.boolean().optional(),
      cors: z.boolean().optional(),
    })
    .optional(),
  /** Saved chat settings, by name. */
  presets: z.array(Preset).max(100).optional(),
});
export type UiSettings = z.infer<typeof UiSettings>;
/** The names of the settings' fields. */
export const UI_SETTINGS_FIELDS = Object.keys(UiSettings.shape) as [keyof UiSettings, ...(keyof UiSettings)[]];
/**
 * A page's settings save: the settings as the page has them, and `changed`, the fields it changed since its last save
 * (only those are written, over the file as it is then; a field listed and absent is removed). Without `changed` (a
 * page of an earlier version), the fields that differ from what the host last read or wrote are written.
 */
export const SaveSettingsRequest = UiSettings.extend({ changed: z.array(z.enum(UI_SETTINGS_FIELDS)).optional() });
export type SaveSettingsRequest = z.infer<typeof SaveSettingsRequest>;
/** The desktop window's API server as saved: port, start with kvdesk, on the network, with the key. */
export type ApiServerSettings = NonNullable<UiSettings['apiServer']>;

/** Budget controls the inspector can change live. */
export const BudgetPatch = z.object({
  /** Whose KV budget `kvBudgetBytes` sets: `cpu` (default), `cuda:0`, … */
  device: z.string().min(1).max(64).optional(),
  kvBudgetBytes: z.number().int().min(0).nullable().optional(),
  maxRunning: z.number().int().min(1).max(256).optional(),
  maxQueue: z.number().int().min(1).max(100_000).optional(),
});
export type BudgetPatch = z.infer<typeof BudgetPatch>;

const Empty = z.object({}).strict();
const Id = z.object({ id: z.string().min(1).max(200) }).strict();

/** Request schemas of every invoke call, keyed by name. */
export const CallSchemas = {
  listModels: Empty,
  /** Validate a package folder on the host's disk without loading it. */
  /** `trustInstalled`: an ORT package of the "installed" layout, which may name files outside its folder. */
  checkPackage: z.object({ path: z.string().min(1).max(4096), trustInstalled: z.boolean().optional() }).strict(),
  /** `variant` (an ORT package's, or a graph file's: fp16, q4, …) and `backend` (cpu, cuda, webgpu, …): the person's pick. */
  loadModel: z
    .object({
      path: z.string().min(1).max(4096),
      variant: z.string().min(1).max(200).optional(),
      backend: z.string().min(1).max(100).optional(),
      trustInstalled: z.boolean().optional(),
      chatTemplate: z.string().min(1).max(CHAT_TEMPLATE_MAX).nullable().optional(),
    })
    .strict(),
  /** What a chat template writes for a short conversation (with `model`: its BOS and EOS tokens), before it is used. */
  previewChatTemplate: z
    .object({ template: z.string().min(1).max(CHAT_TEMPLATE_MAX), model: z.string().min(1).max(200).optional() })
    .strict(),
  /** What each backend onnxruntime-node knows can do on this machine (probed once), and why not. */
  listBackends: Empty,
  /** The packages loaded before, most recently loaded first. */
  listLibrary: Empty,
  /** Removes a package from the library: a folder of your own is forgotten, kvdesk's copy of an upload deleted. */
  forgetModel: z.object({ root: z.string().min(1).max(4096) }).strict(),
  unloadModel: Id,
  getSnapshot: Empty,
  configureBudget: BudgetPatch.strict(),
  cancel: z.object({ requestId: z.string().min(1).max(200) }).strict(),
  closeSession: z.object({ sessionId: z.string().min(1).max(200) }).strict(),
  /** Every chat's summary (its fields, not its messages), most recently updated first. */
  listThreads: Empty,
  /** One chat, whole (its messages and their attachments): fetched when the chat is opened. */
  openThread: Id,
  /**
   * The chats whose title, messages or attached files contain every word of `query` (case-insensitive), as saved:
   * the chat list's search of the chats this page has not opened.
   */
  searchThreads: z.object({ query: z.string().max(1000) }).strict(),
  /**
   * `savedBy`: the page or window that saves it (the others are sent the chat; that one has it). `revision`: the one
   * the page's copy was made from; a chat saved since by another page answers SAVE_CONFLICT, nothing written.
   */
  saveThread: Thread.extend({ savedBy: z.string().min(1).max(100).optional() }),
  /**
   * Changes only a chat's list fields (a rename, a pin from the chat list of a chat not opened: it is not sent
   * whole), by a save's rules (`revision`: the one the page's summary has; `savedBy`: as saveThread's).
   */
  updateThread: ThreadFields.extend({
    id: z.string().min(1).max(100),
    revision: z.number().int().min(0).optional(),
    savedBy: z.string().min(1).max(100).optional(),
  }).strict(),
  deleteThread: Id,
  getSettings: Empty,
  /** The files of the data directory kvdesk could not use (each named, with what was done and what to do). */
  dataProblems: Empty,
  saveSettings: SaveSettingsRequest,
  /** A generation request's prompt, measured without running it (the composer's token count). */
  measurePrompt: MeasurePromptRequest,
  /** Where the HTTP API answers, and who runs it. */
  apiServerStatus: Empty,
  /** The desktop window: serve the HTTP API on the port (moving it when it already runs elsewhere, as asked). */
  startApiServer: ApiServerRequest,
  stopApiServer: Empty,
  /** The desktop window: a new API key (the old one stops working; a server that wants a key restarts with it). */
  newApiKey: Empty,
  /** Repositories on the hub that hold ONNX language models, by a word of their name. */
  searchHub: HubSearchRequest,
  /** The MCP servers of mcp.json, and the tools of those running. */
  mcpStatus: Empty,
  /** Starts the named MCP servers (those not running yet); their tools come back in the status. */
  mcpStart: z.object({ servers: z.array(z.string().min(1).max(100)).max(64) }).strict(),
  /** Calls an MCP server's tool with the model's arguments (the JSON text of an object). */
  mcpCall: z
    .object({
      server: z.string().min(1).max(100),
      tool: z.string().min(1).max(200),
      arguments: z.string().max(1_000_000),
    })
    .strict(),
  /** The packages a Hugging Face repository offers (its ONNX variants, their sizes). */
  hubVariants: HubRepoRequest,
  /** Downloads one variant of a hub repository into the library (progress: the `downloads` event). */
  downloadModel: HubRepoRequest.extend({ variant: z.string().min(1).max(300).optional() }).strict(),
  cancelDownload: z.object({ id: z.string().min(1).max(100) }).strict(),
  /** Downloads running, and those that ended since the host started. */
  listDownloads: Empty,
} as const;

/** Response types of every invoke call. */
export interface CallResponses {
  listModels: ModelInfo[];
  checkPackage: PackageCheck;
  loadModel: ModelInfo;
  previewChatTemplate: { text: string };
  listBackends: BackendInfo[];
  listLibrary: LibraryEntry[];
  forgetModel: null;
  unloadModel: null;
  getSnapshot: BudgetSnapshot;
  configureBudget: BudgetSnapshot;
  cancel: { cancelled: boolean };
  closeSession: null;
  listThreads: ThreadSummary[];
  openThread: Thread;
  /** The ids of the chats found. */
  searchThreads: string[];
  /** The chat's revision now: the page's next save of it names this one. */
  saveThread: { revision: number };
  updateThread: { revision: number };
  deleteThread: null;
  getSettings: UiSettings;
  dataProblems: string[];
  saveSettings: null;
  measurePrompt: PromptMeasure;
  apiServerStatus: ApiServerStatus;
  startApiServer: ApiServerStatus;
  stopApiServer: ApiServerStatus;
  newApiKey: ApiServerStatus;
  searchHub: HubSearchHit[];
  mcpStatus: McpStatus;
  mcpStart: McpStatus;
  mcpCall: McpToolResult;
  hubVariants: HubVariantsInfo;
  downloadModel: DownloadStatus;
  cancelDownload: { cancelled: boolean };
  listDownloads: DownloadStatus[];
}

export type CallName = keyof typeof CallSchemas;
export type CallRequest<N extends CallName> = z.infer<(typeof CallSchemas)[N]>;

/** Events the host broadcasts to every front end. */
export interface HostEvents {
  /** Budget snapshot, throttled to ≤ 10 Hz, latest wins. */
  budget: BudgetSnapshot;
  /** Discrete scheduler events for the timeline. */
  scheduler: SchedulerEvent;
  /** The set of loaded models changed. */
  models: ModelInfo[];
  /** The library changed (a package loaded for the first time, forgotten, checked again). */
  library: LibraryEntry[];
  /** The HTTP API server started, moved or stopped (from any window or page, or at start). */
  apiServer: ApiServerStatus;
  /** A window or page saved the settings (presets, the API server's): the others take them up. */
  settings: UiSettings;
  /**
   * A window or page saved a chat (`savedBy`, which has it already): its summary and revision, not its messages (a
   * chat can be tens of MB); a page that has it open fetches it (openThread), the others update their list.
   */
  thread: { summary: ThreadSummary; savedBy?: string };
  /** A window or page deleted a chat. */
  threadDeleted: { id: string };
  /** Model downloads: every one running and those that ended (throttled while bytes arrive). */
  downloads: DownloadStatus[];
}
export type HostEventName = keyof HostEvents;

/**
 * The API a renderer sees, whatever the transport: Electron's preload exposes
 * it as `window.kvdesk`; in a browser the WebSocket client implements it.
 */
export interface KvdeskApi {
  invoke<N extends CallName>(name: N, request: CallRequest<N>): Promise<Result<CallResponses[N]>>;
  /** Starts a generation; frames arrive in order; the returned function cancels it. */
  generate(request: GenerateRequest, onFrame: (frame: StreamFrame) => void): () => void;
  on<E extends HostEventName>(event: E, listener: (payload: HostEvents[E]) => void): () => void;
  /**
   * Hands dropped package files to the host; in Electron they are read by path, in a browser uploaded (with its
   * progress, and cancelled by the signal: the host then keeps nothing of it).
   */
  importPackage(files: PackageUpload, options?: UploadOptions): Promise<Result<ImportedPackage>>;
  /** Which transport this is (shown in the UI; tests check it). */
  readonly transport: 'electron' | 'websocket';
}

/** How an upload reports and stops. */
export interface UploadOptions {
  /** Bytes of the request body sent so far, of its total (the files, and a little of the form around them). */
  onProgress?: (sent: number, total: number) => void;
  signal?: AbortSignal;
  /**
   * false: the package joins the library, checked, and is not loaded (the window shows its card, to pick how it
   * loads); by default it loads too. A folder by path is only ever loaded.
   */
  load?: boolean;
}

/** Files of a dropped folder: a path on the host's disk (Electron) or the files themselves (browser). */
export type PackageUpload =
  | { kind: 'path'; path: string }
  | { kind: 'files'; name: string; files: Array<{ path: string; data: Blob | ArrayBuffer }> };

/** Wire messages of the WebSocket transport (JSON text frames). */
export type WsClientMessage =
  | { t: 'invoke'; id: number; name: CallName; request: unknown }
  | { t: 'generate'; id: string; request: unknown }
  | { t: 'cancel'; id: string };

export type WsServerMessage =
  /**
   * A socket's first message: the build of the UI the server serves (a digest; absent without a build), and the
   * largest message (bytes of its UTF-8 text) the server takes: a larger one closes the socket.
   */
  | { t: 'hello'; build?: string; dataId?: string; maxMessageBytes?: number }
  | { t: 'result'; id: number; result: Result<unknown> }
  | { t: 'frame'; id: string; frame: StreamFrame }
  | { t: 'event'; event: HostEventName; payload: unknown };
