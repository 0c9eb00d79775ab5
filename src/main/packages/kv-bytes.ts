import { type ModelSpec, staticPositions } from '../../shared/model-spec';

/**
 * KV bytes a request holds for `tokens` positions in each of `rows` rows. A
 * dynamic cache grows by bpt per position; a static cache is allocated at its
 * full length whatever the token count, so it costs its capacity from the start;
 * a graph without a cache holds none.
 */
export function kvBytesForTokens(
  spec: Pick<ModelSpec, 'kv' | 'bpt' | 'contextLength'>,
  tokens: number,
  rows = 1,
): number {
  if (!Number.isInteger(tokens) || tokens < 0)
    throw new RangeError(`tokens must be a non-negative integer, got ${tokens}`);
  if (!Number.isInteger(rows) || rows < 1) throw new RangeError(`rows must be a positive integer, got ${rows}`);
  switch (spec.kv.kind) {
    case 'dynamic':
      return spec.bpt * tokens * rows;
    case 'static':
      return spec.bpt * (staticPositions(spec) as number) * rows;
    case 'none':
      return 0;
  }
}

/** How many positions fit in `bytes` of KV at `rows` rows (dynamic caches; Infinity without a cache). */
export function tokensForKvBytes(
  spec: Pick<ModelSpec, 'kv' | 'bpt' | 'contextLength'>,
  bytes: number,
  rows = 1,
): number {
  if (spec.kv.kind === 'none' || spec.bpt === 0) return Number.POSITIVE_INFINITY;
  if (spec.kv.kind === 'static') return kvBytesForTokens(spec, 0, rows) <= bytes ? spec.contextLength : 0;
  return Math.floor(bytes / (spec.bpt * rows));
}
