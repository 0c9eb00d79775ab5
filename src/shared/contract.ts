/**
 * The contract between kvdesk's front ends (CLI, renderer, HTTP API) and the
 * host's RunnerService. Every input from outside is parsed with these schemas.
 */
import { z } from 'zod';
import type { ErrorInfo } from './errors';

/** A function call the model made (OpenAI's tool call): `arguments` is the JSON text of an object. */
export const ToolCall = z.object({
  id: z.string().min(1).max(200),
  name: z.string().min(1).max(64),
  arguments: z.string(),
});
export type ToolCall = z.infer<typeof ToolCall>;

/** A chat message; an assistant's may carry the calls it made, a tool's the id of the call it answers. */
export const ChatMessage = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string(),
  toolCalls: z.array(ToolCall).max(128).optional(),
  toolCallId: z.string().min(1).max(200).optional(),
  /** A tool result's function name (found from toolCallId when omitted). */
  name: z.string().min(1).max(64).optional(),
  /**
   * An assistant turn's reasoning (a thinking model's thoughts before `content`), given to templates that show
   * it (as `reasoning_content`); most leave earlier turns' reasoning out.
   */
  reasoning: z.string().optional(),
});
export type ChatMessage = z.infer<typeof ChatMessage>;

/** A function the model may call (OpenAI's `tools[].function`). */
export const ToolDefinition = z.object({
  name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'letters, digits, _ . - (at most 64)'),
  description: z.string().max(8192).optional(),
  /** JSON Schema of the arguments object; omitted: no arguments. */
  parameters: z.record(z.string(), z.unknown()).optional(),
});
export type ToolDefinition = z.infer<typeof ToolDefinition>;

/** Whether the model may call tools (`auto`), must not (`none`), must call one (`required`), or that one. */
export const ToolChoice = z.union([z.enum(['auto', 'none', 'required']), z.object({ name: z.string().min(1) })]);
export type ToolChoice = z.infer<typeof ToolChoice>;

/** Sampling settings; omitted fields take the package's defaults, then kvdesk's. */
export const SamplingSettings = z.object({
  greedy: z.boolean().optional(),
  temperature: z.number().min(0).max(10).optional(),
  topK: z.number().int().min(0).optional(),
  /** 0: a nucleus that holds the likeliest token alone (OpenAI's top_p 0). */
  topP: z.number().min(0).max(1).optional(),
  minP: z.number().min(0).max(1).optional(),
  repetitionPenalty: z.number().gt(0).max(10).optional(),
  /** The repetition penalty looks at the last n tokens of the prompt and reply only (llama.cpp's repeat_last_n); 0: all. */
  repetitionWindow: z.number().int().min(0).max(1_000_000).optional(),
  /** OpenAI's penalties over the tokens generated so far: per occurrence, and once for any occurrence. */
  frequencyPenalty: z.number().min(-2).max(2).optional(),
  presencePenalty: z.number().min(-2).max(2).optional(),
  /** Added to the logits of token ids (keys) before sampling, as OpenAI's logit_bias: -100 bans, 100 forces. */
  logitBias: z
    .record(z.string().regex(/^\d+$/, 'keys are token ids'), z.number().min(-100).max(100))
    .refine((r) => Object.keys(r).length <= 1024, { message: 'at most 1024 token ids' })
    .optional(),
  /** A whole number from 0 to Number.MAX_SAFE_INTEGER (2^53 − 1; a larger one is no exact integer in JSON). */
  seed: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
});
export type SamplingSettings = z.infer<typeof SamplingSettings>;

const tokenId = z.number().int().min(0);

/** The most new tokens a request may ask for (the context clips it further). */
export const MAX_NEW_TOKENS = 1_000_000;

/**
 * A generation request. Exactly one prompt form: text, ids, chat messages, or
 * several rows of text/ids (one batched request).
 */
