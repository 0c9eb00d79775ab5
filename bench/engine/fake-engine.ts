/**
 * A stand-in engine process for the chat-view measurement: it speaks kvdesk's
 * engine protocol (src/main/engine/protocol.ts) but runs no model. A generation
 * streams ids from the control file's list at the control file's rate, in
 * frames every 16 ms like the real engine, up to the admitted token count, and
 * reports KV bytes as the real engine would (rows × positions × bpt). This lets
 * the real host, transport and renderer be driven far faster than a CPU model
 * can generate.
 */
import { readFileSync } from 'node:fs';
import type { EngineCommand, EngineEvent, EngineLoadResult } from '../../src/main/engine/protocol';

/** What the benchmark writes to $KVDESK_BENCH_FAKE_CONTROL before each generation. */
export interface FakeControl {
  tokensPerSecond: number;
  ids: number[];
}

const FRAME_INTERVAL_MS = 16;
const bptOf = new Map<string, number>();
const running = new Map<string, { stop: 'stop' | 'cancelled' | null }>();

function send(event: EngineEvent): void {
  if (process.connected) process.send?.(event);
}

function control(): FakeControl {
  const file = process.env.KVDESK_BENCH_FAKE_CONTROL;
  if (!file) return { tokensPerSecond: 1000, ids: [0] };
  return JSON.parse(readFileSync(file, 'utf8')) as FakeControl;
}

function generate(cmd: Extract<EngineCommand, { type: 'generate' }>): void {
  const ctl = control();
  const state = { stop: null as 'stop' | 'cancelled' | null };
  running.set(cmd.requestId, state);
  const bpt = bptOf.get(cmd.modelId) ?? 0;
  const rows = cmd.rows.length;
  const prompt = Math.max(...cmd.rows.map((r) => r.length));
  send({ type: 'started', requestId: cmd.requestId, prefillTokens: rows * prompt, reusedTokens: 0 });
  const started = performance.now();
  let emitted = 0;
  let cursor = 0;
  const finish = (finishReason: 'length' | 'stop' | 'cancelled') => {
    running.delete(cmd.requestId);
    send({
      type: 'done',
      requestId: cmd.requestId,
      finishReason,
      rowFinishReasons: cmd.rows.map(() => finishReason),
      kvBytes: rows * (prompt + emitted) * bpt,
      sessionTokens: 0,
      generatedTokens: emitted,
    });
  };
  const tick = () => {
    if (state.stop) return finish(state.stop);
    const due = Math.min(
      cmd.maxNewTokens,
      Math.floor(((performance.now() - started) / 1000) * ctl.tokensPerSecond) + 1,
    );
    if (due > emitted) {
      const ids: number[] = [];
      for (; emitted < due; emitted++) ids.push(ctl.ids[cursor++ % ctl.ids.length] as number);
      send({
        type: 'tokens',
        requestId: cmd.requestId,
        ids: cmd.rows.map(() => ids),
        kvBytes: rows * (prompt + emitted) * bpt,
      });
    }
    if (emitted >= cmd.maxNewTokens) return finish('length');
    setTimeout(tick, FRAME_INTERVAL_MS);
  };
  tick();
}

/** The reply the real engine gives a load (protocol.ts), for a graph it would run as it is. */
function loadResult(modelId: string): EngineLoadResult {
  return { modelId, logits: { last: true, detail: 'bench stand-in engine: no graph' }, batches: true };
}

process.on('message', (raw) => {
  const cmd = raw as EngineCommand;
  switch (cmd.type) {
    case 'load':
      bptOf.set(cmd.modelId, cmd.spec.bpt);
      send({ type: 'reply', callId: cmd.callId, ok: true, value: loadResult(cmd.modelId) });
      return;
    case 'unload':
      bptOf.delete(cmd.modelId);
      send({ type: 'reply', callId: cmd.callId, ok: true, value: { modelId: cmd.modelId } });
      return;
    case 'stats':
      send({
        type: 'reply',
        callId: cmd.callId,
        ok: true,
        value: { runs: 0, generations: 0, refused: 0, peakBatchRows: 0, models: [...bptOf.keys()], sessions: [] },
      });
      return;
    case 'generate':
      generate(cmd);
      return;
    case 'cancel': {
      const s = running.get(cmd.requestId);
      if (s && !s.stop) s.stop = cmd.reason;
      return;
    }
    case 'dropSession':
      return;
  }
});
process.on('disconnect', () => process.exit(0));
send({ type: 'ready', pid: process.pid });
