/**
 * The engine's state machine, independent of how messages arrive (a forked
 * child process today; an Electron utilityProcess later). Holds loaded models,
 * session KV and running generations; emits EngineEvents.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { KvdeskError, toErrorInfo } from '../../shared/errors';
import { compileCallGrammar } from './call-constraint';
import { LoadedDecoder, type SessionKv } from './decoder';
import type { ReplyForm, TokenTable } from './json-constraint';
import { compileSchema } from './json-schema';
import { releaseKv, truncateSeq } from './kv-cache';
import type { EngineCommand, EngineEvent, EngineLoadResult, EngineStats, StepLogprob } from './protocol';
import { compileBudget } from './reasoning-budget';

/**
 * Token frames are batched: at most one per this many ms per request (the first
 * token and the final flush go at once). Every frame wakes the host, and a
 * wake-up costs the host about 0.3 ms of CPU on a small VM (measured: a Node
 * parent receiving one IPC message every 25 ms), CPU taken from onnxruntime's
 * threads. 50 ms — 20 updates a second, still smooth to read — halves the
 * wake-ups of a 40 tok/s CPU model.
 */
const FRAME_INTERVAL_MS = 50;

interface RunningGeneration {
  stop: 'stop' | 'cancelled' | null;
}

/**
 * Test failpoint: with KVDESK_ENGINE_FAULT_AFTER_RUNS=N the engine fails every
 * session.run after the N-th, so tests can drive the real error path end to end.
 */
function faultAfterRuns(): number {
  const raw = process.env.KVDESK_ENGINE_FAULT_AFTER_RUNS;
  const n = raw === undefined ? Number.NaN : Number(raw);
  return Number.isInteger(n) && n >= 0 ? n : Number.POSITIVE_INFINITY;
}

/**
 * Test failpoint: with KVDESK_ENGINE_HOLD_LOADS=<file>, a load waits while that file exists, so tests can see
 * what the app does during a load as long as they need (a load of these small models takes a fraction of a second).
 */
async function heldLoad(): Promise<void> {
  const file = process.env.KVDESK_ENGINE_HOLD_LOADS;
  while (file && existsSync(file)) await sleep(25);
}

/**
 * Test failpoint: with KVDESK_ENGINE_BLOCK_LOADS=<file>, a load blocks the engine's thread while that file exists,
 * as onnxruntime's own model load does (seconds for a large model, minutes for a 7B): no command, no disconnect is
 * heard meanwhile. The engine first writes its pid into the file, so a test knows that it is blocked, and which
 * process to look for.
 */
function blockedLoad(): void {
  const file = process.env.KVDESK_ENGINE_BLOCK_LOADS;
  if (!file || !existsSync(file)) return;
  writeFileSync(file, String(process.pid));
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (existsSync(file)) Atomics.wait(cell, 0, 0, 25);
}

