/**
 * What a request means for a thinking model's reasoning: the template's switch (`enable_thinking`), and whether
 * (and from where) its replies are split into reasoning and answer.
 */
import type { GenerateRequest } from '../../shared/contract';
import { KvdeskError } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import { HARMONY_TOKENS, type ReasoningSpec } from '../../shared/reasoning';
import { promptOpensReasoning } from '../tokenizer';
import type { TextTokenizer } from '../tokenizer/text-tokenizer';
import type { ToolPlan } from './tool-plan';

/** How a request's replies are split: the markers, whether the prompt opened them, their special-token ids. */
export interface ReasoningPlan {
  spec: ReasoningSpec;
  inside: boolean;
  /** Harmony: the prompt opened the final message (after an empty analysis), so the reply starts in its body. */
  answering?: true;
  /** Harmony, answering: the prompt ends inside the final message's text (a prefill the reply continues). */
  continuing?: true;
  /** Markers that are special tokens: kept in the text the splitter reads. */
  keepIds: ReadonlySet<number>;
  /**
   * The reply is not split: its reasoning stays in its text, markers and all. Thinking is off, yet the final
   * message the reply continues opened a reasoning itself (a client's prefill of `<think>…`): the client asked
   * for the rest of that text, and a request with thinking off has no reasoning to give it apart (Anthropic's
   * route would hide it).
   */
  asText?: true;
}

/**
 * The template variables `thinking` sets (undefined: none): the template's switch, where it has one. A model
 * that does not reason cannot be asked to; `thinking` is for chat requests only (a raw prompt is the model's
 * text as written).
 */
export function thinkingVars(req: GenerateRequest, spec: ModelSpec): Record<string, unknown> | undefined {
  const effort =
    req.reasoningEffort === undefined ? undefined : { reasoning_effort: TEMPLATE_EFFORT[req.reasoningEffort] };
  if (req.thinking === undefined) return effort;
  if (!(req.messages || req.chat)) {
    throw new KvdeskError(
      'BAD_REQUEST',
      'thinking applies to chat requests (messages, or chat: true): a plain prompt is sent as written.',
      { field: 'thinking' },
    );
  }
  const reasoning = spec.reasoning;
  if (!reasoning) {
    if (!req.thinking) return undefined;
    throw new KvdeskError(
      'BAD_REQUEST',
      `model "${spec.id}" does not think (its chat template has no reasoning markers such as <think>): send the request without thinking.`,
      { field: 'thinking' },
    );
  }
  const toggle = reasoning.toggle === undefined ? undefined : { [reasoning.toggle]: req.thinking };
  return toggle || effort ? { ...effort, ...toggle } : undefined;
}

/** An effort as templates read it: gpt-oss's three levels (OpenAI's finer ones to the nearest). */
const TEMPLATE_EFFORT: Record<NonNullable<GenerateRequest['reasoningEffort']>, string> = {
  minimal: 'low',
  low: 'low',
  medium: 'medium',
  high: 'high',
  xhigh: 'high',
  max: 'high',
};

/** The reasoning tokens an effort allows when the request sets no budget of its own (absent: no bound). */
export const EFFORT_THINKING_BUDGET: Partial<Record<NonNullable<GenerateRequest['reasoningEffort']>, number>> = {
  minimal: 256,
  low: 1024,
};

/** The request's thinking budget: its own, else the one its effort implies, else none. */
export function thinkingBudgetOf(req: GenerateRequest): number | undefined {
  if (req.thinkingBudget !== undefined) return req.thinkingBudget;
  return req.reasoningEffort === undefined ? undefined : EFFORT_THINKING_BUDGET[req.reasoningEffort];
}

/** The least max new tokens a request (or its package) that sets them must give for a forced call to come after a reasoning. */
export const MIN_TOKENS_REASONING_BEFORE_CALL = 1024;

/**
 * Whether a forced tool call comes after the model's reasoning: a thinking model not told otherwise writes its
 * reasoning, then — once it closes it — the call's opening is written for it (it is not in the prompt) and the
 * call's JSON is held to its schema (reasoning-budget.ts, held). Not gpt-oss (its forced call goes in a final
 * message kvdesk opens in the prompt), and not where the request's limit (or the package's) is small (a limit
 * sized for the call would go to the reasoning).
 */
export function reasonsBeforeCall(req: GenerateRequest, spec: ModelSpec, tools: ToolPlan | undefined): boolean {
  // The request's limit, or the package's (a thinking model's reasoning default, 2 048, is none of them).
  const limit = req.maxNewTokens ?? spec.search.maxNewTokens;
  return (
    tools?.forced === true &&
    spec.reasoning !== undefined &&
    !spec.reasoning.harmony &&
    req.thinking !== false &&
    (limit === undefined || limit >= MIN_TOKENS_REASONING_BEFORE_CALL)
  );
}

/**
 * Whether a request's reply is written to a grammar from its first token, with no room to reason before it: a
 * forced tool call the model does not reason before (the prompt ends in the call's opening). JSON output (JSON
 * mode, structured output) lets a thinking model reason first: the engine holds the answer after the reasoning
 * (reasoning-budget.ts, held) — for gpt-oss, its final message.
 */
const heldFromFirstToken = (req: GenerateRequest, spec: ModelSpec, tools: ToolPlan | undefined): boolean =>
  tools?.forced === true && !reasonsBeforeCall(req, spec, tools);

