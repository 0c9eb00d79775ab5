/**
 * The note of a chat whose model is not loaded (Composer's ThreadModelNote), rendered to markup: what it tells
 * the person to do depends on whether the library still has the package.
 */
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { createStore } from 'zustand/vanilla';
import { type AppState, createAppStore } from '../../../src/renderer/store';
import type { LibraryEntry, Thread } from '../../../src/shared/api';

// Loaded by name, not imported: the node project's type check leaves out React's types and the renderer's JSX and
// DOM code.
const RENDERER = path.resolve(__dirname, '../../../src/renderer');
const load = <T>(module: string): Promise<T> => import(/* @vite-ignore */ module);
type Create = (type: unknown, props: unknown, ...children: unknown[]) => unknown;
let h: Create;
let renderToStaticMarkup: (element: unknown) => string;
let ThreadModelNote: unknown;
let AppContext: { Provider: unknown };
beforeAll(async () => {
  h = (await load<{ createElement: Create }>('react')).createElement;
  ({ renderToStaticMarkup } = await load<{ renderToStaticMarkup: typeof renderToStaticMarkup }>('react-dom/server'));
  ({ ThreadModelNote } = await load<{ ThreadModelNote: unknown }>(`${RENDERER}/components/Composer.tsx`));
  ({ AppContext } = await load<{ AppContext: typeof AppContext }>(`${RENDERER}/bridge/context.ts`));
});

const thread = { id: 't1', title: 'A chat', modelId: 'gone-model' } as Thread;

function entry(id: string, over: Partial<LibraryEntry> = {}): LibraryEntry {
  return { root: `/models/${id}`, id, missing: false, uploaded: false, addedAt: 1, lastLoadedAt: 1, ...over };
}

/** The note's text with `library` as the host's library; the default model is loaded and picked. */
function note(library: LibraryEntry[]): string {
  // Rendered on the "server", a store is read at its initial state: the state is set at creation.
  const store = createStore<AppState>()(() => ({
    ...createAppStore().getState(),
    models: [{ id: 'default', spec: { displayName: 'default' } }] as unknown as AppState['models'],
    activeModelId: 'default',
    library: [entry('default'), ...library],
  }));
  const html = renderToStaticMarkup(
    h(AppContext.Provider, { value: { store, bridge: {} } }, h(ThreadModelNote, { thread })),
  );
  return html.replace(/<[^>]+>/g, '');
}

describe('ThreadModelNote', () => {
  it('a package the library no longer has (deleted): says so, and to add it again; never to load it', () => {
    const text = note([]);
    expect(text).toBe(
      'This chat was with gone-model, which is not loaded: new replies go to default. It is no longer in the library: add it again in Models to go on with it.',
    );
    expect(text).not.toContain('Load it');
  });

  it('a package in the library but not loadable from the note (its folder missing): load it in Models', () => {
    expect(note([entry('gone-model', { missing: true })])).toMatch(/default\. Load it in Models to go on with it\.$/);
  });

  it('a package in the library: its Load button, no sentence about Models', () => {
    const text = note([entry('gone-model')]);
    expect(text).toMatch(/new replies go to default\.Load gone-model$/);
  });
});
