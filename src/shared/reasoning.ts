/**
 * Reasoning ("thinking") models write their thoughts between two markers before the answer: Qwen3, DeepSeek-R1
 * and its distills, SmolLM3, Phi-4-reasoning `<think>…</think>`; Magistral `[THINK]…[/THINK]`. A package's chat
 * template says which: templates of such models strip or show the markers in earlier turns, or open the reply
 * with the opening one.
 */

/** How a package's model reasons. */
export interface ReasoningSpec {
  open: string;
  close: string;
  /**
   * The template variable that turns thinking on and off (`enable_thinking`, as Qwen3's and SmolLM3's templates
   * read it), when the template has one.
   */
  toggle?: string;
}

const MARKERS: ReadonlyArray<{ open: string; close: string }> = [
  { open: '<think>', close: '</think>' },
  { open: '[THINK]', close: '[/THINK]' },
];

const TOGGLE = 'enable_thinking';

/** The reasoning markers a chat template uses, and its on/off switch; undefined for a model that does not reason. */
export function reasoningOf(template: string | undefined): ReasoningSpec | undefined {
  if (template === undefined) return undefined;
  const found = MARKERS.find((m) => template.includes(m.close) || template.includes(m.open));
  if (!found) return undefined;
  return { ...found, ...(new RegExp(`\\b${TOGGLE}\\b`).test(template) ? { toggle: TOGGLE } : {}) };
}
