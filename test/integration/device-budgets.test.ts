/**
 * A KV budget per device, through the real RunnerService: real engine process,
 * real schedulers. This machine has no GPU, so the tests place a model's
 * budget on a GPU key with the host's `budgetDeviceOf` test setting (the
 * engine still runs it on the CPU) and feed nvidia-smi's reading by injection;
 * everything from there on — one scheduler per device, weights counted where
 * they live, refusals naming the device, snapshot, metrics — is the product's.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { NvidiaMemoryResult } from '../../src/main/backends/device-memory';
import { type HostSettings, RunnerService } from '../../src/main/host/runner-service';
import { prometheusText } from '../../src/main/server/metrics';
import { defaultModelDir } from '../helpers/fixtures';
import { holdReplyEnds } from '../helpers/hold-replies';
import { slowModel, unloadablePackage } from '../helpers/models';
import { rejection } from '../helpers/rejection';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;
const hosts: RunnerService[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

/** A host whose next load goes to the device in `place.next`. */
function host(settings: Partial<HostSettings> = {}) {
  const place = { next: 'cpu' };
  let nvidiaReads = 0;
  const nvidia: NvidiaMemoryResult = {
    ok: true,
    gpus: [{ index: 0, totalBytes: 8 * GIB, usedBytes: 1 * GIB }],
  };
  const h = new RunnerService({
    intraOpNumThreads: 2,
    budgetDeviceOf: () => place.next,
    readNvidiaMemory: async () => {
      nvidiaReads++;
      return nvidia;
    },
    ...settings,
  });
  hosts.push(h);
  return { h, place, reads: () => nvidiaReads };
}

const request = (model: string) => ({
  model,
  promptIds: [10, 20, 30, 40, 50],
  maxNewTokens: 6,
  sampling: { greedy: true },
});