/** Creates an engine that reports through `emit`. */
export function createEngineCore(emit: (event: EngineEvent) => void) {
  const faultAfter = faultAfterRuns();
  const models = new Map<string, LoadedDecoder>();
  /** Chat sessions' KV, with the decoder that computed it (a package loaded again under the same id is another). */
  const sessions = new Map<string, { modelId: string; decoder: LoadedDecoder; kv: SessionKv }>();
  const running = new Map<string, RunningGeneration>();
  /** Sessions a generation is running on now: their KV is in use. */
  const busySessions = new Set<object>();

  /**
   * Forgets a session and frees its KV's memory now (releaseKv), not at some later garbage collection: an idle engine
   * allocates nothing, so none would come, and a deleted chat or an unloaded model kept its KV's bytes for as long as
   * the engine stayed idle. A session a generation still runs on is forgotten now and freed when that ends.
   */
  function dropSession(id: string): void {
    const session = sessions.get(id);
    if (!session) return;
    sessions.delete(id);
    if (!busySessions.has(session)) releaseKv(session.kv.past.values(), new Map());
  }
  /** Generations running on each decoder, and decoders replaced or unloaded while some still ran. */
  const inUse = new Map<LoadedDecoder, number>();
  const retired = new Set<LoadedDecoder>();
  /**
   * Each model's token bytes, for JSON mode, under the key of the host's load they belong to: the host sends
   * them before a JSON request whose key the engine does not hold.
   */
  const tokenTables = new Map<string, { key: number; table: TokenTable }>();
  const stats = { runs: 0, generations: 0, refused: 0 };
  /** Every decoder whose onnxruntime session is open: loaded ones, and replaced ones a reply still runs on. */
  const openDecoders = new Set<LoadedDecoder>();

  function reply(callId: number, fn: () => Promise<unknown>): void {
    fn().then(
      (value) => emit({ type: 'reply', callId, ok: true, value: value ?? null }),
      (err) => emit({ type: 'reply', callId, ok: false, error: toErrorInfo(err) }),
    );
  }

  function sessionBytes(kv: SessionKv): number {
    let total = 0;
    for (const t of kv.past.values()) total += (t.data as Float32Array).byteLength;
    return total;
  }

  function snapshotStats(): EngineStats {
    return {
      ...stats,
      peakBatchRows: Math.max(0, ...[...models.values()].map((m) => m.peakBatchRows)),
      peakBatchKvBytes: Math.max(0, ...[...models.values()].map((m) => m.peakBatchKvBytes)),
      models: [...models.keys()],
      openSessions: openDecoders.size,
      tokenTables: [...tokenTables].map(([modelId, t]) => ({
        modelId,
        key: t.key,
        tokens: t.table.offsets.length - 1,
      })),
      sessions: [...sessions].map(([sessionId, s]) => ({
        sessionId,
        tokens: s.kv.tokens.length,
        kvBytes: sessionBytes(s.kv),
      })),
    };
  }

  async function generate(cmd: Extract<EngineCommand, { type: 'generate' }>): Promise<void> {
    const model = models.get(cmd.modelId);
    if (!model) throw new KvdeskError('MODEL_NOT_LOADED', `model ${cmd.modelId} is not loaded in the engine`);
    let session: { modelId: string; decoder: LoadedDecoder; kv: SessionKv } | undefined;
    if (cmd.sessionId) {
      session = sessions.get(cmd.sessionId);
      if (session && (session.modelId !== cmd.modelId || session.decoder !== model)) {
        dropSession(cmd.sessionId);
        session = undefined;
      }
      if (!session) {
        session = { modelId: cmd.modelId, decoder: model, kv: { tokens: [], past: new Map() } };
        sessions.set(cmd.sessionId, session);
      }
    }
    // JSON mode, tool calls and a thinking budget read the vocabulary's bytes, sent under the key of the host's load.
    const key = cmd.json ?? cmd.calls?.key ?? cmd.budget?.key;
    const held = key !== undefined ? tokenTables.get(cmd.modelId) : undefined;
    if (key !== undefined && held?.key !== key) {
      throw new KvdeskError(
        'INTERNAL',
        `${cmd.json !== undefined ? 'JSON mode needs' : cmd.calls ? 'Tool calls need' : 'A thinking budget needs'} the token table of model ${cmd.modelId} (load ${key}), which the host sends first`,
      );
    }
    // The host compiled the schemas already to refuse what it cannot enforce; a failure here is a bug.
    const json: ReplyForm | undefined = held && {
      table: held.table,
      ...(cmd.json !== undefined ? { json: true } : {}),
      ...(cmd.jsonSchema !== undefined ? { schema: compileSchema(cmd.jsonSchema) } : {}),
      ...(cmd.calls ? { calls: compileCallGrammar(cmd.calls.grammar) } : {}),
      ...(cmd.calls || cmd.budget?.spec.held ? { ends: new Set(cmd.eosTokenIds) } : {}),
      ...(cmd.budget ? { budget: compileBudget(cmd.budget.spec) } : {}),
    };
    const state: RunningGeneration = { stop: null };
    running.set(cmd.requestId, state);
    inUse.set(model, (inUse.get(model) ?? 0) + 1);
    if (session) busySessions.add(session);
    stats.generations++;
    const R = cmd.rows.length;
    const withLogprobs = cmd.logprobs !== undefined;
    let pending: number[][] = Array.from({ length: R }, () => []);
    let pendingLogprobs: StepLogprob[][] = Array.from({ length: withLogprobs ? R : 0 }, () => []);
    let pendingCount = 0;
    let lastFlush = 0;
    let lastKv = 0;
    const flush = (): void => {
      if (pendingCount === 0) return;
      emit({
        type: 'tokens',
        requestId: cmd.requestId,
        ids: pending,
        kvBytes: lastKv,
        ...(withLogprobs ? { logprobs: pendingLogprobs } : {}),
      });
      pending = Array.from({ length: R }, () => []);
      if (withLogprobs) pendingLogprobs = Array.from({ length: R }, () => []);
      pendingCount = 0;
      lastFlush = Date.now();
    };
    try {
      const outcome = await model.generate(
        {
          rows: cmd.rows,
          maxNewTokens: cmd.maxNewTokens,
          sampling: cmd.sampling,
          eosTokenIds: cmd.eosTokenIds,
          ...(withLogprobs ? { logprobs: cmd.logprobs } : {}),
          ...(json ? { json } : {}),
          ...(session ? { session: session.kv } : {}),
          ...(cmd.prediction ? { prediction: cmd.prediction } : {}),
        },
        {
          onStart: (prefillTokens, reusedTokens) =>
            emit({ type: 'started', requestId: cmd.requestId, prefillTokens, reusedTokens }),
          onPrefill: (doneTokens, totalTokens, kvBytes) =>
            emit({ type: 'prefill', requestId: cmd.requestId, doneTokens, totalTokens, kvBytes }),
          onStep: (ids, kvBytes, logprobs) => {
            for (let r = 0; r < R; r++) {
              const id = ids[r] as number;
              if (id >= 0) {
                (pending[r] as number[]).push(id);
                const lp = logprobs?.[r];
                if (withLogprobs && lp) (pendingLogprobs[r] as StepLogprob[]).push(lp);
                pendingCount++;
              }
            }
            lastKv = kvBytes;
            if (Date.now() - lastFlush >= FRAME_INTERVAL_MS) flush();
          },
          stopRequested: () => state.stop,
          countRun: () => {
            stats.runs++;
            if (stats.runs > faultAfter) {
              throw new KvdeskError('ENGINE_FAILED', `injected engine fault after ${faultAfter} runs`);
            }
          },
        },
      );
      flush();
      emit({ type: 'done', requestId: cmd.requestId, ...outcome });
    } catch (err) {
      flush();
      // A failed turn leaves its session KV in an unknown state: drop it, the next turn recomputes.
      if (cmd.sessionId) sessions.delete(cmd.sessionId);
      emit({ type: 'failed', requestId: cmd.requestId, error: toErrorInfo(err) });
    } finally {
      running.delete(cmd.requestId);
      if (session) {
        busySessions.delete(session);
        // Dropped while this ran on it (its chat deleted mid-reply, its model unloaded), or by a failure: the KV
        // the turn left it is freed now that nothing reads it.
        if (cmd.sessionId && sessions.get(cmd.sessionId) !== session) releaseKv(session.kv.past.values(), new Map());
      }
      const left = (inUse.get(model) ?? 1) - 1;
      if (left > 0) inUse.set(model, left);
      else {
        inUse.delete(model);
        // Replaced or unloaded while this ran on it: released now that nothing does.
        if (retired.delete(model)) void dispose(model);
      }
    }
  }

  /**
   * Releases a decoder that was replaced or unloaded: at once when nothing runs on it, else when its last
   * generation ends (the host guards against this; a load racing a request's first-use load must not pull the
   * session from under replies).
   */
  async function release(decoder: LoadedDecoder): Promise<void> {
    if ((inUse.get(decoder) ?? 0) === 0) await dispose(decoder);
    else retired.add(decoder);
  }

  /** Ends a decoder's onnxruntime session (its weights' memory with it). */
  function dispose(decoder: LoadedDecoder): Promise<void> {
    openDecoders.delete(decoder);
    return decoder.dispose();
  }

  /** Handles one command from the host. */
  function handle(cmd: EngineCommand): void {
    switch (cmd.type) {
      case 'load':
        reply(cmd.callId, async () => {
          await heldLoad();
          blockedLoad();
          const decoder = await LoadedDecoder.load(cmd.spec, cmd.options);
          openDecoders.add(decoder);
          // Read once this load is done: another load of the id may have ended while it ran (two loads at once
          // each found none before), and its decoder is replaced here too, not left holding its weights.
          const previous = models.get(cmd.modelId);
          models.set(cmd.modelId, decoder);
          if (previous) await release(previous);
          // A graph whose batches take only rows that need no padding pads nothing: the scheduler charges no padding.
          // Padding on the right is padding all the same: charged.
          const batches = decoder.batchable && (decoder.padded || decoder.rightPadded);
          const loaded: EngineLoadResult = { modelId: cmd.modelId, logits: decoder.logits, batches };
          return loaded;
        });
        return;
      case 'unload':
        reply(cmd.callId, async () => {
          const model = models.get(cmd.modelId);
          models.delete(cmd.modelId);
          tokenTables.delete(cmd.modelId);
          for (const [id, s] of sessions) if (s.modelId === cmd.modelId) dropSession(id);
          if (model) await release(model);
          return { modelId: cmd.modelId };
        });
        return;
      case 'generate':
        // Defence in depth: the host only sends work for live grants; a command without one is refused here too.
        if (typeof cmd.grantToken !== 'string' || cmd.grantToken.length === 0) {
          stats.refused++;
          emit({
            type: 'failed',
            requestId: cmd.requestId,
            error: { code: 'NOT_ADMITTED', message: 'engine work requires an admission grant from the scheduler' },
          });
          return;
        }
        void generate(cmd).catch((err) => emit({ type: 'failed', requestId: cmd.requestId, error: toErrorInfo(err) }));
        return;
      case 'cancel': {
        const state = running.get(cmd.requestId);
        if (state && !state.stop) state.stop = cmd.reason;
        return;
      }
      case 'tokenTable':
        tokenTables.set(cmd.modelId, {
          key: cmd.key,
          table: { bytes: cmd.bytes, offsets: cmd.offsets, special: new Set(cmd.special) },
        });
        return;
      case 'dropSession':
        dropSession(cmd.sessionId);
        return;
      case 'trimSession': {
        const s = sessions.get(cmd.sessionId);
        if (!s || s.kv.tokens.length <= cmd.tokens) return;
        s.kv.tokens = s.kv.tokens.slice(0, cmd.tokens);
        // A static cache keeps its buffers whole (the next turn rewrites from the first position that differs).
        const kv = s.decoder.spec.kv;
        if (kv.kind === 'dynamic') {
          for (const t of kv.tensors) {
            const held = s.kv.past.get(t.past);
            if (held) s.kv.past.set(t.past, truncateSeq(t, held, cmd.tokens));
          }
        }
        return;
      }
      case 'stats':
        reply(cmd.callId, async () => snapshotStats());
        return;
    }
  }

  return { handle, stats: snapshotStats };
}
