import { describe, expect, it } from 'vitest';
import { budgetBar } from '../../../src/renderer/lib/budget-segments';
import { requestView, snapshot } from './fixtures';

describe('budget bar segments', () => {
  it('splits each running request into used and reserved-not-yet-used, then sessions, then free', () => {
    const snap = snapshot({
      limitBytes: 1000,
      reservedBytes: 500,
      usedBytes: 120,
      heldBytes: 100,
      freeBytes: 400,
      running: [
        requestView({ id: 'r1', threadId: 't1', reservedBytes: 300, usedBytes: 100 }),
        requestView({ id: 'r2', reservedBytes: 200, usedBytes: 20 }),
      ],
      sessions: [
        {
          sessionId: 's1',
          modelId: 'm',
          state: 'idle',
          tokens: 10,
          heldBytes: 100,
          bpt: 10,
          createdAt: 0,
          lastUsedAt: 0,
          closing: false,
        },
        {
          sessionId: 't1',
          modelId: 'm',
          state: 'running',
          tokens: 0,
          heldBytes: 0,
          bpt: 10,
          createdAt: 0,
          lastUsedAt: 0,
          closing: false,
        },
      ],
    });
    const bar = budgetBar(snap, (id) => (id === 't1' ? 'Story' : undefined));
    expect(bar.segments.map((s) => [s.kind, s.bytes])).toEqual([
      ['used', 100],
      ['reserved', 200],
      ['used', 20],
      ['reserved', 180],
      ['held', 100],
      ['free', 400],
    ]);
    expect(bar.segments.reduce((n, s) => n + s.fraction, 0)).toBeCloseTo(1);
    expect(bar.totals).toEqual({ used: 120, reserved: 380, held: 100, free: 400 });
    expect(bar.segments[0]?.label).toContain('(Story)');
    expect(bar.segments[0]?.label).toContain('100 bytes');
    expect(bar.limitAt).toBe(1);
  });

  it('scales to usage over a lowered limit and marks where the limit is', () => {
    const snap = snapshot({
      limitBytes: 500,
      reservedBytes: 1000,
      freeBytes: 0,
      running: [requestView({ reservedBytes: 1000, usedBytes: 0 })],
    });
    const bar = budgetBar(snap);
    expect(bar.scaleBytes).toBe(1000);
    expect(bar.limitAt).toBe(0.5);
    expect(bar.segments.map((s) => s.kind)).toEqual(['reserved']);
    // The mark says where the limit is and by how much the budget is over it.
    expect(bar.limitLabel).toBe(
      'limit 500 B, 500 B over it: running replies finish, nothing new starts until it is under',
    );
    expect(budgetBar(snapshot({ limitBytes: 500, freeBytes: 500 })).limitLabel).toBe('limit 500 B');
  });

  it('an idle budget is one free segment', () => {
    const bar = budgetBar(snapshot({ limitBytes: 4096, freeBytes: 4096 }));
    expect(bar.segments).toHaveLength(1);
    expect(bar.segments[0]).toMatchObject({ kind: 'free', bytes: 4096, fraction: 1 });
  });
});
