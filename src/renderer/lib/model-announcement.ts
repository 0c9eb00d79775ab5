/**
 * What a screen reader is told of a model package's change that shows no sign where the focus is: a package
 * validated, a model loaded or unloaded (the card's badge changes, or the card moves to another list).
 */

import { backendName } from '../../shared/devices';
import type { ModelSpec } from '../../shared/model-spec';
import type { DeviceBudgetSnapshot } from '../../shared/scheduler-types';
import { fitLabel, modelFit } from './fit';
import { formatInteger } from './format';

/** A backend as said: the short ones by their letters (cpu → CPU, cuda → CUDA), the others as the card writes them. */
function backendSaid(backend: string): string {
  const name = backendName(backend);
  return /^[a-z]{2,4}$/.test(name) ? name.toUpperCase() : name;
}

/** "pkg2 loaded on CPU", "pkg2 loaded again on CUDA". */
export function loadedAnnouncement(name: string, backend: string, again: boolean): string {
  return `${name} loaded${again ? ' again' : ''} on ${backendSaid(backend)}`;
}

/** "pkg2 unloaded". */
export function unloadedAnnouncement(name: string): string {
  return `${name} unloaded`;
}

/** "pkg2 validated: fits, 1,024 B/token" (its fit left out where its device has no budget yet). */
export function validatedAnnouncement(spec: ModelSpec, devices: readonly DeviceBudgetSnapshot[]): string {
  const { fit } = modelFit(spec, false, devices);
  return `${spec.displayName} validated: ${fit ? `${fitLabel(fit.level)}, ` : ''}${formatInteger(spec.bpt)} B/token`;
}
