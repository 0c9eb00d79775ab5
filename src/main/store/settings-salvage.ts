/**
 * The usable part of a settings file that does not validate as a whole — typically one written by a newer
 * kvdesk (a preset with a reasoning effort this one does not know): each field is kept or left out on its own,
 * and each preset on its own, so one value of a newer version does not cost the theme and every other preset.
 */
import type { z } from 'zod';
import { Preset, UiSettings } from '../../shared/api';
import { isPlainObject } from './data-file';

/** As many presets as UiSettings allows (more would fail the whole again). */
const MAX_PRESETS = 100;

/** Settings this kvdesk can use, and what it left out (each naming the field and why). */
export interface Salvaged {
  settings: UiSettings;
  dropped: string[];
}

/** The valid part of a parsed settings file. */
export function salvageSettings(raw: unknown): Salvaged {
  if (!isPlainObject(raw)) return { settings: {}, dropped: ['the file holds no JSON object'] };
  const kept: Record<string, unknown> = {};
  const dropped: string[] = [];
  for (const [key, schema] of Object.entries(UiSettings.shape)) {
    const value = raw[key];
    if (value === undefined) continue;
    if (key === 'presets' && Array.isArray(value)) {
      kept.presets = validPresets(value, dropped);
      continue;
    }
    const r = (schema as z.ZodType).safeParse(value);
    if (r.success) kept[key] = r.data;
    else dropped.push(issueText(r.error, [key]));
  }
  // Each part valid on its own makes a valid whole; checked again so that what is returned is typed by the schema.
  const whole = UiSettings.safeParse(kept);
  return whole.success ? { settings: whole.data, dropped } : { settings: {}, dropped: [issueText(whole.error, [])] };
}

/** The presets that validate, at most as many as the schema allows; each one left out is said in `dropped`. */
function validPresets(value: unknown[], dropped: string[]): Preset[] {
  const presets: Preset[] = [];
  value.forEach((p, i) => {
    const r = Preset.safeParse(p);
    if (r.success) presets.push(r.data);
    else {
      const name = isPlainObject(p) && typeof p.name === 'string' ? `the preset "${p.name}"` : `preset ${i + 1}`;
      dropped.push(`${name} (${issueText(r.error, ['presets', i])})`);
    }
  });
  if (presets.length > MAX_PRESETS) dropped.push(`the presets after the first ${MAX_PRESETS}`);
  return presets.slice(0, MAX_PRESETS);
}

/** The first issue of a failed validation, as `field.path: message`. */
export function issueText(error: z.ZodError, at: PropertyKey[]): string {
  const issue = error.issues[0];
  const where = [...at, ...(issue?.path ?? [])].map(String).join('.');
  return `${where || 'the file'}: ${issue?.message ?? 'not valid'}`;
}
