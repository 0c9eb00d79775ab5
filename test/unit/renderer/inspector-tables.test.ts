/**
 * The inspector's tables (Inspector.tsx), rendered to markup: its Sessions table (a client that keeps a prompt cache
 * per conversation leaves hundreds of idle sessions, which it must not list one by one), a request's KV cell, and
 * its timeline's line for an evicted session, named as the person knows it.
 */
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { createStore } from 'zustand/vanilla';
import { type AppState, createAppStore } from '../../../src/renderer/store';
import type { TimelineEvent } from '../../../src/renderer/store/types';
import type { Thread } from '../../../src/shared/api';
import { PROMPT_CACHE_PREFIX } from '../../../src/shared/prompt-cache';
import type { DeviceBudgetSnapshot, SchedulerSessionView } from '../../../src/shared/scheduler-types';
import { deviceSnapshot, requestView } from './fixtures';

// Loaded by name, not imported: the node project's type check leaves out React's types and the renderer's JSX.
const RENDERER = path.resolve(__dirname, '../../../src/renderer');
const load = <T>(module: string): Promise<T> => import(/* @vite-ignore */ module);
type Create = (type: unknown, props: unknown, ...children: unknown[]) => unknown;
let h: Create;
let renderToStaticMarkup: (element: unknown) => string;
let Sessions: unknown;
let ModelBpts: unknown;
let KvCell: unknown;
let CapCell: unknown;
let SHOWN_SESSIONS: number;
let describeEvent: (e: TimelineEvent, titles?: ReadonlyMap<string, string>) => string;
let AppContext: { Provider: unknown };
beforeAll(async () => {
  h = (await load<{ createElement: Create }>('react')).createElement;
  ({ renderToStaticMarkup } = await load<{ renderToStaticMarkup: typeof renderToStaticMarkup }>('react-dom/server'));
  ({ Sessions, ModelBpts, KvCell, CapCell, SHOWN_SESSIONS, describeEvent } = await load<{
    Sessions: unknown;
    ModelBpts: unknown;
    KvCell: unknown;
    CapCell: unknown;
    SHOWN_SESSIONS: number;
    describeEvent: typeof describeEvent;
  }>(`${RENDERER}/components/Inspector.tsx`));
  ({ AppContext } = await load<{ AppContext: typeof AppContext }>(`${RENDERER}/bridge/context.ts`));
});

function session(sessionId: string, over: Partial<SchedulerSessionView> = {}): SchedulerSessionView {
  return {
    sessionId,
    modelId: 'default',
    state: 'idle',
    tokens: 10,
    heldBytes: 10 * 1024,
    bpt: 1024,
    createdAt: 1,
    lastUsedAt: 1,
    ...over,
  } as SchedulerSessionView;
}

/** The Sessions section's markup for these sessions, with these chats in the store. */
function render(sessions: SchedulerSessionView[], threads: Array<Pick<Thread, 'id' | 'title'>> = []): string {
  const store = createStore<AppState>()(() => ({
    ...createAppStore().getState(),
    threads: threads as Thread[],
  }));
  const devices: DeviceBudgetSnapshot[] = [deviceSnapshot({ sessions })];
  return renderToStaticMarkup(h(AppContext.Provider, { value: { store, bridge: {} } }, h(Sessions, { devices })));
}

const rowIds = (html: string) => [...html.matchAll(/data-session-id="([^"]+)"/g)].map((m) => m[1]);

describe('Sessions', () => {
  it('lists a few sessions, each named by its chat where it has one', () => {
    const html = render(
      [session('t-a', { heldBytes: 1 }), session('t-b', { heldBytes: 2 })],
      [{ id: 't-a', title: 'A' }],
    );
    expect(rowIds(html)).toEqual(['t-a', 't-b']);
    // A chat's session is named by its title; another by its id. In the tooltip, the names are set apart (U+2068 …
    // U+2069): a Hebrew or Arabic title keeps its place in the line.
    expect(html).toMatch(
      /data-session-id="t-a"[^>]*><td class="thread" dir="auto" title="\u2068A\u2069 \(t-a · \u2068default\u2069\)">A</,
    );
    expect(html).toMatch(
      /data-session-id="t-b"[^>]*><td class="thread" dir="auto" title="\u2068t-b\u2069 \(t-b · \u2068default\u2069\)">t-b</,
    );
    expect(html).not.toContain('data-testid="sessions-not-shown"');
  });

  it('shows the busy ones (running, then queued) and the idle ones used last; the rest counted with their KV', () => {
    // 30 idle prompt caches, the later used holding less (the order is recency, not size), a chat's turn queued and
    // another's running (its KV in its request).
    const caches = Array.from({ length: 30 }, (_, i) =>
      session(`${PROMPT_CACHE_PREFIX}${String(i).padStart(6, '0')}`, {
        lastUsedAt: 100 + i,
        heldBytes: (30 - i) * 1024,
      }),
    );
    const html = render([
      ...caches,
      session('t-queued', { state: 'queued', lastUsedAt: 1 }),
      session('t-run', { state: 'running', heldBytes: 0, lastUsedAt: 2 }),
    ]);
    const ids = rowIds(html);
    expect(ids).toHaveLength(SHOWN_SESSIONS);
    expect(ids.slice(0, 2)).toEqual(['t-run', 't-queued']);
    // The 18 used last, the latest first.
    expect(ids.slice(2)).toEqual(
      Array.from({ length: SHOWN_SESSIONS - 2 }, (_, i) => `${PROMPT_CACHE_PREFIX}${String(29 - i).padStart(6, '0')}`),
    );
    // The 12 used longest ago hold 30 + 29 + … + 19 KiB = 294 KiB.
    const line = /data-testid="sessions-not-shown"[^>]*>(.*?)<\/div>/.exec(html)?.[1]?.replace(/<[^>]+>/g, '');
    expect(line).toBe('and 12 more sessions, holding 294 KiB');
  });
});

