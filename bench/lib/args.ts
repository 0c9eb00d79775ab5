/** Command line of bench/run.ts. */
import os from 'node:os';
import path from 'node:path';
import type { BenchOptions } from './context';
import type { BenchShape } from './models';
import { NoiseGuard } from './noise';

export const USAGE = `usage: npm run bench [-- --quick] [options]
  --quick              ≤ 5 minutes on 2 cores: fewer tokens and repetitions, GPT-2 shape only
  --shapes a,b         gpt2-small,llama-small (default: both; --quick: gpt2-small)
  --reps N             repetitions of every A/B measurement (default 5; --quick 3; at least 3)
  --tokens N           new tokens of the decode comparison (default 128; --quick 64)
  --threads N          intra-op threads for kvdesk, the raw loop and transformers.js at equal threads (default: every core)
  --skip a,b           sections to leave out: tjs, concurrency, sampling, lookup, kv, floor, admission, delivery, renderer
  --noise SHARE        repeat a sample when other processes used more than this share of the CPUs (default 0.08)
  --report FILE        also write the markdown report there (default for a full run: bench/results/<date>.md)
  --no-report          write no report file`;

const SHAPES: readonly BenchShape[] = ['gpt2-small', 'llama-small'];
const SKIPPABLE = ['tjs', 'concurrency', 'sampling', 'lookup', 'kv', 'floor', 'admission', 'delivery', 'renderer'];

export class UsageError extends Error {}

/** The value after `flag` in `argv`, or `dflt` (the small scripts beside run.ts take a few such flags). */
export function flagValue(argv: readonly string[], flag: string, dflt: string): string {
  const i = argv.indexOf(flag);
  return i >= 0 ? (argv[i + 1] ?? dflt) : dflt;
}

export function parseArgs(argv: string[]): BenchOptions {
  const quick = argv.includes('--quick');
  const opts: BenchOptions = {
    quick,
    shapes: quick ? ['gpt2-small'] : ['gpt2-small', 'llama-small'],
    reps: quick ? 3 : 5,
    decodeTokens: quick ? 64 : 128,
    // Quick mode keeps within its 5 minutes on a slow-memory VM (5.05 min on a clean clone at 24 GB/s with 64 here).
    sideTokens: quick ? 32 : 128,
    longPrompt: 512,
    streamTokens: quick ? 32 : 64,
    streamCounts: [1, 2, 4, 8],
    kvPrompt: quick ? 256 : 512,
    kvTokens: quick ? 256 : 500,
    threads: Math.max(1, os.availableParallelism()),
    skip: new Set(),
    reportPath: quick ? null : path.resolve(__dirname, '..', 'results', `${new Date().toISOString().slice(0, 10)}.md`),
    // Quick mode stops waiting for a quiet machine after 4 minutes so the whole run stays within 5.
    guard: new NoiseGuard(
      0.08,
      quick ? performance.now() + 240_000 : Number.POSITIVE_INFINITY,
      quick ? 10_000 : 30_000,
    ),
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined || v.startsWith('--')) throw new UsageError(`${arg} needs a value`);
      return v;
    };
    const int = (min: number): number => {
      const text = value();
      const n = Number(text);
      if (!Number.isInteger(n) || n < min) throw new UsageError(`${arg} must be an integer ≥ ${min}, got ${text}`);
      return n;
    };
    if (arg === '--quick') continue;
    if (arg === '--shapes') {
      const names = value().split(',');
      for (const n of names)
        if (!(SHAPES as readonly string[]).includes(n))
          throw new UsageError(`unknown shape ${n}; choose from ${SHAPES.join(', ')}`);
      opts.shapes = names as BenchShape[];
    } else if (arg === '--reps') opts.reps = int(3);
    else if (arg === '--tokens') opts.decodeTokens = opts.sideTokens = int(2);
    else if (arg === '--threads') opts.threads = int(1);
    else if (arg === '--skip') {
      for (const s of value().split(',')) {
        if (!SKIPPABLE.includes(s)) throw new UsageError(`unknown section ${s}; choose from ${SKIPPABLE.join(', ')}`);
        opts.skip.add(s);
      }
    } else if (arg === '--report') opts.reportPath = path.resolve(value());
    else if (arg === '--no-report') opts.reportPath = null;
    else if (arg === '--noise') {
      const text = value();
      const share = Number(text);
      if (!(share > 0 && share <= 1)) throw new UsageError(`--noise must be a share in (0, 1], got ${text}`);
      opts.guard = new NoiseGuard(
        share,
        quick ? performance.now() + 240_000 : Number.POSITIVE_INFINITY,
        quick ? 10_000 : 30_000,
      );
    } else if (arg === '--help' || arg === '-h') throw new UsageError('');
    else throw new UsageError(`unknown argument ${arg}`);
  }
  return opts;
}
