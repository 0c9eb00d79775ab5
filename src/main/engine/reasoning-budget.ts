/**
 * A thinking budget: a thinking model may reason for at most this many tokens; then the reasoning is closed for
 * it (the sampler may only write the tokens of a line break and the closing marker, as the tokenizer writes
 * them), and the reply goes on as the answer — the "budget forcing" of Qwen3's thinking budget and of s1. Wraps the reply's other constraint (tool calls),
 * which holds no call inside the reasoning anyway.
 *
 * No npm packages: the engine process imports this file.
 */
import type { ReplyConstraint, TokenTable } from './json-constraint';

/** What the host asks for (sent in the generate command). */
export interface BudgetSpec {
  open: string;
  close: string;
  /** The prompt opened the reasoning; else a reply that begins with `open` reasons first. */
  inside: boolean;
  /** Reasoning tokens allowed before the reasoning is closed. */
  tokens: number;
  /** The tokens that close it: a line break, the closing marker, a blank line (as the tokenizer encodes them). */
  force: number[];
}

export interface CompiledBudget {
  open: Uint8Array;
  close: Uint8Array;
  closeFail: Int32Array;
  /** The tokens written for the model when its budget is spent. */
  force: readonly number[];
  inside: boolean;
  tokens: number;
}

const utf8 = (s: string) => new TextEncoder().encode(s);
const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

export function compileBudget(spec: BudgetSpec): CompiledBudget {
  const close = utf8(spec.close);
  const closeFail = new Int32Array(close.length);
  for (let i = 1, k = 0; i < close.length; i++) {
    while (k > 0 && close[i] !== close[k]) k = closeFail[k - 1] as number;
    if (close[i] === close[k]) k++;
    closeFail[i] = k;
  }
  return {
    open: utf8(spec.open),
    close,
    closeFail,
    force: spec.force,
    inside: spec.inside,
    tokens: Math.max(0, Math.floor(spec.tokens)),
  };
}

type Phase = 'opening' | 'inside' | 'forcing' | 'after';

/** One row's thinking budget around its other constraint (if any). */
export class ReasoningBudget implements ReplyConstraint {
  private phase: Phase;
  /** opening: bytes of the opening marker read; inside: bytes of the close matched; forcing: tokens written. */
  private n = 0;
  private spent = 0;

  constructor(
    private readonly table: TokenTable,
    private readonly budget: CompiledBudget,
    private readonly inner?: ReplyConstraint,
  ) {
    this.phase = budget.inside ? 'inside' : 'opening';
    if (this.phase === 'inside' && budget.tokens === 0) this.phase = 'forcing';
  }

  get done(): boolean {
    return this.inner?.done ?? false;
  }

  allows(id: number): boolean {
    if (this.phase === 'forcing' && !this.continuesForce(id)) return false;
    return this.inner ? this.inner.allows(id) : true;
  }

  mask(x: Float32Array, vocab: number): number {
    if (this.phase !== 'forcing') return this.inner ? this.inner.mask(x, vocab) : vocab;
    // One token may come: the close's next.
    const id = this.budget.force[this.n] as number;
    const keep =
      id < vocab && (this.inner ? this.inner.allows(id) : true) ? (x[id] as number) : Number.NEGATIVE_INFINITY;
    x.fill(Number.NEGATIVE_INFINITY, 0, vocab);
    if (keep === Number.NEGATIVE_INFINITY) return 0;
    x[id] = keep;
    return 1;
  }

  accept(id: number): void {
    this.inner?.accept(id);
    const { bytes, offsets } = this.table;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    if (this.phase === 'forcing') {
      if (++this.n >= this.budget.force.length) this.phase = 'after';
      return;
    }
    if (this.phase === 'opening') this.readOpening(bytes, from, to);
    else if (this.phase === 'inside') this.readInside(bytes, from, to);
  }

  /** The next token of the forced close. */
  private continuesForce(id: number): boolean {
    return id === this.budget.force[this.n];
  }

  private readOpening(bytes: Uint8Array, from: number, to: number): void {
    const open = this.budget.open;
    for (let k = from; k < to; k++) {
      const b = bytes[k] as number;
      if (this.n === 0 && isWs(b)) continue;
      if (b !== open[this.n]) {
        this.phase = 'after'; // the reply did not begin with a reasoning
        return;
      }
      if (++this.n === open.length) {
        this.phase = 'inside';
        this.n = 0;
        // The rest of the token is reasoning.
        this.readInside(bytes, k + 1, to, false);
        return;
      }
    }
  }

  private readInside(bytes: Uint8Array, from: number, to: number, count = true): void {
    const { close, closeFail } = this.budget;
    for (let k = from; k < to; k++) {
      const b = bytes[k] as number;
      let n = this.n;
      while (n > 0 && b !== close[n]) n = closeFail[n - 1] as number;
      this.n = b === close[n] ? n + 1 : n;
      if (this.n === close.length) {
        this.phase = 'after'; // the model closed it itself
        this.n = 0;
        return;
      }
    }
    if (count) this.spent++;
    // Spent: the close is written for the model — unless it is writing the marker itself (a few tokens' grace).
    const over = this.spent - this.budget.tokens;
    if (over >= 0 && (this.n === 0 || over >= close.length)) {
      this.phase = 'forcing';
      this.n = 0;
    }
  }
}