export const GenerateRequest = z
  .object({
    /** Loaded model id; omitted: the default (first loaded) model. */
    model: z.string().min(1).optional(),
    prompt: z.string().optional(),
    promptIds: z.array(tokenId).min(1).optional(),
    messages: z.array(ChatMessage).min(1).optional(),
    prompts: z.array(z.string()).min(1).optional(),
    promptIdRows: z.array(z.array(tokenId).min(1)).min(1).optional(),
    /** Render `prompt` through the package's chat template as one user message. */
    chat: z.boolean().optional(),
    /** System prompt for `chat`/`messages`. */
    system: z.string().optional(),
    /**
     * `messages` end with an assistant message the reply continues (Anthropic's prefill, vLLM's
     * continue_final_message): the prompt ends where its text ends, and the reply's text is the continuation.
     */
    continueFinal: z.boolean().optional(),
    /**
     * A thinking model (one whose template has a switch for it, `enable_thinking`): reason before answering
     * (true) or answer at once (false). Omitted: as the template does by default.
     */
    thinking: z.boolean().optional(),
    /**
     * A thinking model reasons for at most this many tokens: then its reasoning is closed for it (a line break
     * and the closing marker) and it answers. Counts in maxNewTokens like any token.
     */
    thinkingBudget: z.number().int().min(0).max(1_000_000).optional(),
    /**
     * How hard a thinking model reasons (OpenAI's reasoning_effort, Anthropic's effort, Ollama's think level): the
     * chat template gets it as `reasoning_effort` (gpt-oss's reads low, medium, high), and without a thinkingBudget
     * `minimal` and `low` bound the reasoning (256 and 1024 tokens). `none` is `thinking: false`.
     */
    reasoningEffort: z.enum(['minimal', 'low', 'medium', 'high', 'xhigh', 'max']).optional(),
    /** Copies of the prompt (of each, with prompts or promptIdRows) to generate (OpenAI `n`); every row reserves. */
    rows: z.number().int().min(1).max(64).optional(),
    /**
     * Any whole number: beyond what the context leaves, the scheduler clips it to that and says so (the clip names
     * the number asked), as llama.cpp's -n and the APIs' max_tokens do.
     */
    maxNewTokens: z.number().int().min(1).optional(),
    sampling: SamplingSettings.optional(),
    /**
     * Report each generated token's log-probability under the model (before any sampling setting) and this many
     * most likely alternatives (0–20).
     */
    logprobs: z.number().int().min(0).max(20).optional(),
    /** `json`: each reply is one JSON object (sampling keeps to tokens that can continue one; it ends when it closes). */
    responseFormat: z.enum(['text', 'json']).optional(),
    /**
     * Structured output: each reply is one JSON object that conforms to this JSON Schema (JSON mode implied).
     * kvdesk's subset: see the README; what it cannot enforce is refused.
     */
    jsonSchema: z.record(z.string(), z.unknown()).optional(),
    stop: z.array(z.string().min(1)).max(16).optional(),
    /**
     * Write on past the model's end-of-text tokens, to maxNewTokens (or a stop string, or the context): for
     * benchmarks, whose replies should all be as long (vLLM's ignore_eos).
     */
    ignoreEos: z.boolean().optional(),
    /** Functions the model may call (with `messages`); calls come back in each row's `toolCalls`. */
    tools: z.array(ToolDefinition).min(1).max(128).optional(),
    /** Default `auto`. `required` and a named tool make the reply one call, written to the tool's schema. */
    toolChoice: ToolChoice.optional(),
    /** False: a reply ends after its first call. Default true. */
    parallelToolCalls: z.boolean().optional(),
    /**
     * When `messages` do not fit the context with room for the reply: `refuse` (default; CONTEXT_OVERFLOW) or
     * `drop-oldest`: leave out the oldest turns (never system messages or the last user message) until they do.
     */
    contextOverflow: z.enum(['refuse', 'drop-oldest']).optional(),
    /**
     * With `drop-oldest`: how many of `messages` (system messages not counted) an earlier turn of this
     * conversation left out (its result's `contextDrop.messages`). The turn leaves out at least these, so it
     * continues the same prefix (and its KV); when more must go, it leaves out enough for several turns.
     */
    droppedMessages: z.number().int().min(0).max(1_000_000).optional(),
    /** Keep this conversation's KV between turns. */
    sessionId: z.string().min(1).max(200).optional(),
    /**
     * Without a sessionId: reuse the KV of an earlier request this prompt continues, and keep this one's for
     * the next (the HTTP API's prompt cache; single-row requests, when the host keeps prompt caches).
     */
    promptCache: z.boolean().optional(),
    threadId: z.string().max(200).optional(),
    priority: z.number().int().min(-100).max(100).optional(),
    /**
     * The reply the client expects, mostly (OpenAI's Predicted Outputs: a file being edited): lookup decoding
     * drafts from it first, so the parts of the reply that match it take fewer decode steps. The reply is the
     * model's either way. One reply only (not with rows, prompts or promptIdRows).
     */
    prediction: z.string().max(1_000_000).optional(),
    /** Ends the request with TIMEOUT this many ms after acceptance (queue time included). */
    timeoutMs: z
      .number()
      .int()
      .min(1)
      .max(24 * 3600 * 1000)
      .optional(),
  })
  .refine(
    (r) => [r.prompt, r.promptIds, r.messages, r.prompts, r.promptIdRows].filter((x) => x !== undefined).length === 1,
    { message: 'give exactly one of prompt, promptIds, messages, prompts, promptIdRows' },
  )
  .refine((r) => r.prediction === undefined || ((r.rows ?? 1) === 1 && !r.prompts && !r.promptIdRows), {
    message: 'a prediction goes with one reply: leave out rows (n), prompts and promptIdRows, or the prediction',
    path: ['prediction'],
  });