describe('one KV budget per device', () => {
  it('derives each device from its own memory and counts weights where they live', async () => {
    const { h, place, reads } = host();
    const a = await h.loadModel(defaultModelDir, { id: 'on-cpu' });
    const cpuBefore = h.snapshot().limitBytes;
    place.next = 'cuda:0';
    const b = await h.loadModel(defaultModelDir, { id: 'on-gpu' });
    expect(reads()).toBe(1);
    const snap = h.snapshot();
    expect(snap.devices.map((d) => d.device)).toEqual(['cpu', 'cuda:0']);
    const [cpu, gpu] = snap.devices;
    expect(cpu?.models).toEqual(['on-cpu']);
    expect(gpu?.models).toEqual(['on-gpu']);
    // The GPU model's weights do not shrink the CPU budget…
    expect(cpu?.limitBytes).toBe(cpuBefore);
    expect(cpu?.derivation.weightsBytes).toBe(a.spec.weightsBytes);
    // …they shrink the GPU's: min(8 GiB × 0.9, 8 − 1 GiB free) − weights − 1 GiB overhead.
    expect(gpu?.derivation.memory).toBe('device-memory');
    expect(gpu?.derivation.weightsBytes).toBe(b.spec.weightsBytes);
    expect(gpu?.limitBytes).toBe(7 * GIB - b.spec.weightsBytes - 1 * GIB);
    expect(gpu?.derivation.formula).toContain('nvidia-smi');
    // The top level is the CPU's budget, as before.
    expect(snap.limitBytes).toBe(cpu?.limitBytes);
    expect(snap.device).toBe('cpu');

    // A second model on the same GPU shares its budget; nvidia-smi is not read again (it would count our weights).
    await h.loadModel(defaultModelDir, { id: 'on-gpu-2' });
    expect(reads()).toBe(1);
    const gpu2 = h.snapshot().devices[1];
    expect(gpu2?.models).toEqual(['on-gpu', 'on-gpu-2']);
    expect(gpu2?.limitBytes).toBe(7 * GIB - 2 * b.spec.weightsBytes - 1 * GIB);
  });

  it("charges a request to its model's device only", async () => {
    const { h, place } = host({ kvBudgetBytes: 64 * MIB });
    await h.loadModel(defaultModelDir, { id: 'on-cpu' });
    place.next = 'cuda:0';
    await h.loadModel(defaultModelDir, { id: 'on-gpu' });
    const seen = { cpu: 0, gpu: 0 };
    const handle = h.generate(request('on-gpu'), (frame) => {
      if (frame.type !== 'tokens') return;
      const [cpu, gpu] = h.snapshot().devices;
      seen.cpu = Math.max(seen.cpu, cpu?.reservedBytes ?? 0);
      seen.gpu = Math.max(seen.gpu, gpu?.reservedBytes ?? 0);
    });
    const result = await handle.result;
    expect(result.tokenIds.length).toBeGreaterThan(0);
    expect(seen.gpu).toBe(result.reservedBytes);
    expect(seen.cpu).toBe(0);
    const [cpu, gpu] = h.snapshot().devices;
    expect(gpu?.counters.admitted).toBe(1);
    expect(gpu?.recent.map((r) => r.id)).toEqual([handle.requestId]);
    expect(cpu?.counters.admitted).toBe(0);
    expect(gpu?.reservedBytes).toBe(0);
  });

  it('refuses on a full device while another device still has room, naming the device', async () => {
    const { h, place } = host({ deviceKvBudgetBytes: { 'cuda:0': 4 * 1024 } });
    await h.loadModel(defaultModelDir, { id: 'on-cpu' });
    place.next = 'cuda:0';
    await h.loadModel(defaultModelDir, { id: 'on-gpu' });
    expect(h.snapshot().devices[1]?.derivation.source).toBe('override');
    const err = await rejection(h.generate(request('on-gpu')).result);
    expect(err.code).toBe('KV_BUDGET_EXCEEDED');
    expect(err.message).toMatch(/^cuda:0: /);
    expect(err.detail).toMatchObject({ device: 'cuda:0', budgetBytes: 4096 });
    // The CPU model is not affected by the GPU's budget.
    const ok = await h.generate(request('on-cpu')).result;
    expect(ok.tokenIds.length).toBeGreaterThan(0);
    // Raising the GPU budget live lets the same request in.
    h.configure({ device: 'cuda:0', kvBudgetBytes: 64 * MIB });
    expect(h.snapshot().devices[1]?.limitBytes).toBe(64 * MIB);
    expect(h.snapshot().limitBytes).not.toBe(64 * MIB);
    const later = await h.generate(request('on-gpu')).result;
    expect(later.tokenIds).toEqual(ok.tokenIds);
    // Clearing it goes back to the derivation.
    h.configure({ device: 'cuda:0', kvBudgetBytes: null });
    expect(h.snapshot().devices[1]?.derivation.source).toBe('derived');
    const bad = await rejection(Promise.resolve().then(() => h.configure({ device: 'nope:3', kvBudgetBytes: 1 })));
    expect(bad.code).toBe('BAD_REQUEST');
    expect(bad.message).toContain('nope:3');
  });

  it('a queued request that a lowered GPU limit can never fit is refused naming the device', async () => {
    const { h, place } = host({ maxRunning: 1 });
    place.next = 'cuda:0';
    await h.loadModel(defaultModelDir, { id: 'on-gpu' });
    const running = h.generate({ ...request('on-gpu'), maxNewTokens: 64 });
    const queued = h.generate(request('on-gpu'));
    expect(h.snapshot().devices[1]?.queue.map((r) => r.id)).toEqual([queued.requestId]);
    h.configure({ device: 'cuda:0', kvBudgetBytes: 4 * 1024 });
    const err = await rejection(queued.result);
    expect(err.code).toBe('KV_BUDGET_EXCEEDED');
    expect(err.message).toMatch(/^cuda:0: /);
    running.cancel();
    await running.result.catch(() => {});
  });

  it('a GPU whose memory cannot be read admits nothing and says which setting fixes it', async () => {
    const { h, place } = host();
    place.next = 'webgpu:0';
    await h.loadModel(defaultModelDir, { id: 'on-webgpu' });
    const gpu = h.snapshot().devices.find((d) => d.device === 'webgpu:0');
    expect(gpu?.limitBytes).toBe(0);
    expect(gpu?.derivation.notes.join(' ')).toContain('--device-memory webgpu:0=SIZE');
    const err = await rejection(h.generate(request('on-webgpu')).result);
    expect(err.code).toBe('KV_BUDGET_EXCEEDED');
    expect(err.message).toContain('webgpu:0');
    expect(err.message).toContain('--device-memory webgpu:0=SIZE');
    expect(h.snapshot().devices.find((d) => d.device === 'webgpu:0')?.counters.admitted).toBe(0);
  });

  it('a configured size gives such a GPU a derived budget', async () => {
    const { h, place } = host({ deviceMemoryBytes: { 'webgpu:0': 4 * GIB } });
    place.next = 'webgpu:0';
    const m = await h.loadModel(defaultModelDir, { id: 'on-webgpu' });
    const gpu = h.snapshot().devices.find((d) => d.device === 'webgpu:0');
    expect(gpu?.limitBytes).toBe(Math.floor(4 * GIB * 0.9) - m.spec.weightsBytes - 1 * GIB);
    expect(gpu?.derivation.formula).toContain('configured');
    const ok = await h.generate(request('on-webgpu')).result;
    expect(ok.tokenIds.length).toBeGreaterThan(0);
  });

  it('a GPU budget goes with its last model, and /metrics shows every device and counts its requests', async () => {
    const { h, place, reads } = host();
    await h.loadModel(defaultModelDir, { id: 'on-cpu' });
    place.next = 'cuda:0';
    await h.loadModel(defaultModelDir, { id: 'on-gpu' });
    const text = prometheusText(h.snapshot());
    const gpu = h.snapshot().devices[1];
    expect(text).toContain(`kvdesk_device_kv_budget_bytes{device="cuda:0"} ${gpu?.limitBytes}`);
    expect(text).toContain(`kvdesk_device_kv_budget_bytes{device="cpu"} ${h.snapshot().limitBytes}`);
    expect(text).toContain(`kvdesk_kv_budget_bytes ${h.snapshot().limitBytes}`);
    // A request on each device: the counters and histograms count both, not only the CPU's.
    const onGpu = await h.generate(request('on-gpu')).result;
    const onCpu = await h.generate(request('on-cpu')).result;
    const after = prometheusText(h.snapshot());
    const line = (name: string) => after.split('\n').find((l) => l.startsWith(`${name} `));
    expect(line('kvdesk_requests_total{event="admitted"}')).toBe('kvdesk_requests_total{event="admitted"} 2');
    expect(line('kvdesk_generation_tokens_total')).toBe(
      `kvdesk_generation_tokens_total ${onGpu.tokenIds.length + onCpu.tokenIds.length}`,
    );
    expect(line('kvdesk_time_to_first_token_seconds_count')).toBe('kvdesk_time_to_first_token_seconds_count 2');
    expect(h.snapshot().counters.admitted).toBe(1); // the CPU's own, which alone was exported before
    await h.unloadModel('on-gpu');
    // The GPU's scheduler went with its last model: its counts stay in the totals (a counter never goes down).
    const later = prometheusText(h.snapshot());
    expect(later.split('\n').find((l) => l.startsWith('kvdesk_requests_total{event="admitted"} '))).toBe(
      'kvdesk_requests_total{event="admitted"} 2',
    );
    expect(later).toContain('kvdesk_time_to_first_token_seconds_count 2');
    expect(h.snapshot().devices.map((d) => d.device)).toEqual(['cpu']);
    // Placed again later: the GPU's memory is read afresh (our weights are gone from it).
    await h.loadModel(defaultModelDir, { id: 'on-gpu' });
    expect(reads()).toBe(2);
  });

  it("a model loaded again on another device leaves the first device's bpt to the models still there", async () => {
    const { h, place } = host();
    place.next = 'cuda:0';
    await h.loadModel(defaultModelDir, { id: 'moves' });
    await h.loadModel(slowModel(), { id: 'stays' });
    await h.generate(request('moves')).result;
    await h.generate(request('stays')).result;
    expect(h.snapshot().devices[1]?.bpt).toBeNull();
    place.next = 'cpu';
    await h.loadModel(defaultModelDir, { id: 'moves', whileIdle: true });
    const gpu = h.snapshot().devices.find((d) => d.device === 'cuda:0');
    expect(gpu?.bpt).toBe(h.listModels().find((m) => m.id === 'stays')?.spec.bpt);
  });

  it("a thread's turn on another device waits for its turn queued or running on the first: refused, not counted twice", async () => {
    const { h, place } = host({ maxRunning: 1 });
    await h.loadModel(defaultModelDir, { id: 'a' });
    place.next = 'cuda:0';
    await h.loadModel(defaultModelDir, { id: 'b' });
    // Replies that cannot end before they are stopped: one holds the CPU's only slot, then the thread's turn does.
    const held = holdReplyEnds(h.engine, 2);
    const blocker = h.generate({ ...request('a'), maxNewTokens: 1500 });
    const onA = h.generate({ ...request('a'), maxNewTokens: 1500, sessionId: 's' });
    const sessionsOf = () => h.snapshot().devices.map((d) => d.sessions.map((x) => [x.sessionId, x.modelId, x.state]));
    const refusedOnB = async (state: string) => {
      const onB = h.generate({ ...request('b'), sessionId: 's' });
      // Refused at once: nothing of it waits or runs on b's device.
      expect(h.snapshot().devices.map((d) => [...d.queue, ...d.running].map((r) => r.id))).not.toContainEqual([
        onB.requestId,
      ]);
      const err = await rejection(onB.result);
      expect(err.code).toBe('SESSION_INVALID');
      expect(err.message).toBe(
        `Session s has a ${state} turn (${onA.requestId}) on model a (cpu); this turn is for model b (cuda:0). ` +
          'Wait for that turn to end or cancel it, then send this one.',
      );
      expect(err.detail).toMatchObject({ sessionId: 's', state, turnRequestId: onA.requestId, sessionModelId: 'a' });
      expect(sessionsOf()).toEqual([[['s', 'a', state]], []]);
    };
    await refusedOnB('queued');
    blocker.cancel('user');
    await blocker.result.catch(() => undefined);
    await vi.waitFor(() => expect(h.snapshot().running.map((r) => r.id)).toEqual([onA.requestId]));
    await refusedOnB('running');
    onA.cancel('user');
    await onA.result.catch(() => undefined);
    held.restore();
    // Once it ended, the thread moves: its KV on the CPU goes, and only b's is held, where b's budget counts it.
    const onB = await h.generate({ ...request('b'), sessionId: 's' }).result;
    const tokens = onB.promptTokens + onB.tokenIds.length - 1;
    expect(sessionsOf()).toEqual([[], [['s', 'b', 'idle']]]);
    expect(h.snapshot().devices.map((d) => d.heldBytes)).toEqual([0, tokens * 1024]);
    expect((await h.engine.stats()).sessions).toEqual([{ sessionId: 's', tokens, kvBytes: tokens * 1024 }]);
    expect(h.sessionMirror('s')?.modelId).toBe('b');
  });

  it('a load the engine refuses leaves no empty GPU budget behind', async () => {
    const { h, place, reads } = host();
    place.next = 'cuda:0';
    // A valid package the engine cannot run (an operator onnxruntime lacks): refused after the GPU budget was prepared.
    const err = await rejection(h.loadModel(unloadablePackage(), { id: 'x' }));
    expect(err.code).toBe('MODEL_LOAD_FAILED');
    expect(reads()).toBe(1);
    expect(h.snapshot().devices.map((d) => d.device)).toEqual(['cpu']);
  });
});
