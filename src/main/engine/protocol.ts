/**
 * Messages between the host and the engine process. The engine runs in its own
 * process (child_process.fork) because onnxruntime-node's session.run blocks the
 * thread it runs on; the host's event loop must stay free for the UI and API.
 */

import type { LookupCount, PredictionUnused } from '../../shared/contract';
import type { ErrorInfo } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import type { CallGrammar } from './call-constraint';
import type { BudgetSpec } from './reasoning-budget';

/** Sampling settings of one request. temperature 0 (or greedy) means argmax. */
export interface SamplingParams {
  greedy: boolean;
  temperature: number;
  topK: number;
  topP: number;
  minP: number;
  repetitionPenalty: number;
  /** The repetition penalty looks at the last n tokens (prompt and reply) only; absent or 0: all of them. */
  repetitionWindow?: number;
  /** Subtracted per earlier occurrence of a token in the generated tokens (absent or 0: off). */
  frequencyPenalty?: number;
  /** Subtracted once from a token that occurs in the generated tokens (absent or 0: off). */
  presencePenalty?: number;
  /** [token id, bias] pairs added to the logits before sampling (absent: none). */
  logitBias?: Array<[number, number]>;
  seed: number;
  /**
   * Rows come in runs of this many copies of one prompt (several prompts, OpenAI's `n` of each): a row's seed is
   * its copy's (`rowSeed(seed, i % copies)`), so a prompt's replies do not depend on where it sits among the others.
   * Absent: every row is a copy of one prompt.
   */
  copies?: number;
}

/** A token id and its log-probability under the model's own distribution. */
export interface IdLogprob {
  id: number;
  logprob: number;
}

/** The sampled token's log-probability and the `top` most likely ids (most likely first). */
export interface StepLogprob extends IdLogprob {
  top: IdLogprob[];
}

/** Options the engine applies when it creates an onnxruntime session. */
export interface EngineSessionOptions {
  intraOpNumThreads: number;
  executionProviders: string[];
  /** Prompt tokens (rows × positions) one prefill run computes at most; default PREFILL_CHUNK_TOKENS. */
  prefillChunkTokens?: number;
  /** Feed the LM head the last position only (last-position.ts); default true. */
  lastPositionLogits?: boolean;
  /**
   * Whether plain greedy steps score the vocabulary with an 8-bit screen of the LM head and pick exactly from it
   * (head-screen.ts); default true (for vocabularies of 4096 tokens or more), unless KVDESK_HEAD_SCREEN=0 is set.
   * 'always' (or KVDESK_HEAD_SCREEN=always) screens any vocabulary: tests use it on small models.
   */
  headScreen?: boolean | 'always';
  /** Lookup decoding (lookup.ts): tokens one check drafts at most; 0 turns it off; default LOOKUP_DRAFT_TOKENS. */
  lookupDraftTokens?: number;
  /**
   * Whether runs fetch only the positions they add to the KV, and the engine grows its present tensors in place
   * (kv-cache.ts appendSeq), where the graph's presents are plain Concats; default true, unless KVDESK_KV_APPEND=0.
   */
  kvAppend?: boolean;
  /**
   * With kvAppend: whether the KV keeps room after its positions, masked out in every run, so a run's new positions
   * are written into it in place instead of every row's positions moving up (kv-cache.ts withRoom), where the graph
   * passes a check at load; default true, unless KVDESK_KV_GAP=0.
   */
  kvGap?: boolean;
  /**
   * With kvAppend: whether attention reads each past KV and the positions a run adds apart, where every present is
   * read only by attention products (last-position.ts splitPlan), so no run copies the whole KV into a Concat;
   * default true, unless KVDESK_SPLIT_ATTENTION=0. A copy that fails its check at load keeps the Concats.
   */
  splitAttention?: boolean;
}

export type { LookupCount };

/**
 * Lookup decoding's count as the engine ends a generation: with the indices (from 0) of the reply's tokens that
 * were draft tokens the model took, so the host can count those of the reply it keeps (a stop string it matched
 * cuts the steps after it, accepted drafts among them).
 */
export interface EngineLookupCount extends LookupCount {
  acceptedAt: number[];
}

/** How a loaded graph scores positions. */
export interface LogitsPositions {
  /** True when the LM head runs on the last position only (last-position.ts). */
  last: boolean;
  /** What was changed, or why the graph loaded as it is. */
  detail: string;
  /** Greedy picks: from the head's 8-bit screen, exact (head-screen.ts), or why the head is scored in full. */
  screen?: string;
  /** Memory the screen holds beside the weights (its 8-bit head in onnxruntime, and what the exact pick reads). */
  screenBytes?: number;
  /** How runs return the KV: the positions they add (built into the presents in place), or why the presents whole. */
  kv?: string;
  /** How attention reads the KV: past and added positions apart (no Concat of the whole KV), or why the Concat. */
  attention?: string;
  /** How concurrent requests (and a request's rows) run: one batch, padded or only unpadded, or taking turns; why. */
  batching?: string;
}

