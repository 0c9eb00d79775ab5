/**
 * The window's polite live region for what a control did without a sign where the focus is (a model loaded or
 * unloaded, a package validated, a limit set), as the chat's reply announcer says a reply's state: always on the
 * page (a region that appears with its text is often not read out), its words replaced at each change. The same
 * words again (a model loaded, unloaded, loaded again) come in a new node, so they are said again.
 */
import { useApp } from '../bridge/context';
import { useNarrowWindow } from './Header';

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
