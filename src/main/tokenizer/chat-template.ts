import { Template } from '@huggingface/jinja';
import { KvdeskError } from '../../shared/errors';
import type { TextTokenizer } from './text-tokenizer';

/** One chat turn as chat templates see it. */
export interface ChatMessage {
  role: string;
  content: string;
}

/** Options of {@link renderChatTemplate}. */
export interface RenderChatOptions {
  /** Append the opening of an assistant turn so the model answers next. */
  addGenerationPrompt: boolean;
  bosToken?: string;
  eosToken?: string;
  /** Where the template came from, for error messages (e.g. "tokenizer_config.json field chat_template"). */
  source?: string;
}

/**
 * ChatML, the template transformers used when a tokenizer had none. Used for packages without a
 * chat template; the caller warns, since the model may never have seen these markers.
 */
export const DEFAULT_CHAT_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// The library declares raise_exception itself and refuses to let render() redeclare it, so calls
// are renamed in the parsed template to tell "the template rejects this conversation" (a request
// problem) from "the template is broken" (a package problem).
const RAISE = '__kvdesk_raise_exception';

class TemplateRaised extends Error {}

/** Renders a Jinja chat template over `messages`, as transformers' apply_chat_template does. */
export function renderChatTemplate(template: string, messages: ChatMessage[], opts: RenderChatOptions): string {
  const source = opts.source ?? 'chat template';
  validateMessages(messages);
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (err) {
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `The ${source} is not a valid Jinja template: ${errorMessage(err)}. Fix the template or remove it to use the default ChatML template.`,
      { source },
    );
  }
  renameIdentifier(compiled.parsed, 'raise_exception', RAISE);
  try {
    return compiled.render({
      messages: messages.map((m) => ({ role: m.role, content: m.content })),
      add_generation_prompt: opts.addGenerationPrompt,
      // Templates concatenate these unconditionally; undefined would make `+` fail.
      bos_token: opts.bosToken ?? '',
      eos_token: opts.eosToken ?? '',
      [RAISE]: (message: unknown) => {
        throw new TemplateRaised(String(message));
      },
    });
  } catch (err) {
    if (err instanceof TemplateRaised) {
      throw new KvdeskError(
        'BAD_REQUEST',
        `The ${source} rejected this conversation: ${err.message}. Change the messages to the form this model expects.`,
        { source },
      );
    }
    throw new KvdeskError(
      'PACKAGE_INVALID',
      `The ${source} failed while rendering: ${errorMessage(err)}. Fix the template or remove it to use the default ChatML template.`,
      { source },
    );
  }
}

/** Result of {@link applyChat}. */
export interface AppliedChat {
  text: string;
  ids: number[];
  /** True when the package had no template and ChatML was used (the caller should warn). */
  usedDefaultTemplate: boolean;
}

/**
 * Renders the package's chat template (ChatML when it has none) and encodes the prompt. The
 * template owns the special tokens, so the post-processor is not applied (it would add a second
 * BOS, and an EOS that ends the prompt before the answer); BOS is prepended only when the model
 * wants one and the template did not write it.
 */
export function applyChat(
  tok: TextTokenizer,
  template: string | undefined,
  messages: ChatMessage[],
  opts?: { addGenerationPrompt?: boolean; source?: string },
): AppliedChat {
  const chosen = template !== undefined && template.trim() !== '' ? template : undefined;
  const usedDefaultTemplate = chosen === undefined;
  const renderOpts: RenderChatOptions = {
    addGenerationPrompt: opts?.addGenerationPrompt ?? true,
    source: usedDefaultTemplate ? 'default ChatML template' : (opts?.source ?? 'chat template'),
  };
  const bos = tok.specialTokens.bos;
  const eos = tok.specialTokens.eos;
  if (bos) renderOpts.bosToken = bos.token;
  if (eos) renderOpts.eosToken = eos.token;
  const text = renderChatTemplate(chosen ?? DEFAULT_CHAT_TEMPLATE, messages, renderOpts);
  const ids = tok.encode(text, { addSpecialTokens: false });
  if (tok.addBosToken && bos && ids[0] !== bos.id) {
    tok.validateIds([bos.id]);
    ids.unshift(bos.id);
  }
  return { text, ids, usedDefaultTemplate };
}

function validateMessages(messages: unknown): asserts messages is ChatMessage[] {
  if (!Array.isArray(messages)) {
    throw new KvdeskError('BAD_REQUEST', 'Chat messages must be a list of { role, content } objects.');
  }
  for (const [i, m] of messages.entries()) {
    const ok =
      typeof m === 'object' &&
      m !== null &&
      typeof (m as { role?: unknown }).role === 'string' &&
      typeof (m as { content?: unknown }).content === 'string';
    if (!ok) {
      throw new KvdeskError('BAD_REQUEST', `Chat message ${i} must have a string role and a string content.`, {
        index: i,
      });
    }
  }
}

function renameIdentifier(node: unknown, from: string, to: string, seen = new Set<object>()): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  if (Array.isArray(node)) {
    for (const child of node) renameIdentifier(child, from, to, seen);
    return;
  }
  const record = node as Record<string, unknown>;
  if (record.type === 'Identifier' && record.value === from) record.value = to;
  for (const child of Object.values(record)) renameIdentifier(child, from, to, seen);
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