/** Whether replies are JSON output: JSON mode, or structured output with a schema. */
export const jsonOutput = (req: GenerateRequest): boolean =>
  req.responseFormat === 'json' || req.jsonSchema !== undefined;

/**
 * The most reasoning tokens a reply held to JSON after its reasoning may take (whatever budget the request set):
 * its token limit less room for the answer — a quarter of the limit, 64 to 1 024 tokens — and less the tokens
 * written for the model to close the reasoning (`closing`), so that a long reasoning is closed in time for it to
 * write the JSON, not cut off before it.
 */
export function answerRoomBudget(maxTokens: number, closing = 0): number {
  const room = Math.min(1024, Math.max(64, Math.floor(maxTokens / 4)));
  return Math.max(0, maxTokens - room - closing);
}

/**
 * What to append to a thinking model's rendered chat prompt (`rendered`, before any tool-call opening) so its
 * reply starts after an empty, closed reasoning — as Qwen3's template writes it with its switch off: for
 * `thinking: false` where the template has no switch (DeepSeek-R1's always opens the reasoning), and for a reply
 * written to a grammar from its first token (a forced call) whose prompt opened the reasoning, which would
 * otherwise be written inside it; with thinking off, JSON output after it. Empty when nothing is to be closed.
 */
export function closingSuffix(
  req: GenerateRequest,
  spec: ModelSpec,
  tools: ToolPlan | undefined,
  rendered: string,
): string {
  const reasoning = spec.reasoning;
  if (!reasoning || req.continueFinal) return '';
  const constrained = heldFromFirstToken(req, spec, tools);
  const off = req.thinking === false && reasoning.toggle === undefined;
  // gpt-oss's JSON output: its analysis opened for it, which the engine ends with the final message's header
  // (the JSON is that message's body; nothing else comes between).
  if (reasoning.harmony && !constrained && req.thinking !== false && jsonOutput(req)) return reasoning.open;
  if (!constrained && !off) return '';
  if (reasoning.harmony) {
    // gpt-oss writes each message after a header. `thinking: false`: an empty analysis, then the final message —
    // or, where it may call tools (a call is a commentary message), the next message's start, its channel left
    // to the model. A forced call in kvdesk's form goes in the final channel.
    if (off && !constrained && tools) return `${reasoning.open}<|end|><|start|>assistant`;
    return off ? reasoning.open + reasoning.close : '<|channel|>final<|message|>';
  }
  const [before, after] = closeLines(reasoning.close);
  const closed = `${before}${reasoning.close}${after}`;
  if (promptOpensReasoning(rendered, reasoning)) return closed;
  // An empty reasoning, as the template writes one: `<think>\n\n</think>\n\n` (Qwen3's, its switch off), `[THINK][/THINK]`.
  return off ? `${reasoning.open}${before}${closed}` : '';
}

/**
 * What a template writes around a reasoning's close: a tag (`</think>`) on its own line, then a blank line;
 * Magistral's `[/THINK]` bare (its template writes `[THINK]…[/THINK]answer`).
 */
export function closeLines(close: string): readonly [before: string, after: string] {
  return close.startsWith('<') ? ['\n', '\n\n'] : ['', ''];
}

/**
 * Whether a thinking model's chat reply (`prompt`: as rendered) is split into reasoning and answer, and whether
 * it starts inside the reasoning: the prompt ended with the opening marker, or continues a reply whose reasoning
 * is not closed. Not a reply written to a grammar from its first token (a forced call): it has no room to reason.
 * JSON output is the answer after the reasoning.
 */
export function reasoningPlan(
  req: GenerateRequest,
  spec: ModelSpec,
  tok: TextTokenizer,
  tools: ToolPlan | undefined,
  prompt: string,
): ReasoningPlan | undefined {
  const reasoning = spec.reasoning;
  if (!reasoning) return undefined;
  if (heldFromFirstToken(req, spec, tools)) return undefined;
  const keepIds = new Set<number>();
  for (const marker of reasoning.harmony ? HARMONY_TOKENS : [reasoning.open, reasoning.close]) {
    const id = tok.tokenToId(marker);
    if (id !== undefined && tok.isSpecial(id)) keepIds.add(id);
  }
  // A reply that continues a final message's text is inside the reasoning when that text left it open; an empty
  // final message is a new reply, which the prompt opened (or not).
  const final = req.messages?.[req.messages.length - 1];
  const continues = req.continueFinal === true && final !== undefined && final.content.trim() !== '';
  const inside = continues
    ? final.content.lastIndexOf(reasoning.open) > final.content.lastIndexOf(reasoning.close)
    : promptOpensReasoning(prompt, reasoning);
  // gpt-oss: the prompt opened the final message, or continues its text (a prefill: the reply is its rest).
  const answering = reasoning.harmony && !inside && (continues || prompt.trimEnd().endsWith('<|message|>'));
  // (Not gpt-oss: its splitter also reads its calls, which are messages of their own.)
  const asText = continues && inside && req.thinking === false && !reasoning.harmony;
  return {
    spec: reasoning,
    inside,
    keepIds,
    ...(asText ? { asText } : {}),
    ...(answering ? { answering } : {}),
    ...(answering && continues ? { continuing: true as const } : {}),
  };
}
