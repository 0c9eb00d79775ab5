/**
 * The KV byte budget B: how it is derived from memory sizes and how a person
 * writes it. Pure functions; the host reads the memory sizes and passes them in.
 */
import { KvdeskError } from '../../shared/errors';
import { readByteSize } from '../../shared/format';
import type { BudgetDerivation } from '../../shared/scheduler-types';

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB'] as const;

/**
 * Formats bytes with binary units and one decimal (`3.2 GiB`), as the UI does;
 * exact bytes below 1 KiB. Called when building derivation formulas and messages.
 */
export function formatBytes(bytes: number, decimals = 1): string {
  const sign = bytes < 0 ? '−' : '';
  let value = Math.abs(bytes);
  if (value < 1024) return `${sign}${value} B`;
  let unit = 0;
  value /= 1024;
  // Stop at TiB: a larger unit would only hide the magnitude from a person reading a memory size.
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${sign}${value.toFixed(decimals)} ${UNITS[unit]}`;
}

/**
 * Two sizes a message sets side by side ("needs 1.57 MiB …, but the budget is 1.56 MiB"), with as many decimals as
 * it takes for different sizes to read differently (one decimal wrote "needs 1.6 MiB … budget is 1.6 MiB"), up to
 * exact bytes.
 */
export function formatBytesApart(a: number, b: number): [string, string] {
  for (let decimals = 1; decimals <= 3; decimals++) {
    const pair: [string, string] = [formatBytes(a, decimals), formatBytes(b, decimals)];
    if (a === b || pair[0] !== pair[1]) return pair;
  }
  return [`${a.toLocaleString('en-US')} B`, `${b.toLocaleString('en-US')} B`];
}

/** Inputs of {@link deriveCpuBudget}; all byte counts are whole bytes. */
export interface CpuBudgetInputs {
  /** System RAM (the host reads os.totalmem()). */
  totalMemoryBytes: number;
  /** Share of RAM kvdesk may use, in (0, 1]. */
  fraction: number;
  /** Bytes of the loaded model's weights. */
  weightsBytes: number;
  /** Fixed allowance for the runtime, activations and the app itself. */
  overheadBytes: number;
  /** A person's explicit limit; when set it wins, and the derivation is still kept for display. */
  overrideBytes?: number;
}

/** Refuses a byte count that is not a whole number ≥ 0, naming the field. */
export function requireBytes(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new KvdeskError('BAD_REQUEST', `${name} must be a whole number of bytes ≥ 0, got ${value}.`, {
      field: name,
      value: String(value),
    });
  }
}

/**
 * Derives the CPU backend's budget: RAM × fraction − weights − overhead,
 * clamped at 0. Called by the host when a model is loaded on CPU or a setting
 * changes; its result feeds createScheduler or reconfigure.
 */
export function deriveCpuBudget(inputs: CpuBudgetInputs): { limitBytes: number; derivation: BudgetDerivation } {
  const { totalMemoryBytes, fraction, weightsBytes, overheadBytes, overrideBytes } = inputs;
  requireBytes('totalMemoryBytes', totalMemoryBytes);
  requireBytes('weightsBytes', weightsBytes);
  requireBytes('overheadBytes', overheadBytes);
  if (overrideBytes !== undefined) requireBytes('overrideBytes', overrideBytes);
  if (!(fraction > 0 && fraction <= 1)) {
    throw new KvdeskError('BAD_REQUEST', `fraction must be in (0, 1], got ${fraction}.`, {
      field: 'fraction',
      value: String(fraction),
    });
  }
  const derivedBytes = Math.floor(totalMemoryBytes * fraction) - weightsBytes - overheadBytes;
  const notes: string[] = [];
  const terms = `${formatBytes(totalMemoryBytes)} system RAM × ${fraction} − ${formatBytes(weightsBytes)} weights − ${formatBytes(overheadBytes)} overhead`;
  let derivedText = `${terms} = ${formatBytes(derivedBytes)}`;
  let limitBytes = derivedBytes;
  if (derivedBytes < 0) {
    limitBytes = 0;
    derivedText += ' → 0 B';
    notes.push(
      `The model's weights and overhead exceed ${fraction} of system RAM by ${formatBytes(-derivedBytes)}: ` +
        'nothing is left for the KV cache. Raise the fraction, free memory, or load a smaller model.',
    );
  }
  const base = { memory: 'system-ram' as const, totalMemoryBytes, fraction, weightsBytes, overheadBytes, derivedBytes };
  if (overrideBytes !== undefined) {
    notes.push(`Set by override; the derivation would give ${formatBytes(limitBytes)}.`);
    notes.push(...overMemoryNote(overrideBytes, totalMemoryBytes, weightsBytes, 'system RAM'));
    return {
      limitBytes: overrideBytes,
      derivation: {
        source: 'override',
        ...base,
        overrideBytes,
        limitBytes: overrideBytes,
        formula: `override ${formatBytes(overrideBytes)} (derived: ${derivedText})`,
        notes,
      },
    };
  }
  return { limitBytes, derivation: { source: 'derived', ...base, limitBytes, formula: derivedText, notes } };
}

/**
 * What an override's note adds when it is more than the memory it draws from (with the weights kvdesk put there):
 * the budget can then admit more KV than there is room for, so it no longer keeps replies from running out.
 */
export function overMemoryNote(overrideBytes: number, totalMemoryBytes: number, weightsBytes: number, where: string) {
  const room = totalMemoryBytes - weightsBytes;
  if (overrideBytes <= room) return [];
  const [limit, holds] = formatBytesApart(overrideBytes, Math.max(0, room));
  return [
    `${limit} is more than ${where} holds beside the weights (${holds}): ` +
      'replies admitted under it can run out of memory before the budget stops them.',
  ];
}

/** A derivation for a limit set directly (settings, CLI flag, tests). Called wherever no memory sizes are involved. */
export function explicitDerivation(limitBytes: number, note?: string): BudgetDerivation {
  requireBytes('limitBytes', limitBytes);
  return {
    source: 'explicit',
    limitBytes,
    formula: `set to ${formatBytes(limitBytes)}`,
    notes: note === undefined ? [] : [note],
  };
}

/**
 * Parses a byte size as a person writes it: `512`, `64KiB`, `2 GiB`, `1.5GB`,
 * `2g` (case-insensitive; KB/MB/GB are decimal, KiB/MiB/GiB and single letters
 * binary; fractions round down to whole bytes). Called for settings and CLI flags.
 * @throws KvdeskError BAD_REQUEST for anything else.
 */
export function parseByteSize(input: string): number {
  const bytes = readByteSize(input);
  if (bytes === null) {
    throw new KvdeskError(
      'BAD_REQUEST',
      `Cannot read "${input}" as a byte size: write a number with an optional unit, e.g. 512, 64KiB, 2GiB or 1.5GB.`,
      { input },
    );
  }
  return bytes;
}
