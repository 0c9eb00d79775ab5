/**
 * A chat template of the person's own, used instead of the package's (LM Studio's prompt template, Ollama's
 * TEMPLATE): for a package whose template is missing, broken or not what they want. It is checked before
 * anything loads, and what the template implies (a thinking model's markers) is read from it.
 */
import type { ChatMessage } from '../../shared/contract';
import { KvdeskError } from '../../shared/errors';
import { BROKEN_TEMPLATE_WARNING, type ModelSpec } from '../../shared/model-spec';
import { reasoningOf } from '../../shared/reasoning';
import { renderChatTemplate, templateProblem } from '../tokenizer/chat-template';

/** The conversation a template is shown with before it is used: a system message and two turns. */
const PREVIEW: ChatMessage[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Hello!' },
  { role: 'assistant', content: 'Hi! How can I help?' },
  { role: 'user', content: 'What is 2 + 2?' },
];

/**
 * What `template` writes for a short conversation, with the reply opened (`bos`/`eos`: the model's tokens, which
 * templates write); a 400 naming `field` and what Jinja said when it does not render.
 */
export function previewChatTemplate(
  template: string,
  opts: { bos?: string; eos?: string; field?: string } = {},
  messages: ChatMessage[] = PREVIEW,
): string {
  const field = opts.field ?? 'chatTemplate';
  try {
    return renderChatTemplate(template, messages, {
      addGenerationPrompt: true,
      source: 'chat template',
      fix: "Fix it, or use the package's own template.",
      ...(opts.bos !== undefined ? { bosToken: opts.bos } : {}),
      ...(opts.eos !== undefined ? { eosToken: opts.eos } : {}),
    });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    // The API's field is the window's editor: said as what it is there (a CLI flag names itself).
    const subject = field === 'chatTemplate' || field === 'template' ? 'This chat template' : field;
    throw new KvdeskError('BAD_REQUEST', `${subject} cannot be used: ${message}`, { field });
  }
}

/**
 * The check a template of the person's own passes before it is used: it renders one user message (the least a
 * template accepts; some refuse a system message); else a 400 naming `field`.
 */
export function checkChatTemplate(template: string, field = 'chatTemplate'): void {
  previewChatTemplate(template, { field }, [{ role: 'user', content: 'Hello' }]);
}

/** The spec with `template` as its chat template (`chatTemplateEdited`), or a 400 naming what is wrong with it. */
export function withChatTemplate(spec: ModelSpec, template: string): ModelSpec {
  checkChatTemplate(template);
  const { reasoning: _old, chatTemplateSource: _source, ...rest } = spec;
  const reasoning = reasoningOf(template);
  return {
    ...rest,
    // The package's own template no longer matters (it may not even parse).
    warnings: spec.warnings.filter((w) => !w.startsWith(BROKEN_TEMPLATE_WARNING)),
    chatTemplate: template,
    chatTemplateEdited: true,
    ...(reasoning ? { reasoning } : {}),
  };
}

/** How a package's warning about its own broken chat template begins (a template of the person's replaces it). */

/**
 * The spec with its package's own chat template checked: one that is not valid Jinja, or that fails (or loops)
 * when it renders a one-message chat, is a warning on the card naming the file it is in (the model still loads:
 * completions need no template, but chats would be refused).
 */
export function checkedTemplate(spec: ModelSpec): ModelSpec {
  if (spec.chatTemplate === undefined || spec.warnings.some((w) => w.startsWith(BROKEN_TEMPLATE_WARNING))) return spec;
  const problem = templateProblem(spec.chatTemplate, {
    ...(spec.tokenizer.bosToken !== undefined ? { bos: spec.tokenizer.bosToken } : {}),
    ...(spec.tokenizer.eosToken !== undefined ? { eos: spec.tokenizer.eosToken } : {}),
  });
  if (problem === undefined) return spec;
  const source = spec.chatTemplateSource ?? 'the package';
  return {
    ...spec,
    warnings: [
      ...spec.warnings,
      `${BROKEN_TEMPLATE_WARNING}: the one in ${source} ${problem}, so chats are refused until it is fixed. Give the model another chat template (in the window: "chat template" on this model's card; in the CLI: --chat-template FILE), or fix it in ${source}; completions work.`,
    ],
  };
}

/** The spec as a kept pick shows it: with its template of the person's own, unless that no longer renders. */
export function withKeptTemplate(spec: ModelSpec, template: string | null | undefined): ModelSpec {
  if (typeof template !== 'string') return checkedTemplate(spec);
  try {
    return withChatTemplate(spec, template);
  } catch {
    return checkedTemplate(spec);
  }
}

/** What a chat template decides in a spec (and the warnings, which are read with it). */
const TEMPLATE_FIELDS = new Set<string>([
  'chatTemplate',
  'chatTemplateSource',
  'chatTemplateEdited',
  'reasoning',
  'warnings',
]);

/**
 * Whether two reads of a package differ in their chat template only: the engine runs the same graph on the same
 * backend, so a model loaded as `a` can take `b`'s template without loading again.
 */
export function differsOnlyInTemplate(a: ModelSpec, b: ModelSpec): boolean {
  const rest = (spec: ModelSpec) =>
    JSON.stringify(
      Object.entries(spec)
        .filter(([key, value]) => !TEMPLATE_FIELDS.has(key) && value !== undefined)
        .map(([key, value]) =>
          key === 'warnings'
            ? [key, (value as string[]).filter((w) => !w.startsWith(BROKEN_TEMPLATE_WARNING))]
            : [key, value],
        )
        .sort(([x], [y]) => (x < y ? -1 : 1)),
    );
  return rest(a) === rest(b);
}
