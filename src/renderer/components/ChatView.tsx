/** The open thread: title, messages, composer. */
import { useShallow } from 'zustand/react/shallow';
import { useApp, useAppStore } from '../bridge/context';
import { contextUsed, currentDrop } from '../bridge/prompt';
import { formatInteger } from '../lib/format';
import { exportFileName, threadToJson, threadToMarkdown } from '../lib/thread-export';

/** Saves text as a file (the browser's download; Electron asks where). */
function download(name: string, text: string, type: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

const EXPORTS: ReadonlyArray<readonly ['md' | 'json', string]> = [
  ['md', 'Save this chat as Markdown'],
  ['json', 'Save this chat as kvdesk JSON (Import… in the chat list reads it back)'],
];

/** Export the open chat as Markdown (to read or share) or kvdesk's JSON (to import again, here or elsewhere). */
function ExportButtons({ threadId }: { threadId: string }) {
  const store = useAppStore();
  const save = (format: 'md' | 'json') => {
    const s = store.getState();
    const thread = s.threads.find((t) => t.id === threadId);
    if (!thread) return;
    const model = s.models.find((m) => m.id === thread.modelId)?.spec.displayName;
    if (format === 'md') download(exportFileName(thread, 'md'), threadToMarkdown(thread, model), 'text/markdown');
    else download(exportFileName(thread, 'json'), threadToJson(thread), 'application/json');
  };
  return (
    <span className="export">
      {EXPORTS.map(([format, title]) => (
        <button
          key={format}
          type="button"
          className="ghost small"
          data-testid={`export-${format}`}
          title={title}
          onClick={() => save(format)}
        >
          ⤓ .{format}
        </button>
      ))}
    </span>
  );
}

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

/**
 * How much of the model's context the conversation fills (after its latest reply, or so far while one streams),
 * as LM Studio shows it; and how many messages are out of view once it outgrew it.
 */
function ContextMeter({ threadId }: { threadId: string }) {
  const { used, context, dropped } = useApp(
    useShallow((s) => {
      const t = s.threads.find((x) => x.id === threadId);
      const messages = t?.messages ?? [];
      const model = s.models.find((m) => m.id === t?.modelId);
      return {
        used: contextUsed(messages, s.live),
        context: model?.spec.contextLength,
        dropped: currentDrop(messages, s.live)?.drop.messages ?? 0,
      };
    }),
  );
  if (used === undefined || context === undefined) return null;
  const share = Math.min(1, used / context);
  return (
    <div
      className={`context-meter ${share >= 0.8 ? 'high' : ''}`}
      data-testid="context-meter"
      data-used={used}
      data-context={context}
      title={
        `The conversation as the model sees it fills ${formatInteger(used)} of its ${formatInteger(context)} tokens of context.` +
        (dropped > 0
          ? ` The first ${dropped} messages are out of view.`
          : ' When it is full, the oldest messages are left out.')
      }
    >
      <span className="num">
        context {formatInteger(used)} / {formatInteger(context)}
        {dropped > 0 ? ` · ${dropped} out of view` : ''}
      </span>
      <span className="meter">
        <span style={{ width: `${(share * 100).toFixed(1)}%` }} />
      </span>
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
        {threadId && count > 0 && <ContextMeter threadId={threadId} />}
        {threadId && count > 0 && <ExportButtons threadId={threadId} />}
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
