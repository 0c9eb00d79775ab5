/**
 * What a request means for a thinking model's reasoning: the template's switch (`enable_thinking`), and whether
 * (and from where) its replies are split into reasoning and answer.
 */
import type { GenerateRequest } from '../../shared/contract';
import { KvdeskError } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import type { ReasoningSpec } from '../../shared/reasoning';
import { promptOpensReasoning } from '../tokenizer';
import type { TextTokenizer } from '../tokenizer/text-tokenizer';
import type { ToolPlan } from './tool-plan';

/** How a request's replies are split: the markers, whether the prompt opened them, their special-token ids. */
export interface ReasoningPlan {
  spec: ReasoningSpec;
  inside: boolean;
  /** Markers that are special tokens: kept in the text the splitter reads. */
  keepIds: ReadonlySet<number>;
}

/**
 * The template variables `thinking` sets (undefined: none). A model that does not reason cannot be asked to; one
 * whose template has no switch cannot be asked not to.
 */
export function thinkingVars(req: GenerateRequest, spec: ModelSpec): Record<string, unknown> | undefined {
  if (req.thinking === undefined) return undefined;
  const reasoning = spec.reasoning;
  if (!reasoning) {
    if (!req.thinking) return undefined;
    throw new KvdeskError(
      'BAD_REQUEST',
      `model "${spec.id}" does not think (its chat template has no reasoning markers such as <think>): send the request without thinking.`,
      { field: 'thinking' },
    );
  }
  if (reasoning.toggle === undefined) {
    if (req.thinking) return undefined;
    throw new KvdeskError(
      'BAD_REQUEST',
      `model "${spec.id}" always thinks: its chat template has no switch to answer without reasoning (enable_thinking). Send the request without turning thinking off.`,
      { field: 'thinking' },
    );
  }
  return { [reasoning.toggle]: req.thinking };
}

/**
 * Whether a thinking model's chat reply (`prompt`: as rendered) is split into reasoning and answer, and whether
 * it starts inside the reasoning: the prompt ended with the opening marker, or continues a reply whose reasoning
 * is not closed. Not a reply written to a grammar from its first token (JSON mode, a forced call): it has no
 * room to reason.
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
  if (req.responseFormat === 'json' || req.jsonSchema !== undefined || tools?.forced) return undefined;
  const keepIds = new Set<number>();
  for (const marker of [reasoning.open, reasoning.close]) {
    const id = tok.tokenToId(marker);
    if (id !== undefined && tok.isSpecial(id)) keepIds.add(id);
  }
  const final = req.messages?.[req.messages.length - 1];
  const inside =
    req.continueFinal && final
      ? final.content.lastIndexOf(reasoning.open) > final.content.lastIndexOf(reasoning.close)
      : promptOpensReasoning(prompt, reasoning);
  return { spec: reasoning, inside, keepIds };
}
