/** The open thread: title, messages, composer. */
import { useShallow } from 'zustand/react/shallow';
import { useApp } from '../bridge/context';
import { Composer } from './Composer';
import { MessageList } from './MessageList';

function EmptyThread() {
  const { model, noModels } = useApp(
    useShallow((s) => ({
      model: s.models.find((m) => m.id === s.activeModelId)?.spec.displayName,
      noModels: s.models.length === 0,
    })),
  );
  return (
    <div className="empty" data-testid="empty-thread">
      <h2>{noModels ? 'No model loaded' : `Chat with ${model ?? 'the model'}`}</h2>
      <p>
        {noModels
          ? 'Drop a model package folder anywhere on this window, or open Models.'
          : 'Each chat keeps its KV cache between turns, so follow-up questions only compute what is new. The inspector on the right shows what every reply reserves.'}
      </p>
    </div>
  );
}

export function ChatView() {
  const { threadId, title, count, loaded } = useApp(
    useShallow((s) => {
      const t = s.threads.find((x) => x.id === s.activeThreadId);
      return {
        threadId: t?.id ?? null,
        title: t?.title ?? '',
        count: t?.messages.length ?? 0,
        loaded: s.threadsLoaded,
      };
    }),
  );
  return (
    <section className="main" aria-label="Chat" data-testid="chat-view" data-thread-id={threadId ?? ''}>
      <div className="chat-head">
        <h1 data-testid="chat-title">{threadId ? title : 'kvdesk'}</h1>
      </div>
      {threadId && count > 0 ? (
        <MessageList threadId={threadId} />
      ) : loaded ? (
        <EmptyThread />
      ) : (
        <div className="empty" />
      )}
      <Composer threadId={threadId} />
    </section>
  );
}