/** The engine's reply to `load`. */
export interface EngineLoadResult {
  modelId: string;
  logits: LogitsPositions;
  /**
   * Whether its requests run as one batch, each row padded to the longest — on the left, or on the right where a
   * graph's left-padded rows score differently but right-padded ones do not (false: they take turns,
   * as a static cache's and a graph's that cannot batch do, or share a batch only where no row needs padding, as
   * a graph's whose rows score differently padded on either side do: logits.batching says which). The scheduler
   * charges the padding where true.
   */
  batches: boolean;
}

/** Why a generation ended (per request; rows report their own). */
export type FinishReason = 'eos' | 'stop' | 'length' | 'context' | 'cancelled';

/** Host → engine. */
export type EngineCommand =
  | { type: 'load'; callId: number; modelId: string; spec: ModelSpec; options: EngineSessionOptions }
  | { type: 'unload'; callId: number; modelId: string }
  | {
      type: 'generate';
      requestId: string;
      /** Token of the live admission grant the scheduler issued; work without one is refused. */
      grantToken: string;
      modelId: string;
      /** Prompt ids per row (rows are left-padded to one length and run as one batch). */
      rows: number[][];
      maxNewTokens: number;
      sampling: SamplingParams;
      eosTokenIds: number[];
      /** Report the sampled tokens' log-probabilities with this many alternatives (absent: none). */
      logprobs?: number;
      /** JSON mode: each row's reply is one JSON object, with the token table sent under this key before. */
      json?: number;
      /** Structured output (with `json`): the object conforms to this JSON Schema (json-schema.ts's subset). */
      jsonSchema?: Record<string, unknown>;
      /**
       * Tool calls the model may make (tool_choice "auto"), each held to its tool's schema once it opens one;
       * with the token table sent under `key` before. With `json`: the reply is the calls or the JSON object
       * (call-or-json.ts).
       */
      calls?: { key: number; grammar: CallGrammar };
      /**
       * A thinking model's reasoning closed for it after this many tokens (reasoning-budget.ts), with the token
       * table sent under `key` before.
       */
      budget?: { key: number; spec: BudgetSpec };
      /** Chat session whose KV is kept after this turn (rows must be 1). */
      sessionId?: string;
      /** The reply the client predicts, as token ids (rows must be 1): lookup decoding drafts from it first. */
      prediction?: number[];
    }
  | {
      /** Every token's bytes (token i is bytes[offsets[i], offsets[i+1])) and the special ids, for JSON mode. */
      type: 'tokenTable';
      modelId: string;
      /** Which load of the model the bytes belong to (a package loaded again under the same id has others). */
      key: number;
      bytes: Uint8Array;
      offsets: Uint32Array;
      special: number[];
    }
  | { type: 'cancel'; requestId: string; reason: 'stop' | 'cancelled' }
  | { type: 'dropSession'; sessionId: string }
  /**
   * Keeps only a session's first `tokens` positions: what the host kept of a turn that ended on a stop string or a
   * cancel, after steps the engine took before it heard of the end (the budget counts only what the host kept).
   */
  | { type: 'trimSession'; sessionId: string; tokens: number }
  | { type: 'stats'; callId: number };

/** Engine → host. */
export type EngineEvent =
  | { type: 'ready'; pid: number }
  | { type: 'reply'; callId: number; ok: true; value: unknown }
  | { type: 'reply'; callId: number; ok: false; error: ErrorInfo }
  | {
      type: 'started';
      requestId: string;
      /** Prompt tokens the engine actually prefilled (fewer than the prompt when a session prefix was reused). */
      prefillTokens: number;
      reusedTokens: number;
    }
  | {
      /** A long prompt's prefill progress, after each chunk but the last (positions, a reused prefix included). */
      type: 'prefill';
      requestId: string;
      doneTokens: number;
      totalTokens: number;
      /** KV bytes the request's tensors hold right now. */
      kvBytes: number;
    }
  | {
      type: 'tokens';
      requestId: string;
      /** New ids per row since the last frame. */
      ids: number[][];
      /** With the command's `logprobs`: one entry per id of `ids`. */
      logprobs?: StepLogprob[][];
      /** KV bytes the request's tensors hold right now. */
      kvBytes: number;
    }
  | {
      type: 'done';
      requestId: string;
      finishReason: FinishReason;
      rowFinishReasons: FinishReason[];
      kvBytes: number;
      /** Tokens a session now holds in its KV (0 without a session). */
      sessionTokens: number;
      generatedTokens: number;
      lookup?: EngineLookupCount;
      /** The job's prediction was not drafted from: the model cannot check drafts, or the reply never ran alone. */
      predictionUnused?: PredictionUnused;
    }
  | { type: 'failed'; requestId: string; error: ErrorInfo };

/** Engine statistics, used by tests to prove no work ran without admission. */
export interface EngineStats {
  runs: number;
  generations: number;
  refused: number;
  /** Most rows one batched decode step has carried. */
  peakBatchRows: number;
  /** Most bytes of KV (present tensors, padding included) one run of a batch has produced. */
  peakBatchKvBytes: number;
  models: string[];
  /** onnxruntime sessions open in the engine: one per loaded model, plus replaced ones replies still run on. */
  openSessions: number;
  /** The token tables JSON mode uses: model, load key, tokens. */
  tokenTables: Array<{ modelId: string; key: number; tokens: number }>;
  sessions: Array<{ sessionId: string; tokens: number; kvBytes: number }>;
}
