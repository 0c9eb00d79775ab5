import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { endedEmpty, inheritVersions, MAX_VERSIONS, showVersion, versionsOf } from '../../../src/renderer/lib/versions';
import type { StoredMessage } from '../../../src/shared/api';
import { StoredMessage as StoredMessageSchema } from '../../../src/shared/api';

const reply = (content: string, extra: Partial<StoredMessage> = {}): StoredMessage => ({
  id: 'a1',
  role: 'assistant',
  content,
  createdAt: content.length,
  ...extra,
});

/** A reply regenerated once per text after the first: what the store does on each regenerate. */
function regenerated(texts: string[]): StoredMessage {
  let m = reply(texts[0] as string);
  for (const t of texts.slice(1)) m = { ...reply(t), ...inheritVersions(m) };
  return m;
}

describe('versions of a reply', () => {
  it('regenerating keeps the replaced reply; the new one is shown last', () => {
    const m = regenerated(['one', 'two', 'three']);
    expect(m.content).toBe('three');
    expect(m.altIndex).toBe(2);
    expect(versionsOf(m).map((v) => v.content)).toEqual(['one', 'two', 'three']);
  });

  it('showing a version keeps every version in its place, and the message its own id and role', () => {
    const m = regenerated(['one', 'two', 'three']);
    const first = showVersion(m, 0);
    expect(first).toMatchObject({ id: 'a1', role: 'assistant', content: 'one', altIndex: 0 });
    expect(versionsOf(first).map((v) => v.content)).toEqual(['one', 'two', 'three']);
    // A version keeps its own reasoning and stats, and a version without them has none.
    const thought = { ...reply('r'), reasoning: 'hm', stats: { tokens: 3 } };
    const both = showVersion({ ...reply('plain'), ...inheritVersions(thought) }, 0);
    expect(both).toMatchObject({ content: 'r', reasoning: 'hm', stats: { tokens: 3 } });
    const back = showVersion(both, 1);
    expect(back.content).toBe('plain');
    expect(back).not.toHaveProperty('reasoning');
    expect(back).not.toHaveProperty('stats');
  });

  it('a version keeps its own tool calls and their routes; a reply of calls only is kept', () => {
    const calls = [{ id: 'c1', name: 'add', arguments: '{}' }];
    const m = {
      ...reply('words'),
      ...inheritVersions(reply('', { toolCalls: calls, toolRoutes: { add: { server: 's', tool: 'add' } } })),
    };
    expect(m.toolCalls).toBeUndefined();
    const first = showVersion(m, 0);
    expect(first).toMatchObject({ content: '', toolCalls: calls, toolRoutes: { add: { server: 's', tool: 'add' } } });
    expect(showVersion(first, 1).toolCalls).toBeUndefined();
  });

  it('an edited version stays edited, and only it', () => {
    // The person edited the first reply, then regenerated it.
    const m = { ...reply('fresh'), ...inheritVersions(reply('mine', { edited: true })) };
    expect(m.edited).toBeUndefined();
    const mine = showVersion(m, 0);
    expect(mine).toMatchObject({ content: 'mine', edited: true });
    const fresh = showVersion(mine, 1);
    expect(fresh.content).toBe('fresh');
    expect(fresh.edited).toBeUndefined();
    expect(StoredMessageSchema.safeParse(mine).success).toBe(true);
  });

  it('a refusal or an empty reply is not kept as a version; a user message has none', () => {
    const refused = reply('', { stats: { error: { code: 'KV_BUDGET_EXCEEDED', message: 'no' } } });
    expect(inheritVersions(refused)).toEqual({});
    const afterRefusal = { ...reply('ok'), ...inheritVersions({ ...refused, ...inheritVersions(reply('first')) }) };
    expect(versionsOf(afterRefusal).map((v) => v.content)).toEqual(['first', 'ok']);
    expect(inheritVersions({ ...reply('hi'), role: 'user' })).toEqual({});
    expect(inheritVersions(undefined)).toEqual({});
    // A reply that is all reasoning (cut off before it answered) is a version.
    expect(versionsOf({ ...reply('x'), ...inheritVersions(reply('', { reasoning: 'thinking' })) })).toHaveLength(2);
  });

  it('a reply the model ended without writing anything is a version (regenerating it counts on: 3 / 3)', () => {
    const empty = reply('', { stats: { tokens: 1, finishReason: 'eos' } });
    expect(endedEmpty(empty)).toBe(true);
    // one, then the empty one, then another: three versions, the empty one in its place.
    const m = { ...reply('three'), ...inheritVersions({ ...empty, ...inheritVersions(reply('one')) }) };
    expect(versionsOf(m).map((v) => v.content)).toEqual(['one', '', 'three']);
    expect(m.altIndex).toBe(2);
    expect(showVersion(m, 1)).toMatchObject({ content: '', stats: { finishReason: 'eos' }, altIndex: 1 });
    // Stopped before it wrote, cut off by a reload, or refused: not a reply the model ended.
    expect(endedEmpty(reply('', { stats: { finishReason: 'cancelled' } }))).toBe(false);
    expect(endedEmpty(reply('', { stats: { finishReason: 'interrupted' } }))).toBe(false);
    expect(endedEmpty(reply('', { stats: { error: { code: 'X', message: 'no' } } }))).toBe(false);
    expect(endedEmpty(reply('', { reasoning: 'hm', stats: { finishReason: 'eos' } }))).toBe(false);
    expect(inheritVersions(reply('', { stats: { finishReason: 'cancelled' } }))).toEqual({});
  });

  it(`keeps the newest ${MAX_VERSIONS}`, () => {
    const texts = Array.from({ length: MAX_VERSIONS + 5 }, (_, i) => `v${i}`);
    const m = regenerated(texts);
    expect(versionsOf(m).map((v) => v.content)).toEqual(texts.slice(-MAX_VERSIONS));
    expect(StoredMessageSchema.safeParse(m).success).toBe(true);
  });

  it('any walk through the versions shows each in its place and changes none (property)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.string({ maxLength: 6 }).map((s) => `v${s}`),
          { minLength: 1, maxLength: 8 },
        ),
        fc.array(fc.nat(), { maxLength: 10 }),
        (texts, walk) => {
          let m = regenerated(texts);
          const all = versionsOf(m);
          for (const step of walk) {
            const k = step % all.length;
            m = showVersion(m, k);
            expect(m.content).toBe(all[k]?.content);
            expect(versionsOf(m)).toEqual(all);
            expect(StoredMessageSchema.safeParse(m).success).toBe(true);
          }
        },
      ),
    );
  });

  it('an index out of range changes nothing', () => {
    const m = regenerated(['one', 'two']);
    expect(showVersion(m, 5)).toBe(m);
    expect(showVersion(reply('only'), 0)).toEqual(reply('only'));
  });
});
