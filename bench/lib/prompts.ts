/** Prompt token ids for the benchmarks: the generator's own English text, tokenized by the package's tokenizer. */

import { TRAINING_TEXT } from '../../scripts/model-gen/corpus';
import type { RunnerService } from '../../src/main/host/runner-service';

/** A source of prompts of exact lengths; `variant` picks a different window of the text (concurrent streams). */
export interface PromptSource {
  prompt(length: number, variant?: number): number[];
}

/** Tokenizes the generator's text once (repeated until it is long enough) and cuts windows from it. */
export function promptSource(runner: RunnerService, modelId: string, needed: number): PromptSource {
  const tok = runner.tokenizerOf(modelId);
  let text = TRAINING_TEXT;
  let ids = tok.encode(text, { addSpecialTokens: false });
  while (ids.length < needed) {
    text += `\n${TRAINING_TEXT}`;
    ids = tok.encode(text, { addSpecialTokens: false });
  }
  return {
    prompt(length, variant = 0) {
      const start = (variant * 97) % Math.max(1, ids.length - length);
      return ids.slice(start, start + length);
    },
  };
}
