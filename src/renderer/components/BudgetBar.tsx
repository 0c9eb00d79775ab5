/** The budget drawn as one bar in the four colours (used, reserved-not-yet-used, held by idle sessions, free). */
import { useMemo } from 'react';
import type { Thread } from '../../shared/api';
import type { SchedulerSnapshot } from '../../shared/scheduler-types';
import { useApp } from '../bridge/context';
import { budgetBar } from '../lib/budget-segments';

function threadNames(threads: Thread[]): (id: string | undefined) => string | undefined {
  const byId = new Map(threads.map((t) => [t.id, t.title]));
  return (id) => (id === undefined ? undefined : byId.get(id));
}

export function BudgetBar({
  snapshot,
  testId,
  className,
}: {
  snapshot: SchedulerSnapshot;
  testId: string;
  className?: string;
}) {
  const threads = useApp((s) => s.threads);
  const model = useMemo(() => budgetBar(snapshot, threadNames(threads)), [snapshot, threads]);
  return (
    <div
      className={`kvbar ${className ?? ''}`}
      data-testid={testId}
      data-limit-bytes={snapshot.limitBytes}
      data-reserved-bytes={snapshot.reservedBytes}
      data-used-bytes={snapshot.usedBytes}
      data-held-bytes={snapshot.heldBytes}
      role="img"
      aria-label={`KV budget: ${model.segments.map((s) => s.label).join('; ')}${model.limitAt < 1 ? `; ${model.limitLabel}` : ''}`}
    >
      {model.segments.map((s, i) => (
        <div
          // Segments are positional; their order only changes when the snapshot does.
          // biome-ignore lint/suspicious/noArrayIndexKey: positional segments
          key={i}
          className={`seg ${s.kind}`}
          style={{ flexBasis: `${(s.fraction * 100).toFixed(3)}%`, flexGrow: 0, flexShrink: 0 }}
          title={s.label}
          data-kind={s.kind}
          data-bytes={s.bytes}
        />
      ))}
      {model.limitAt < 1 && (
        <div
          className="limit-mark"
          data-testid={`${testId}-limit-mark`}
          style={{ left: `${model.limitAt * 100}%` }}
          title={model.limitLabel}
        />
      )}
    </div>
  );
}
