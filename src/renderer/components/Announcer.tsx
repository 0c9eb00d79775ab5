/**
 * The window's polite live region for what a control did without a sign where the focus is (a model loaded or
 * unloaded, a package validated, a limit set), as the chat's reply announcer says a reply's state: always on the
 * page (a region that appears with its text is often not read out), its words replaced at each change. The same
 * words again (a model loaded, unloaded, loaded again) come in a new node, so they are said again.
 */
import { useApp } from '../bridge/context';

export function Announcer() {
  const said = useApp((s) => s.announcement);
  return (
    <div className="sr-only" role="status" aria-live="polite" data-testid="announcer">
      {said && <span key={said.seq}>{said.text}</span>}
    </div>
  );
}
