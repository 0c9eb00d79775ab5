/**
 * Generates kvdesk's model packages.
 *
 *   generate-model.ts --default                 resources/models/default (the app's built-in model)
 *   generate-model.ts --shape NAME [--out DIR]  benchmark shapes (default out: bench/models/NAME)
 *   options: --force (regenerate even when up to date), --seed N
 *
 * Idempotent: a package whose stamp matches is left alone, so `npm prepare` and
 * the test global setup can call it on every run.
 */
import path from 'node:path';
import { generateModelPackage, isPresetName, PRESET_NAMES, type PresetName, presetConfig } from './model-gen/index';

const repoRoot = path.resolve(__dirname, '..');

const USAGE = `usage: generate-model.ts --default [--force]
       generate-model.ts --shape ${PRESET_NAMES.join('|')} [--out DIR] [--seed N] [--force]`;

interface CliArgs {
  preset: PresetName;
  outDir: string;
  force: boolean;
  seed?: number;
}

class UsageError extends Error {}

/** Parses the command line; paths in defaults are relative to the repository, --out to the working directory. */
function parseArgs(argv: string[]): CliArgs {
  let preset: PresetName | undefined;
  let isDefault = false;
  let out: string | undefined;
  let force = false;
  let seed: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = (): string => {
      const next = argv[++i];
      if (next === undefined || next.startsWith('--')) throw new UsageError(`${arg} needs a value`);
      return next;
    };
    if (arg === '--default') isDefault = true;
    else if (arg === '--force') force = true;
    else if (arg === '--out') out = value();
    else if (arg === '--seed') {
      const text = value();
      seed = Number(text);
      if (!Number.isInteger(seed)) throw new UsageError(`--seed must be an integer, got ${text}`);
    } else if (arg === '--shape') {
      const name = value();
      if (!isPresetName(name)) throw new UsageError(`unknown shape ${name}; choose one of ${PRESET_NAMES.join(', ')}`);
      preset = name;
    } else throw new UsageError(`unknown argument ${arg}`);
  }
  if (isDefault) {
    if (preset !== undefined || out !== undefined || seed !== undefined) {
      throw new UsageError(
        '--default writes the built-in model to resources/models/default; it takes no --shape, --out or --seed',
      );
    }
    return { preset: 'default', outDir: path.join(repoRoot, 'resources/models/default'), force };
  }
  if (preset === undefined) throw new UsageError('say --default or --shape NAME');
  return {
    preset,
    outDir: out === undefined ? path.join(repoRoot, 'bench/models', preset) : path.resolve(out),
    force,
    ...(seed === undefined ? {} : { seed }),
  };
}

function formatBytes(bytes: number): string {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

function main(): number {
  let args: CliArgs;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`generate-model: ${error.message}\n${USAGE}\n`);
    return 2;
  }
  const config = presetConfig(args.preset);
  if (args.seed !== undefined) config.seed = args.seed;
  const relative = path.relative(process.cwd(), args.outDir);
  const shown = relative === '' ? '.' : relative.startsWith('..') ? args.outDir : relative;
  const log = (line: string): void => void process.stderr.write(`${line}\n`);
  try {
    const result = generateModelPackage(args.outDir, config, { force: args.force, log });
    if (result.status === 'up-to-date') {
      log(
        `generate-model: ${shown} is up to date (stamp ${result.configHash.slice(0, 12)} matches); --force regenerates it`,
      );
    } else {
      const total = result.files.reduce((a, f) => a + f.bytes, 0);
      log(
        `generate-model: wrote ${args.preset} (${config.architecture}, ${config.numLayers} layers, ` +
          `${(result.parameters / 1e6).toFixed(2)}M parameters, bpt ${result.bytesPerToken}) to ${shown}: ` +
          `${formatBytes(total)} in ${(result.elapsedMs / 1000).toFixed(2)} s`,
      );
    }
    return 0;
  } catch (error) {
    log(`generate-model: ${(error instanceof Error ? error.message : String(error)).replace(/^model-gen: /, '')}`);
    return 1;
  }
}

process.exitCode = main();
