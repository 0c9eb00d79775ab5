/** kvdesk as a contender: the real RunnerService path (validation, scheduler admission, engine process, frames). */

import { RunnerService } from '../../src/main/host/runner-service';
import type { SamplingSettings, StreamFrame } from '../../src/shared/contract';
import type { BenchOptions } from './context';
import type { GenerationSample } from './worker-protocol';

/** A host as every section uses it: the bench's threads, 8 running requests, a KV budget no figure runs into. */
export function benchRunner(opts: BenchOptions, engineEnv?: Record<string, string>): RunnerService {
  return new RunnerService({
    intraOpNumThreads: opts.threads,
    maxRunning: 8,
    kvBudgetBytes: 8 * 1024 ** 3,
    ...(engineEnv ? { engineEnv } : {}),
  });
}

/** Token frames of one generation as the host saw them. */
export interface HostTrace {
  sample: GenerationSample;
  /** performance.now() of every tokens frame and how many tokens it carried (row 0). */
  frames: Array<{ at: number; tokens: number }>;
  startedAt: number;
}

/**
 * One generation through RunnerService (greedy unless told otherwise). TTFT runs from the generate call
 * to the first token frame on the host; decode tok/s from the first to the last
 * token frame (the engine flushes the final frame at once, so the 50 ms frame
 * batching does not stretch the interval).
 */
export async function kvdeskGenerate(
  runner: RunnerService,
  modelId: string,
  promptIds: number[],
  maxNewTokens: number,
  {
    onFrame,
    sampling = { greedy: true },
    ignoreEos,
  }: {
    onFrame?: (frame: StreamFrame, at: number) => void;
    sampling?: SamplingSettings;
    /** Write on past the model's end-of-text tokens, to maxNewTokens (every reply as long, whatever it draws). */
    ignoreEos?: boolean;
  } = {},
): Promise<HostTrace> {
  const frames: HostTrace['frames'] = [];
  const startedAt = performance.now();
  const request = { model: modelId, promptIds, maxNewTokens, sampling, ...(ignoreEos ? { ignoreEos } : {}) };
  const handle = runner.generate(request, (frame) => {
    const at = performance.now();
    if (frame.type === 'tokens') {
      const n = frame.rows[0]?.ids.length ?? 0;
      if (n > 0) frames.push({ at, tokens: n });
    }
    onFrame?.(frame, at);
  });
  const result = await handle.result;
  const ids = result.tokenIds;
  const first = frames[0];
  const last = frames[frames.length - 1];
  const n = ids.length;
  const firstAt = first?.at ?? startedAt;
  const lastAt = last?.at ?? startedAt;
  // Tokens after the first frame, over the time from that frame to the last.
  const decodeTokens = n - (first?.tokens ?? 1);
  return {
    sample: {
      ids,
      ttftMs: firstAt - startedAt,
      decodeTokensPerSecond: decodeTokens > 0 && lastAt > firstAt ? (decodeTokens * 1000) / (lastAt - firstAt) : 0,
      totalMs: lastAt - startedAt,
    },
    frames,
    startedAt,
  };
}
