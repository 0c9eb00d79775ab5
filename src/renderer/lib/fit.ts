/**
 * The fit badge on a model card: can this model hold its full context window,
 * several times over, inside the KV budget? A person reads it before loading a
 * model, so it answers in the same terms as the inspector (bytes of KV).
 */
import { deviceKey } from '../../shared/devices';
import { type ModelSpec, staticPositions } from '../../shared/model-spec';
import type { BudgetDerivation, DeviceBudgetSnapshot } from '../../shared/scheduler-types';
import { formatInteger } from './format';

export type FitLevel = 'fits' | 'tight' | 'wont-fit';

/** How many full contexts the badge asks about; the card shows the same N ("4 at once = Y"). */
export const FIT_CONCURRENCY = 4;

export interface FitInput {
  bpt: number;
  contextLength: number;
  /** A static cache's positions: each request holds all of them, whatever its length. */
  staticPositions?: number;
  weightsBytes: number;
  /** Already loaded: the derived budget already subtracts its weights. */
  loaded: boolean;
}

export interface FitBudget {
  limitBytes: number;
  derivation?: Pick<BudgetDerivation, 'source'>;
}

export interface FitResult {
  level: FitLevel;
  /** KV of one full context window. */
  oneContextBytes: number;
  /** KV of FIT_CONCURRENCY full contexts at once. */
  concurrentBytes: number;
  /** The budget the model would run against. */
  budgetBytes: number;
  /** Full contexts that fit at once (Infinity for models that hold no KV). */
  fullContextsAtOnce: number;
  /** One sentence for the badge's tooltip and the card. */
  explanation: string;
}

/**
 * fits: FIT_CONCURRENCY full contexts fit at once; tight: at least one does;
 * won't fit: not even one (short chats may still run, long ones will be refused).
 * A derived budget subtracts model weights, so for a model that is not loaded yet
 * we compare against the budget as it would be after loading it.
 */
export function fitBadge(model: FitInput, budget: FitBudget, concurrency = FIT_CONCURRENCY): FitResult {
  const oneContextBytes = model.bpt * (model.staticPositions ?? model.contextLength);
  const concurrentBytes = oneContextBytes * concurrency;
  const derived = budget.derivation?.source === 'derived';
  const budgetBytes = Math.max(0, budget.limitBytes - (derived && !model.loaded ? model.weightsBytes : 0));
  const fullContextsAtOnce =
    oneContextBytes === 0 ? Number.POSITIVE_INFINITY : Math.floor(budgetBytes / oneContextBytes);
  let level: FitLevel;
  let explanation: string;
  if (oneContextBytes === 0) {
    level = 'fits';
    explanation = 'This model holds no KV cache, so it always fits the budget.';
  } else if (concurrentBytes <= budgetBytes) {
    level = 'fits';
    explanation = `${concurrency} full contexts at once fit in the budget (room for ${formatInteger(fullContextsAtOnce)} full contexts).`;
  } else if (oneContextBytes <= budgetBytes) {
    level = 'tight';
    explanation = `Only ${formatInteger(fullContextsAtOnce)} full context${fullContextsAtOnce === 1 ? '' : 's'} fit at once; more chats will queue.`;
  } else {
    level = 'wont-fit';
    explanation =
      model.staticPositions !== undefined
        ? 'Its static KV cache is bigger than the budget, and every request holds all of it: nothing can run. Raise the limit.'
        : 'One full context needs more KV than the budget: long chats will be refused or capped. Raise the limit or keep prompts short.';
  }
  return { level, oneContextBytes, concurrentBytes, budgetBytes, fullContextsAtOnce, explanation };
}

/** Badge text. */
export function fitLabel(level: FitLevel): string {
  return level === 'fits' ? 'fits' : level === 'tight' ? 'tight' : "won't fit";
}

/** The fit badge's colour class. */
export function fitClass(fit: FitResult | null): string {
  return fit ? (fit.level === 'fits' ? 'ok' : fit.level === 'tight' ? 'warn' : 'bad') : '';
}

/**
 * The device a model is (or would be) placed on and its fit against that device's budget; null where the
 * device has no budget yet (a GPU gets one once a model is there).
 */
export function modelFit(
  spec: ModelSpec,
  loaded: boolean,
  devices: readonly DeviceBudgetSnapshot[],
): { device: string; fit: FitResult | null } {
  const device = loaded
    ? (devices.find((d) => d.models.includes(spec.id))?.device ?? 'cpu')
    : deviceKey(spec.executionProvider ?? 'CPUExecutionProvider');
  const budget = devices.find((d) => d.device === device);
  const positions = staticPositions(spec);
  const fit = budget
    ? fitBadge(
        {
          bpt: spec.bpt,
          contextLength: spec.contextLength,
          ...(positions !== undefined ? { staticPositions: positions } : {}),
          weightsBytes: spec.weightsBytes,
          loaded,
        },
        { limitBytes: budget.limitBytes, derivation: budget.derivation },
      )
    : null;
  return { device, fit };
}
