/**
 * Turns an error from a generation into what the thread shows: what happened,
 * the numbers behind it, and the one thing a person can do about it.
 */
import type { ErrorInfo } from '../../shared/errors';
import { FIX_PACKAGE_TEMPLATE } from '../../shared/model-spec';
import { exactBytes, formatBytes, formatInteger } from './format';

export interface RefusalFigure {
  label: string;
  /** Shown text. */
  text: string;
  /** Exact bytes, when the figure is a byte count (tooltip and data-bytes). */
  bytes?: number;
}

export interface RefusalView {
  code: string;
  title: string;
  figures: RefusalFigure[];
  /** The one thing to do. */
  action: string;
  /** The host's own sentence (it carries the numbers even when detail was lost, e.g. after reload). */
  message: string;
  /** A refusal by the scheduler (shown in amber), as opposed to a failure (red). */
  refused: boolean;
}

function num(detail: ErrorInfo['detail'], key: string): number | undefined {
  const v = detail?.[key];
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function bytesFigure(label: string, bytes: number | undefined): RefusalFigure[] {
  return bytes === undefined ? [] : [{ label, text: formatBytes(bytes), bytes }];
}

function countFigure(label: string, n: number | undefined, unit = '', prefix = ''): RefusalFigure[] {
  return n === undefined ? [] : [{ label, text: `${prefix}${formatInteger(n)}${unit}` }];
}

/** What the chat knows that the error does not: its system prompt's tokens alone, against the model's context. */
export interface RefusalContext {
  systemPrompt?: { tokens: number; contextLength: number };
}

/** A system prompt that takes at least this share of the context is what leaves no room (it is in every prompt). */
const SYSTEM_PROMPT_SHARE = 0.5;

/**
 * Explains a generation error; unknown codes fall back to the host's message. The one thing to do is left out
 * (empty) where the host's sentence already says it.
 */
export function describeRefusal(error: ErrorInfo, context: RefusalContext = {}): RefusalView {
  const view = explain(error, context);
  const said = view.message.toLowerCase().includes(view.action.toLowerCase().replace(/\.$/, ''));
  return said ? { ...view, action: '' } : view;
}

function explain(error: ErrorInfo, context: RefusalContext): RefusalView {
  const d = error.detail;
  const base = { code: error.code, message: error.message };
  switch (error.code) {
    case 'KV_BUDGET_EXCEEDED':
      return {
        ...base,
        // In a chat the prompt is the whole conversation: "shorten the prompt" is a new chat or a shorter message.
        message: error.message.replace(
          /Shorten the prompt, /,
          'Shorten the conversation (go on in a new chat, or send a shorter message), ',
        ),
        refused: true,
        title: 'Refused: this request can never fit the KV budget',
        figures: [
          ...bytesFigure('required', num(d, 'requiredBytes')),
          ...bytesFigure('budget', num(d, 'budgetBytes')),
          ...countFigure('prompt', num(d, 'promptTokens'), ' tok'),
          ...(num(d, 'sessionTokens') ? countFigure('session', num(d, 'sessionTokens'), ' tok') : []),
          ...countFigure('rows', num(d, 'rows')),
          ...bytesFigure('per token', num(d, 'bpt')),
        ],
        action: 'The KV budget is set in the inspector (Controls → limit).',
      };
    case 'CONTEXT_OVERFLOW':
      return {
        ...base,
        refused: true,
        title: "Refused: the prompt fills the model's context window",
        figures: [
          // Counted only until its newest turns filled the context: at least that many.
          ...countFigure('prompt', num(d, 'promptTokens'), ' tok', num(d, 'countedUpTo') !== undefined ? '≥' : ''),
          ...(num(d, 'sessionTokens') ? countFigure('earlier turns', num(d, 'sessionTokens'), ' tok') : []),
          ...countFigure('context', num(d, 'contextLength'), ' tok'),
        ],
        ...(systemPromptAction(context) !== undefined
          ? {
              // The host's own advice (a shorter prompt, a new chat) would not help: the system prompt's does.
              message: error.message.replace(/\s*Shorten the prompt or start a new chat\.?\s*$/i, ''),
              action: systemPromptAction(context) as string,
            }
          : { action: 'Shorten the prompt or start a new chat.' }),
      };
    case 'QUEUE_FULL': {
      const retry = num(d, 'retryAfterMs');
      return {
        ...base,
        refused: true,
        title: 'Refused: the admission queue is full',
        figures: [...countFigure('waiting', num(d, 'queueLength')), ...countFigure('queue limit', num(d, 'maxQueue'))],
        action:
          retry === undefined
            ? 'Try again in a moment.'
            : `Try again in about ${Math.max(1, Math.ceil(retry / 1000))} s.`,
      };
    }
    case 'SESSION_INVALID': {
      // A turn sent while another of the chat was on its way (from this window or another tab): said in the
      // chat's words, not the scheduler's session and request ids.
      const busy = d && typeof d.state === 'string' ? d.state : undefined;
      return {
        ...base,
        ...(busy
          ? {
              message: `Another reply of this chat was still ${busy === 'queued' ? 'waiting to start' : 'being written'} (in this window or another window or tab) when this turn was sent.`,
            }
          : {}),
        refused: true,
        title: 'This chat is busy',
        figures: [],
        action: busy ? 'Once that reply has ended, send this again (regenerate).' : 'Wait for the reply or stop it.',
      };
    }
    case 'MODEL_NOT_LOADED':
      return { ...base, refused: false, title: 'No model is loaded', figures: [], action: 'Load a model package.' };
    case 'TOKEN_OUT_OF_VOCAB':
      return {
        ...base,
        refused: false,
        title:
          d?.field === 'chatTemplate'
            ? "The chat template's markup is outside the model's vocabulary"
            : "The text has tokens outside the model's vocabulary",
        figures: [],
        action:
          d?.field === 'chatTemplate'
            ? "Give the model another chat template in its card (Models → the model's chat template), or use another model."
            : 'Use a model with a matching tokenizer.',
      };
    case 'BAD_REQUEST':
      // A tool whose schema a forced call cannot follow: the chat's "must call a tool" is what to change.
      if (typeof d?.field === 'string' && d.field.startsWith('tools[') && /tool_choice/.test(error.message)) {
        return {
          ...base,
          message: error.message.replace(/\s*Simplify the schema, or let the model choose[^.]*\.?/, ''),
          refused: false,
          title: 'A tool of this chat cannot be called as the settings ask',
          figures: [],
          action:
            'Untick "must call a tool" in the chat\'s settings (the model then calls tools when it chooses), or turn that tool\'s server off for this chat.',
        };
      }
      // The host's sentence says what was wrong: the same request again would fail the same way.
      return { ...base, refused: false, title: 'Failed (BAD_REQUEST)', figures: [], action: '' };
    case 'PACKAGE_INVALID':
      // The package itself (its chat template, mostly): sending again fails the same way. The host's own advice
      // for a template goes: the action says what to do in the window.
      return {
        ...base,
        message: error.message.replace(` ${FIX_PACKAGE_TEMPLATE}`, ''),
        refused: false,
        title: "The model's package cannot make this reply",
        figures: [],
        action: /chat template|chat_template/i.test(error.message)
          ? "Give the model another chat template in its card (Models → the model's chat template), or fix the package's (or remove it: the default ChatML template is then used)."
          : '',
      };
    default:
      return { ...base, refused: false, title: `Failed (${error.code})`, figures: [], action: 'Try again.' };
  }
}

/** For a prompt too long for the context: the chat's system prompt, where it alone takes most of the context. */
function systemPromptAction(context: RefusalContext): string | undefined {
  const sp = context.systemPrompt;
  if (!sp || sp.contextLength <= 0 || sp.tokens < sp.contextLength * SYSTEM_PROMPT_SHARE) return undefined;
  const where = "shorten it in the chat's settings (system & sampling…), or use a model with a longer context.";
  return sp.tokens >= sp.contextLength
    ? `The chat's system prompt alone is ${formatInteger(sp.tokens)} tokens (with the chat template), more than the model's context of ${formatInteger(sp.contextLength)}: ${where}`
    : `The chat's system prompt alone takes ${formatInteger(sp.tokens)} of the model's ${formatInteger(sp.contextLength)} tokens (with the chat template): ${where}`;
}

/** A refusal or failure in a few words, for a table row or a timeline line: why, and the one thing to do. */
export interface RefusalBrief {
  /** Why, with the error's numbers where it has them: `needs 1.57 MiB, budget 1.50 MiB`. */
  reason: string;
  /** The one thing to do, in a few words (empty where there is none to say). */
  action: string;
  /** The reason's figures in exact bytes, for a tooltip (where it has bytes). */
  title?: string;
}

/**
 * Two sizes said side by side; where their rounded figures read the same but they differ (1,537 KiB against 1,536
 * KiB, both `1.50 MiB`), in exact bytes, so the difference shows.
 */
function twoSizes(a: number, b: number): [string, string] {
  const x = formatBytes(a);
  const y = formatBytes(b);
  return x === y && a !== b ? [exactBytes(a), exactBytes(b)] : [x, y];
}

/** A message's first sentence, for an error without the numbers to say it in brief (its whole message goes beside). */
function firstSentence(message: string): string {
  const m = /^(.+?[.!?])(\s|$)/.exec(message.trim());
  return (m?.[1] ?? message.trim()).replace(/\.$/, '');
}

/**
 * Says a request's refusal (or failure) in brief, from its error's detail numbers (the host's message has the whole
 * of it); `request` (its rows, a static cache) picks what to do: a static cache cannot be shortened, rows can be fewer.
 */
export function refusalBrief(error: ErrorInfo, request: { rows?: number; fixedTokens?: number } = {}): RefusalBrief {
  const d = error.detail;
  switch (error.code) {
    case 'KV_BUDGET_EXCEEDED': {
      const required = num(d, 'requiredBytes');
      const budget = num(d, 'budgetBytes');
      if (required === undefined || budget === undefined) break;
      const rows = (num(d, 'rows') ?? request.rows ?? 1) > 1 ? 'send fewer rows' : '';
      const steps = [request.fixedTokens === undefined ? 'shorten the prompt' : '', rows].filter(Boolean);
      const [needs, limit] = twoSizes(required, budget);
      return {
        reason: `needs ${needs}, budget ${limit}`,
        action: `${steps.join(', ')}${steps.length > 0 ? ' or ' : ''}raise the limit`,
        title: `needs ${exactBytes(required)}, budget ${exactBytes(budget)}`,
      };
    }
    case 'CONTEXT_OVERFLOW': {
      const prompt = num(d, 'promptTokens');
      const context = num(d, 'contextLength');
      if (prompt === undefined || context === undefined) break;
      const session = num(d, 'sessionTokens') ?? 0;
      return {
        reason: `${num(d, 'countedUpTo') !== undefined ? '≥' : ''}${formatInteger(prompt)}${session > 0 ? ` + ${formatInteger(session)} earlier` : ''} tokens fill the ${formatInteger(context)}-token context`,
        // Earlier turns fill it too: a new chat starts without them.
        action: session > 0 ? 'start a new chat or shorten the prompt' : 'shorten the prompt',
      };
    }
    case 'QUEUE_FULL': {
      const waiting = num(d, 'queueLength');
      const max = num(d, 'maxQueue');
      if (waiting === undefined || max === undefined) break;
      const retry = num(d, 'retryAfterMs');
      return {
        reason: `the queue was full (${formatInteger(waiting)} waiting, limit ${formatInteger(max)})`,
        action:
          retry === undefined
            ? 'try again in a moment'
            : `try again in about ${Math.max(1, Math.ceil(retry / 1000))} s`,
      };
    }
    case 'SESSION_INVALID':
      if (typeof d?.state === 'string') {
        return { reason: `its session had another turn ${d.state}`, action: 'send it once that turn ends' };
      }
      break;
  }
  return { reason: firstSentence(error.message), action: '' };
}