describe('the timeline line of an evicted session', () => {
  const evicted = (sessionId: string): TimelineEvent => ({
    type: 'evicted',
    at: 1,
    sessionId,
    modelId: 'default',
    tokens: 10,
    bytes: 10 * 1024,
    reason: 'admission',
  });

  it('names its chat, an API prompt cache, or its id', () => {
    const titles = new Map([['t-123', 'Rivers']]);
    // The title set apart (first strong isolate … pop): a Hebrew or Arabic one keeps its place in the line.
    expect(describeEvent(evicted('t-123'), titles)).toMatch(
      /^chat “\u2068Rivers\u2069” dropped 10(\.0)? KiB \(admission\)$/,
    );
    expect(describeEvent(evicted(`${PROMPT_CACHE_PREFIX}abcdef0123`), titles)).toMatch(
      /^API prompt cache abcdef dropped /,
    );
    expect(describeEvent(evicted('t-456789abcdef'), titles)).toMatch(/^session t-456789ab dropped /);
  });
});

describe("a request's KV cell", () => {
  const cell = (over: Parameters<typeof requestView>[0]) =>
    renderToStaticMarkup(h('table', null, h('tbody', null, h('tr', null, h(KvCell, { r: requestView(over) })))))
      .replace(/<[^>]+>/g, ' ')
      .replace(/\s+/g, ' ')
      .trim();

  it('of one cancelled, or failed with its model, while it was queued: none, never "0 B / 0 B"', () => {
    expect(cell({ state: 'cancelled', reservedBytes: 0, usedBytes: 0 })).toBe('none');
    expect(cell({ state: 'failed', reservedBytes: 0, usedBytes: 0 })).toBe('none');
  });

  it('of one queued: what it needs; over the whole limit, capped to at most the limit, never more', () => {
    const queued = { state: 'queued' as const, reservedBytes: 0, promptTokens: 18, maxNewTokens: 400 };
    const kv = (over: Parameters<typeof requestView>[0], limitBytes?: number) =>
      renderToStaticMarkup(
        h('table', null, h('tbody', null, h('tr', null, h(KvCell, { r: requestView(over), limitBytes })))),
      );
    const text = (html: string) =>
      html
        .replace(/<[^>]+>/g, ' ')
        .replace(/\s+/g, ' ')
        .trim();
    expect(text(kv(queued, 1024 * 1024))).toMatch(/^needs at least 418(\.0+)? KiB$/);
    const capped = kv(queued, 100 * 1024);
    expect(text(capped)).toMatch(/^capped: at most 100(\.0+)? KiB$/);
    expect(capped).toContain('data-capped="true"');
    expect(capped).toMatch(/its reply is capped to what fits/);
  });

  it('of one cancelled while it ran: what it used of what it had reserved', () => {
    expect(cell({ state: 'cancelled', admittedAt: 5, reservedBytes: 2048, usedBytes: 1024 })).toMatch(
      /^1(\.0+)? KiB \/ 2(\.0+)? KiB$/,
    );
  });
});

describe("a request's budget cap cell", () => {
  const cap = {
    requestedMaxTokens: 256,
    admittedMaxTokens: 106,
    requestedBytes: 1,
    admittedBytes: 1,
    availableBytes: 1,
  };
  const cell = (over: Parameters<typeof requestView>[0]) =>
    renderToStaticMarkup(h('table', null, h('tbody', null, h('tr', null, h(CapCell, { r: requestView(over) })))));

  it('running: the reservation capped, a fact (the reply may end before it)', () => {
    const html = cell({ budgetCap: cap });
    expect(html).toContain('<div>106</div><div>/ 256</div>');
    expect(html).toContain('the reply stops there unless it ends first');
    expect(html).not.toContain('data-cut');
  });

  it('ended by length: the cap cut it; ended on its own before the cap: muted, the cap cut nothing', () => {
    const cut = cell({ state: 'finished', endedAt: 9, endReason: 'length', generatedTokens: 106, budgetCap: cap });
    expect(cut).toContain('data-cut="true"');
    expect(cut).toContain('the cap ended the reply');
    expect(cut).not.toContain('muted');
    const own = cell({ state: 'finished', endedAt: 9, endReason: 'eos', generatedTokens: 10, budgetCap: cap });
    expect(own).toContain('data-cut="false"');
    expect(own).toContain('class="r num muted"');
    expect(own).toContain('the reply ended before the cap (eos), which cut nothing');
  });

  it('empty when not capped', () => {
    expect(cell({})).toBe('<table><tbody><tr><td class="r num"></td></tr></tbody></table>');
  });
});

describe("the budget's bytes per token", () => {
  // Not set apart, an Arabic model name took the figure after it into its own order: "1,024 نموذج عربي B".
  it("sets each model's name apart from the figures around it", () => {
    const models = [
      { id: 'default', spec: { displayName: 'default', bpt: 1024 } },
      { id: 'arabic', spec: { displayName: 'نموذج عربي', bpt: 2048 } },
    ] as unknown as AppState['models'];
    const store = createStore<AppState>()(() => ({ ...createAppStore().getState(), models }));
    const html = renderToStaticMarkup(
      h(AppContext.Provider, { value: { store, bridge: {} } }, h(ModelBpts, { ids: ['default', 'arabic'] })),
    );
    expect(html).toContain('<bdi>نموذج عربي</bdi> <span class="num">2,048 B</span>');
    expect(html).toContain('<bdi>default</bdi> <span class="num">1,024 B</span>');
  });
});
