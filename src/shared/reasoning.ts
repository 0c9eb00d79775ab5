/**
 * Reasoning ("thinking") models write their thoughts between two markers before the answer: Qwen3, DeepSeek-R1
 * and its distills, SmolLM3, Phi-4-reasoning `<think>…</think>`; Magistral `[THINK]…[/THINK]`. A package's chat
 * template says which: templates of such models strip or show the markers in earlier turns, or open the reply
 * with the opening one. gpt-oss writes OpenAI's Harmony format instead: its reply is a run of messages, each
 * `<|channel|>NAME<|message|>…<|end|>` after a header, and its reasoning is the `analysis` channel's.
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
  /**
   * The reply is Harmony messages (gpt-oss): `open` is the analysis channel's header, `close` the end of that
   * message and the header of the final one, so a reply that reasons first reads `open`…`close` like the others.
   */
  harmony?: true;
}

/** Harmony's special tokens (OpenAI's o200k_harmony): they stay in the text kvdesk reads a reply from. */
export const HARMONY_TOKENS = [
  '<|start|>',
  '<|end|>',
  '<|message|>',
  '<|channel|>',
  '<|constrain|>',
  '<|return|>',
  '<|call|>',
] as const;

/** gpt-oss's reasoning: its analysis message, then the final one. */
export const HARMONY: ReasoningSpec = {
  open: '<|channel|>analysis<|message|>',
  close: '<|end|><|start|>assistant<|channel|>final<|message|>',
  harmony: true,
};

const MARKERS: ReadonlyArray<{ open: string; close: string }> = [
  { open: '<think>', close: '</think>' },
  { open: '[THINK]', close: '[/THINK]' },
];

const TOGGLE = 'enable_thinking';

/** Whether a chat template writes Harmony messages (gpt-oss's). */
export function isHarmonyTemplate(template: string): boolean {
  return template.includes('<|channel|>') && template.includes('<|message|>');
}

/** The reasoning markers a chat template uses, and its on/off switch; undefined for a model that does not reason. */
export function reasoningOf(template: string | undefined): ReasoningSpec | undefined {
  if (template === undefined) return undefined;
  if (isHarmonyTemplate(template)) return { ...HARMONY };
  const found = MARKERS.find((m) => template.includes(m.close) || template.includes(m.open));
  if (!found) return undefined;
  return { ...found, ...(new RegExp(`\\b${TOGGLE}\\b`).test(template) ? { toggle: TOGGLE } : {}) };
}

/** Where a model writes its reasoning, in words: its markers, or gpt-oss's analysis channel. */
export function reasoningWhere(spec: Pick<ReasoningSpec, 'open' | 'close' | 'harmony'>): string {
  return spec.harmony ? "Harmony's analysis channel" : `${spec.open}…${spec.close}`;
}