export type GenerateRequest = z.infer<typeof GenerateRequest>;

/** Why a reply ended. `context`: the context window was full; `tool_calls`: it ended by itself with calls. */
export type FinishReason = 'eos' | 'stop' | 'length' | 'context' | 'cancelled' | 'tool_calls';

/** Present when the KV budget allowed fewer new tokens than asked (SCHEDULER.md capped admission). */
export interface BudgetCap {
  requestedMaxTokens: number;
  admittedMaxTokens: number;
  requestedBytes: number;
  admittedBytes: number;
  availableBytes: number;
}

/** Present when the context window clipped max new tokens at acceptance. */
export interface ContextClip {
  requestedMaxTokens: number;
  clippedMaxTokens: number;
  contextLength: number;
}

/** Present when the `drop-oldest` policy left messages out so the conversation fits the context. */
export interface ContextDrop {
  /** The first this many of the request's messages (system messages not counted) were left out. */
  messages: number;
  contextLength: number;
}

/** A token and its log-probability (natural log) under the model. */
export interface TokenLogprob {
  id: number;
  /** The token's text on its own (a piece of a multi-byte character decodes to U+FFFD). */
  token: string;
  /** The token's UTF-8 bytes (for byte-level vocabularies, the exact bytes, even of a partial character). */
  bytes: number[];
  /** A SentencePiece byte token (`<0x41>`), whose text and bytes may be another token's too (`A`). */
  byte?: true;
  logprob: number;
}

/** A generated token's log-probability and the most likely alternatives at its position (most likely first). */
export interface GeneratedTokenLogprob extends TokenLogprob {
  top: TokenLogprob[];
  /**
   * Where this token's text starts in the row's decoded text (UTF-16 code units): where the character that
   * holds its first byte starts (a byte token in the middle of a character points at that character).
   */
  textOffset: number;
}

/**
 * A call being written (tool calls held to their schemas only): its index among the reply's calls and the
 * argument text written since the last frame. A call's first delta carries its id and name; the complete call
 * still arrives in `toolCalls` (with the same id) once written.
 */
export interface ToolCallDelta {
  index: number;
  id?: string;
  name?: string;
  arguments: string;
}

/** One row's output. */
export interface RowResult {
  tokenIds: number[];
  text: string;
  finishReason: FinishReason;
  /** With `logprobs`: one entry per token of tokenIds, but the end token a reply ended at (OpenAI lists none). */
  logprobs?: GeneratedTokenLogprob[];
  /** With `tools`: the calls the reply made (`text` is the rest of it). */
  toolCalls?: ToolCall[];
  /** The stop string that ended the reply (finishReason `stop`). */
  stopSequence?: string;
  /** A thinking model's reasoning before its answer (`text` is the answer). */
  reasoning?: string;
  /** How many of tokenIds were reasoning (its markers included). */
  reasoningTokens?: number;
}

