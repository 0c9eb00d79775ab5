/** The pages of one address tell each other they are alive (Node's BroadcastChannel is the browser's). */
import { describe, expect, it } from 'vitest';
import { forThisHost, pagesOnline, whyNotKept } from '../../../src/renderer/lib/pending-changes';

describe('pending changes', () => {
  it('a page asked of answers that it is alive; a page that is gone does not, and no page answers for another', async () => {
    const a = pagesOnline('page-a');
    pagesOnline('page-b');
    const asker = pagesOnline('page-c');
    expect(await asker.alive(['page-a', 'page-b', 'page-gone'])).toEqual(new Set(['page-a', 'page-b']));
    expect(await a.alive(['page-gone'])).toEqual(new Set());
    expect(await a.alive([])).toEqual(new Set());
  });

  it('says why the browser could not keep a change', () => {
    expect(whyNotKept(new DOMException('The quota has been exceeded.', 'QuotaExceededError'))).toBe(
      "the browser's storage for this page is full",
    );
    expect(whyNotKept(new DOMException('The database connection is closing.', 'InvalidStateError'))).toBe(
      'InvalidStateError: The database connection is closing.',
    );
    expect(whyNotKept(new Error('no IndexedDB'))).toBe('Error: no IndexedDB');
  });

  it("a change kept for one data folder's kvdesk is made only in that one; one kept where none was said, anywhere", () => {
    const change = { threadId: 't1', savedBy: 'p', owner: 'p', at: 1 };
    expect(forThisHost({ ...change, dataId: 'folder-a' }, 'folder-a')).toBe(true);
    expect(forThisHost({ ...change, dataId: 'folder-a' }, 'folder-b')).toBe(false);
    expect(forThisHost({ ...change, dataId: 'folder-a' }, undefined)).toBe(false);
    expect(forThisHost(change, 'folder-b')).toBe(true);
  });
});
