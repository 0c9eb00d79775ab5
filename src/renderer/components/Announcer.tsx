/**
 * The window's polite live region for what a control did without a sign where the focus is (a model loaded or
 * unloaded, a package validated, a limit set), as the chat's reply announcer says a reply's state: always on the
 * page (a region that appears with its text is often not read out), its words replaced at each change. The same
 * words again (a model loaded, unloaded, loaded again) come in a new node, so they are said again.
 */
import { useEffect } from 'react';
import { useApp, useAppStore } from '../bridge/context';
import { elsewhereAnnouncement } from '../lib/reply-announcement';
import type { AppState } from '../store/types';
import { useNarrowWindow } from './Header';

/** The chats a reply is on its way in. */
function replyingIn(s: AppState): Set<string> {
  return new Set(Object.values(s.live).map((l) => l.threadId));
}

/**
 * Says a reply's end in a chat that is not shown (another chat, or the open one behind the Models view; the shown
 * chat's reply is said by its own announcer): the chat list's "replying" dot goes away, which a screen reader hears
 * nothing of. Replies ending together are said together; a chat deleted while it replied is not said.
 */
export function useElsewhereReplies(): void {
  const store = useAppStore();
  useEffect(() => {
    let replying = replyingIn(store.getState());
    return store.subscribe((s, prev) => {
      if (s.live === prev.live) return;
      const was = replying;
      replying = replyingIn(s);
      const said: string[] = [];
      for (const id of was) {
        // The open chat's reply is said by the chat's own announcer, which is there only while the chat is shown.
        if (replying.has(id) || (id === s.activeThreadId && s.view === 'chat')) continue;
        const thread = s.threads.find((t) => t.id === id);
        if (thread) said.push(elsewhereAnnouncement(thread.title, thread.messages.at(-1)));
      }
      if (said.length > 0) s.announce(said.join(' '));
    });
  }, [store]);
}

export function Announcer({ inDrawer = false }: { inDrawer?: boolean }) {
  const said = useApp((s) => s.announcement);
  // While the inspector is an open drawer (a modal dialog), the region is inside it: some screen readers (VoiceOver
  // in Chromium) say nothing of a live region outside an open aria-modal dialog.
  const open = useApp((s) => s.inspectorDrawer);
  const narrow = useNarrowWindow();
  if ((open && narrow) !== inDrawer) return null;
  return (
    <div className="sr-only" role="status" aria-live="polite" data-testid="announcer">
      {said && <span key={said.seq}>{said.text}</span>}
    </div>
  );
}
