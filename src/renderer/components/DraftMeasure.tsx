/** The draft's prompt against the model's context, under the message box. */
import { useEffect, useRef, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { Attachment, PromptMeasure } from '../../shared/api';
import { useApp, useBridge } from '../bridge/context';
import { lastReplyDrop } from '../bridge/prompt';
import { formatInteger } from '../lib/format';

/**
 * What sending the draft would do to the context, measured by the host as the draft is typed (after a pause):
 * the next prompt's tokens against the model's context, and whether the oldest messages would be left out (or,
 * set to refuse, the turn refused).
 */
export function DraftMeasure({ threadId, text, files }: { threadId: string; text: string; files: Attachment[] }) {
  const bridge = useBridge();
  const { thread, streaming } = useApp(
    useShallow((s) => ({
      thread: s.threads.find((t) => t.id === threadId),
      streaming: Object.values(s.live).some((l) => l.threadId === threadId),
    })),
  );
  const [measure, setMeasure] = useState<PromptMeasure | null>(null);
  // The chat as it is, not only how many messages: another version shown, a reply edited, or a reply that another
  // window writes into it change the prompt too.
  const messages = thread?.messages;
  const model = useApp((s) => s.activeModelId);
  // One measure in flight at a time: a pause while one runs measures again once it is back.
  const inFlight = useRef(false);
  const [again, setAgain] = useState(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: measured again when the draft, the chat or the model changes
  useEffect(() => {
    if ((!text.trim() && files.length === 0) || streaming) {
      setMeasure(null);
      return;
    }
    let current = true;
    const timer = setTimeout(() => {
      if (inFlight.current) return;
      inFlight.current = true;
      void bridge.measureDraft(threadId, text, files).then((m) => {
        inFlight.current = false;
        if (current) setMeasure(m);
        else setAgain((n) => n + 1); // the draft changed meanwhile: measure what it is now
      });
    }, 250);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [
    text,
    files,
    threadId,
    messages,
    streaming,
    model,
    again,
    thread?.contextOverflow,
    thread?.systemPrompt,
    thread?.maxNewTokens,
  ]);
  if (!measure || (!text.trim() && files.length === 0) || !thread) return null;
  const before = lastReplyDrop(thread.messages)?.messages ?? 0;
  // Refused, whichever way the chat overflows: leaving out all the older messages does not make room for one
  // that is itself longer than the context (nothing is then left out: the turn is refused).
  const over = measure.promptTokens >= measure.contextLength;
  const more = over ? 0 : (measure.droppedMessages ?? 0) - before;
  return (
    <span
      className={`num draft-measure ${over ? 'over' : ''}`}
      data-testid="draft-measure"
      data-prompt-tokens={measure.promptTokens}
      data-context={measure.contextLength}
      title="The prompt the model would read if you sent this now (the conversation, your message and the template), against its context."
    >
      {formatInteger(measure.promptTokens)} / {formatInteger(measure.contextLength)} tokens
      {more > 0 ? ` · ${formatInteger(more)} more of the oldest messages would be left out` : ''}
      {over ? ' · too long for the context' : ''}
    </span>
  );
}
