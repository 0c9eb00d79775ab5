/** The backends onnxruntime can use here, for the picks of where a model runs (the header's, a model card's). */
import { useEffect, useState } from 'react';
import type { BackendInfo } from '../../shared/api';
import { useBridge } from '../bridge/context';

/** The host's backend report (asked once per page, then kept by the bridge); null until it comes, or when off. */
export function useBackends(enabled = true): BackendInfo[] | null {
  const bridge = useBridge();
  const [backends, setBackends] = useState<BackendInfo[] | null>(null);
  useEffect(() => {
    if (!enabled) return;
    let live = true;
    void bridge.listBackends().then((list) => {
      if (live) setBackends(list);
    });
    return () => {
      live = false;
    };
  }, [bridge, enabled]);
  return backends;
}

/** Why a backend is not usable here, and what to do: onnxruntime's reason and the fix, as sentences. */
export function whyNotUsable(b: Pick<BackendInfo, 'reason' | 'hint'>): string {
  const sentence = (t: string | undefined) => {
    const s = (t ?? '').trim();
    return s && !/[.!?…]["')\]]*$/.test(s) ? `${s}.` : s;
  };
  return [sentence(b.reason), sentence(b.hint)].filter(Boolean).join(' ') || 'onnxruntime gave no reason.';
}

/**
 * A select's options for backends: those this machine cannot use disabled, with onnxruntime's reason and the fix
 * on hover. `compact` (the header): upper-case names only; else lower-case, saying which are not usable.
 */
export function BackendOptions({
  list,
  compact = false,
}: {
  list: ReadonlyArray<Pick<BackendInfo, 'name' | 'usable' | 'reason' | 'hint'>>;
  compact?: boolean;
}) {
  return list.map((b) => (
    <option
      key={b.name}
      value={b.name}
      disabled={!b.usable}
      title={b.usable ? undefined : `Not usable here: ${whyNotUsable(b)}`}
    >
      {b.name === 'cpu' ? 'CPU' : compact ? b.name.toUpperCase() : b.name}
      {b.usable || compact ? '' : ' (not usable here)'}
    </option>
  ));
}
