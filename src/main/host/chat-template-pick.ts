/**
 * A chat template of the person's own, used instead of the package's (LM Studio's prompt template, Ollama's
 * TEMPLATE): for a package whose template is missing, broken or not what they want. It is checked before
 * anything loads, and what the template implies (a thinking model's markers) is read from it.
 */
import { KvdeskError } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import { reasoningOf } from '../../shared/reasoning';
import { renderChatTemplate } from '../tokenizer/chat-template';

/** The spec with `template` as its chat template (`chatTemplateEdited`), or a 400 naming what is wrong with it. */
export function withChatTemplate(spec: ModelSpec, template: string): ModelSpec {
  try {
    renderChatTemplate(template, [{ role: 'user', content: 'Hello' }], {
      addGenerationPrompt: true,
      source: 'chat template',
    });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    throw new KvdeskError(
      'BAD_REQUEST',
      `chatTemplate cannot be used: ${message.replace(/ Fix the template or remove it to use the default ChatML template\.$/, '')} Fix it, or load the model with the package's own template.`,
      { field: 'chatTemplate' },
    );
  }
  const { reasoning: _old, ...rest } = spec;
  const reasoning = reasoningOf(template);
  return { ...rest, chatTemplate: template, chatTemplateEdited: true, ...(reasoning ? { reasoning } : {}) };
}