/** The final result of a generation. Row 0 is repeated at the top level for convenience. */
export interface GenerationResult {
  requestId: string;
  modelId: string;
  tokenIds: number[];
  text: string;
  reasoning?: string;
  reasoningTokens?: number;
  finishReason: FinishReason;
  rows: RowResult[];
  promptTokens: number;
  /** Prompt tokens served from a session's retained KV instead of being recomputed. */
  reusedTokens: number;
  bpt: number;
  /** KV bytes the request's tensors held at the end. */
  kvBytes: number;
  /** What the KV budget held for it at the most: its own reservation and, in a padded batch, its padding. */
  reservedBytes: number;
  /** Of `reservedBytes`, the most padding a batch's wider rows charged it while it ran (absent: none). */
  paddingBytes?: number;
  budgetCap?: BudgetCap;
  clipped?: ContextClip;
  contextDrop?: ContextDrop;
  /**
   * Lookup decoding (present when a draft was checked): tokens guessed from earlier text and those the model
   * took — each one taken is a decode step saved.
   */
  lookup?: LookupCount;
  /**
   * Why the request's `prediction` went unused (absent: it was drafted from, or there was none). The reply is the
   * model's either way.
   */
  predictionUnused?: PredictionUnused;
  timings: { queueMs: number; ttftMs: number; totalMs: number; tokensPerSecond: number };
}

/** Lookup decoding in a generation (or since the host started): tokens drafted and checked, and those taken. */
/**
 * Why a request's `prediction` was not drafted from: `lookup_off`, the host's lookup decoding is off (serve --lookup
 * 0); `lookup_unavailable`, the loaded model's graph cannot check drafts (`detail` says why); `batched`, the reply
 * ran beside other streams all along (lookup decoding drafts for a stream running alone).
 */
export interface PredictionUnused {
  reason: 'lookup_off' | 'lookup_unavailable' | 'batched';
  /** lookup_unavailable: what about the model keeps lookup decoding off. */
  detail?: string;
}

export interface LookupCount {
  drafted: number;
  accepted: number;
}

/**
 * Frames of one generation stream, in order: accepted → admitted → started → prefill* → tokens* → done | error, the
 * last frame always done or error, which may come at any point: alone for a request refused before it queues
 * (invalid, too long for the context, never within the KV budget, the queue full), after `accepted` for one cancelled
 * or timed out while queued, after `admitted` for one that ends before the engine starts it. `prefill` frames come
 * only while a long prompt is read in chunks. In the window, a MessagePort per stream carries them (closing it
 * cancels); over the WebSocket, `{ t: 'frame', id, frame }` messages multiplexed by the request's id. Either keeps
 * this order, and cancelling releases the reservation.
 */
export type StreamFrame =
  | {
      type: 'accepted';
      requestId: string;
      modelId: string;
      promptTokens: number;
      rows: number;
      maxNewTokens: number;
      /** A static KV cache's positions: the request needs all of them, whatever its length. */
      fixedTokens?: number;
      clipped?: ContextClip;
      contextDrop?: ContextDrop;
    }
  | {
      type: 'admitted';
      requestId: string;
      reservedBytes: number;
      admittedMaxTokens: number;
      budgetCap?: BudgetCap;
    }
  /**
   * The engine began reading the prompt: reusedTokens of it came from KV already held (a session's or the
   * prompt cache's), as the result will say. Not sent for a request that ends before it starts.
   */
  | { type: 'started'; requestId: string; reusedTokens: number }
  /** A long prompt is being read: prompt positions done and in all (a reused session prefix counts as done). */
  | { type: 'prefill'; requestId: string; doneTokens: number; totalTokens: number }
  | {
      type: 'tokens';
      requestId: string;
      /** `logprobs` (with the request's `logprobs`): one entry per id. */
      /** `toolCalls`: calls completed with these tokens (their text is not in `text`). */
      /** `toolCallDeltas`: argument text of calls being written (see ToolCallDelta). */
      rows: Array<{
        ids: number[];
        text: string;
        /** Reasoning written with these tokens (a thinking model's, before its answer's text). */
        reasoning?: string;
        logprobs?: GeneratedTokenLogprob[];
        toolCalls?: ToolCall[];
        toolCallDeltas?: ToolCallDelta[];
      }>;
    }
  | { type: 'done'; requestId: string; result: GenerationResult }
  | { type: 'error'; requestId: string; error: ErrorInfo };
