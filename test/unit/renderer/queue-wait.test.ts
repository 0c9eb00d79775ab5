/**
 * Why a queued reply waits (lib/queue-wait.ts): slots taken, requests ahead, the KV budget committed, or the padding
 * of the batch it would join; or its model loading again.
 */
import { describe, expect, it } from 'vitest';
import type { QueueWait } from '../../../src/renderer/lib/queue-wait';
import { leastReservation, queuedReservation, queueWait, queueWaitBrief } from '../../../src/renderer/lib/queue-wait';
import { deviceSnapshot, requestView, snapshot } from './fixtures';

const queued = (id: string) => requestView({ id, state: 'queued', reservedBytes: 0 });
const running = (id: string) => requestView({ id, state: 'running' });

describe('queueWait', () => {
  it('every running slot taken: slots, whatever its place', () => {
    const s = snapshot({ maxRunning: 2, running: [running('a'), running('b')], queue: [queued('q1'), queued('q2')] });
    expect(queueWait(s, 'q2')).toMatchObject({
      position: 1,
      reason: 'slots',
      running: 2,
      maxRunning: 2,
      device: 'cpu',
    });
  });

  it('a free slot: the head waits for KV, the others behind it', () => {
    const s = snapshot({
      maxRunning: 4,
      freeBytes: 5000,
      limitBytes: 100_000,
      running: [running('a')],
      queue: [queued('q1'), queued('q2')],
    });
    expect(queueWait(s, 'q1')).toMatchObject({ position: 0, reason: 'budget', freeBytes: 5000, limitBytes: 100_000 });
    expect(queueWait(s, 'q2')).toMatchObject({ position: 1, reason: 'behind' });
  });

  it("a head that would fit alone waits for the batch's padding: its own bytes and the batch's width", () => {
    const long = requestView({ id: 'a', promptTokens: 600, maxNewTokens: 40, reservedBytes: 640 * 1024 });
    const short = requestView({ id: 'q1', state: 'queued', reservedBytes: 0, promptTokens: 5, maxNewTokens: 30 });
    const s = snapshot({ maxRunning: 4, freeBytes: 50_000, limitBytes: 700_000, running: [long], queue: [short] });
    expect(queueWait(s, 'q1')).toMatchObject({ reason: 'padding', ownBytes: 35 * 1024, batchWidth: 640 });
    // Not fitting even alone: the budget is what it waits for.
    const tight = snapshot({ maxRunning: 4, freeBytes: 30_000, limitBytes: 700_000, running: [long], queue: [short] });
    expect(queueWait(tight, 'q1')).toMatchObject({ reason: 'budget' });
  });

  it("a request queued on a GPU: that device's figures", () => {
    const gpu = deviceSnapshot({ device: 'cuda:0', maxRunning: 1, running: [running('g')], queue: [queued('q')] });
    const s = snapshot({ devices: [deviceSnapshot(), gpu] });
    expect(queueWait(s, 'q')).toMatchObject({ device: 'cuda:0', reason: 'slots', maxRunning: 1 });
  });

  it('its model loading again after the engine stopped: reloading, before the slots, budget or place', () => {
    const s = snapshot({
      maxRunning: 1,
      freeBytes: 0,
      running: [running('a')],
      queue: [queued('q1'), requestView({ id: 'q2', state: 'queued', reservedBytes: 0, modelId: 'other' })],
    });
    const back = new Set([s.queue[0]?.modelId ?? '']);
    expect(queueWait(s, 'q1', back)).toMatchObject({ position: 0, reason: 'reloading' });
    // Another model's request waits as it would.
    expect(queueWait(s, 'q2', back)).toMatchObject({ position: 1, reason: 'slots' });
    expect(queueWait(s, 'q1')).toMatchObject({ reason: 'slots' });
  });

  it("the least a queued request reserves: its own positions, a static cache's fixed length", () => {
    const own = requestView({
      id: 'q',
      rows: 2,
      sessionPrefixTokens: 10,
      promptTokens: 5,
      maxNewTokens: 30,
      bpt: 1024,
    });
    expect(leastReservation(own)).toBe(2 * 45 * 1024);
    // A static cache reserves its whole length, whatever the prompt and max tokens.
    expect(leastReservation({ ...own, fixedTokens: 48 })).toBe(2 * 48 * 1024);
  });

  it('what it reserves: never more than the limit; a reply whose whole reservation is more is admitted capped', () => {
    // The reviewer's row: 18 prompt tokens and 400 max tokens (418 KiB) after the limit went down to 100 KiB.
    const big = requestView({ id: 'q', state: 'queued', promptTokens: 18, maxNewTokens: 400, bpt: 1024 });
    expect(queuedReservation(big, 1024 * 1024)).toEqual({ bytes: 418 * 1024, capped: false });
    expect(queuedReservation(big, 418 * 1024)).toEqual({ bytes: 418 * 1024, capped: false });
    expect(queuedReservation(big, 100 * 1024)).toEqual({ bytes: 100 * 1024, capped: true });
    // The largest whole number of positions of its rows that fits.
    expect(queuedReservation({ ...big, rows: 3 }, 100 * 1024)).toEqual({ bytes: 99 * 1024, capped: true });
    // A static cache is never capped: its whole length.
    expect(queuedReservation({ ...big, fixedTokens: 48 }, 10 * 1024)).toEqual({ bytes: 48 * 1024, capped: false });
  });

  it('not queued (or no snapshot yet): null', () => {
    expect(queueWait(snapshot({ running: [running('a')] }), 'a')).toBeNull();
    expect(queueWait(null, 'a')).toBeNull();
    expect(queueWait(snapshot(), undefined)).toBeNull();
  });
});

describe('queueWaitBrief', () => {
  it("a queued request's place and why it waits, in a few words (the inspector's row)", () => {
    const slots = snapshot({
      maxRunning: 2,
      running: [running('a'), running('b')],
      queue: [queued('q1'), queued('q2')],
    });
    expect(queueWaitBrief(queueWait(slots, 'q2') as QueueWait)).toBe('position 2 · all 2 running slots are taken');
    const one = snapshot({ maxRunning: 1, running: [running('a')], queue: [queued('q1')] });
    expect(queueWaitBrief(queueWait(one, 'q1') as QueueWait)).toBe('position 1 · the one running slot is taken');
    const kv = snapshot({
      maxRunning: 4,
      freeBytes: 5000,
      limitBytes: 64 * 1024 * 1024,
      running: [running('a')],
      queue: [queued('q1'), queued('q2')],
    });
    expect(queueWaitBrief(queueWait(kv, 'q1') as QueueWait)).toBe(
      'position 1 · waits for KV: 4.88 KiB free of 64.0 MiB',
    );
    expect(queueWaitBrief(queueWait(kv, 'q2') as QueueWait)).toBe('position 2');
    const long = requestView({ id: 'a', promptTokens: 600, maxNewTokens: 40, reservedBytes: 640 * 1024 });
    const short = requestView({ id: 'q1', state: 'queued', reservedBytes: 0, promptTokens: 5, maxNewTokens: 30 });
    const padded = snapshot({ maxRunning: 4, freeBytes: 50_000, limitBytes: 700_000, running: [long], queue: [short] });
    expect(queueWaitBrief(queueWait(padded, 'q1') as QueueWait)).toBe(
      "position 1 · its 35.0 KiB would fit, not padded to the batch's 640 positions",
    );
  });
});
