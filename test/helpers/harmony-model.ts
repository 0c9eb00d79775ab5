/**
 * Packages whose model writes a reply in gpt-oss's Harmony format token by token (a scripted graph,
 * test/helpers/scripted-model.ts), behind a Harmony chat template: for reading such replies apart on the real
 * engine, in the host and in the window.
 */
import { HARMONY_TOKENS } from '../../src/shared/reasoning';
import { type ScriptedPackage, scriptedPackage } from './scripted-model';

/**
 * A Harmony chat template in gpt-oss's manner: effort in the system message, tools in the developer's, a calling
 * turn's reasoning (or text) as its analysis, refusing both as gpt-oss's does.
 */
export const TEMPLATE =
  "<|start|>system<|message|>You are a test model.\nReasoning: {{ reasoning_effort if reasoning_effort is defined else 'medium' }}<|end|>" +
  '{% if tools %}<|start|>developer<|message|># Tools\n{% for t in tools %}{{ t.function.name }}\n{% endfor %}<|end|>{% endif %}' +
  '{% for m in messages %}' +
  "{% if m.role == 'system' %}<|start|>developer<|message|>{{ m.content }}<|end|>" +
  "{% elif m.role == 'user' %}<|start|>user<|message|>{{ m.content }}<|end|>" +
  "{% elif m.role == 'assistant' and m.tool_calls %}" +
  "{% if m.content and m.thinking %}{{ raise_exception('Cannot pass both content and thinking in an assistant message with tool calls!') }}{% endif %}" +
  '<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking if m.thinking else m.content }}<|end|>' +
  '<|start|>assistant to=functions.{{ m.tool_calls[0].function.name }}<|channel|>commentary json<|message|>' +
  '{{ m.tool_calls[0].function.arguments | tojson }}<|call|>' +
  "{% elif m.role == 'assistant' %}" +
  '{% if m.thinking is defined %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}' +
  '<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>' +
  "{% elif m.role == 'tool' %}<|start|>functions.{{ m.name }} to=assistant<|channel|>commentary<|message|>{{ m.content }}<|end|>" +
  '{% endif %}{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}';

/** A script's parts that end the message being written and open the assistant's next one, in `channel`. */
export const nextMessage = (channel: string): string[] => [
  '<|end|>',
  '<|start|>',
  'assistant',
  '<|channel|>',
  channel,
  '<|message|>',
];

export const ANALYSIS = 'The user asks why the sky is blue.';
export const ANSWER = 'Rayleigh scattering.';
/** A reply that reasons, then answers: the analysis message, then the final one. */
export const REPLY = ['<|channel|>', 'analysis', '<|message|>', ANALYSIS, ...nextMessage('final'), ANSWER];

/** A script's tokens: Harmony's special tokens by name, the rest as the tokenizer writes the text. */
export function tokens(p: ScriptedPackage, parts: string[]): number[] {
  return parts.flatMap((part) =>
    part in p.ids ? [p.ids[part] as number] : p.tokenizer.encode(part, { addSpecialTokens: false }),
  );
}

/** Writes a package under `dir` whose greedy reply is `parts` (then `<|return|>`). */
export function harmonyPackage(dir: string, parts: string[]): ScriptedPackage {
  return scriptedPackage(dir, {
    template: TEMPLATE,
    specials: HARMONY_TOKENS,
    ends: ['<|return|>', '<|call|>'],
    script: (p) => tokens(p, parts),
  });
}
