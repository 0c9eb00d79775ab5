/**
 * A thinking budget: a thinking model may reason for at most this many tokens; then the reasoning is closed for
 * it (the sampler may only write the tokens of a line break and the closing marker, as the tokenizer writes
 * them), and the reply goes on as the answer — the "budget forcing" of Qwen3's thinking budget and of s1. Wraps the
 * reply's other constraint: tool calls, whose grammar holds no call inside the reasoning anyway; or, `held`, the
 * answer's constraint alone (JSON output, tool calls beside it), which a thinking model's reasoning comes before —
 * the reasoning is free text, white space may follow its close, and the answer is held from its first byte.
 *
 * No npm packages: the engine process imports this file.
 */
import { failureOf, matchStep } from './call-constraint';
import type { ReplyConstraint, TokenTable } from './json-constraint';

/** What the host asks for (sent in the generate command). */
export interface BudgetSpec {
  open: string;
  close: string;
  /** The prompt opened the reasoning; else a reply that begins with `open` reasons first. */
  inside: boolean;
  /** Reasoning tokens allowed before the reasoning is closed (absent: no bound). */
  tokens?: number;
  /** The tokens that close it: a line break, the closing marker, a blank line (as the tokenizer encodes them). */
  force: number[];
  /**
   * The inner constraint holds the answer only, after the reasoning (JSON output): not the reasoning, the
   * markers and the white space around them. The reply may also skip the reasoning (where the prompt did not open
   * it) and begin with the answer.
   */
  held?: boolean;
  /**
   * Held: the white-space bytes that may come between the close and the answer (default MAX_GAP_WHITESPACE, as a
   * model writes `</think>` and a blank line; 0 where the close is the answer's header: gpt-oss's final message).
   */
  gap?: number;
  /**
   * Held: the tokens written for the model after it closes the reasoning itself (gpt-oss: its final message's
   * header after the analysis's `<|end|>`, so that no other message comes between).
   */
  afterClose?: number[];
}

export interface CompiledBudget {
  open: Uint8Array;
  close: Uint8Array;
  closeFail: Int32Array;
  /** The tokens written for the model when its budget is spent. */
  force: readonly number[];
  inside: boolean;
  /** Infinity: no bound. */
  tokens: number;
  held: boolean;
  gap: number;
  afterClose: readonly number[];
}

const utf8 = (s: string) => new TextEncoder().encode(s);
const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

export function compileBudget(spec: BudgetSpec): CompiledBudget {
  const close = utf8(spec.close);
  return {
    open: utf8(spec.open),
    close,
    closeFail: failureOf(close),
    force: spec.force,
    inside: spec.inside,
    tokens: spec.tokens === undefined ? Number.POSITIVE_INFINITY : Math.max(0, Math.floor(spec.tokens)),
    held: spec.held === true,
    gap: spec.gap ?? MAX_GAP_WHITESPACE,
    afterClose: spec.afterClose ?? [],
  };
}

type Phase = 'opening' | 'inside' | 'forcing' | 'gap' | 'after';

/** Longest run of white space between the reasoning's close and the answer, when `held` (unless it says less). */
export const MAX_GAP_WHITESPACE = 32;

/**
 * One row's reasoning around its other constraint (if any): a thinking budget, and where the inner constraint
 * holds the answer only (`held`: JSON output), the reasoning kept free of it.
 */
export class ReasoningBudget implements ReplyConstraint {
  private phase: Phase;
  /** opening: bytes of the opening marker read; inside: bytes of the close matched; forcing: tokens written. */
  private n = 0;
  private spent = 0;
  /** White-space bytes read in the gap (held only). */
  private ws = 0;
  /** The tokens being written for the model (forcing): the close, or (held) what follows the model's own. */
  private forced: readonly number[];
  /**
   * Held, opening: the tokens so far begin the opening marker and the answer both (`<` opens `<think>` and
   * `<tool_call>`): the inner constraint has read them, and is made anew if the marker is completed.
   */
  private both = false;

  constructor(
    private readonly table: TokenTable,
    private readonly budget: CompiledBudget,
    private inner?: ReplyConstraint,
    /** The tokens that end the reply: refused until the answer has begun where the inner constraint is held. */
    private readonly ends: ReadonlySet<number> = new Set(),
    /** Held: a new inner constraint (for an answer the reply began reading that turned out to be the reasoning). */
    private readonly fresh?: () => ReplyConstraint,
  ) {
    // Held is for an answer's constraint (JSON output): without one there is nothing to hold after the reasoning.
    if (budget.held && !inner) throw new Error('a held reasoning needs the constraint of the answer after it');
    this.forced = budget.force;
    this.phase = budget.inside ? 'inside' : 'opening';
    if (this.phase === 'inside' && budget.tokens === 0) this.phase = 'forcing';
  }

  get done(): boolean {
    if (this.budget.held) return this.phase === 'after' && (this.inner?.done ?? false);
    return this.inner?.done ?? false;
  }

  /**
   * Whether token `id` can come next. Held, the sampler asks first about the model's own pick (sampling.ts,
   * batcher.ts): an end token picked inside the reasoning is refused, and the reasoning is closed for the model
   * (as a spent budget closes it), so a model that meant to stop goes on to its answer rather than reasoning on.
   */
  allows(id: number): boolean {
    if (this.budget.held && this.phase === 'inside' && this.ends.has(id)) {
      this.startForcing(this.budget.force);
      return false;
    }
    if (!this.budget.held) {
      if (this.phase === 'forcing' && !this.continuesForce(id)) return false;
      return this.inner ? this.inner.allows(id) : true;
    }
    switch (this.phase) {
      case 'after':
        return this.inner ? this.inner.allows(id) : true;
      case 'forcing':
        return this.continuesForce(id);
      default:
        return this.heldAllows(id);
    }
  }

  mask(x: Float32Array, vocab: number): number {
    if (this.budget.held && this.phase !== 'forcing' && this.phase !== 'after') {
      let allowed = 0;
      for (let id = 0; id < vocab; id++) {
        if (x[id] === Number.NEGATIVE_INFINITY) continue;
        if (this.heldAllows(id)) allowed++;
        else x[id] = Number.NEGATIVE_INFINITY;
      }
      return allowed;
    }
    if (this.phase !== 'forcing') return this.inner ? this.inner.mask(x, vocab) : vocab;
    // One token may come: the close's next.
    const id = this.forced[this.n] as number;
    const keep =
      id < vocab && (this.budget.held || !this.inner || this.inner.allows(id))
        ? (x[id] as number)
        : Number.NEGATIVE_INFINITY;
    x.fill(Number.NEGATIVE_INFINITY, 0, vocab);
    if (keep === Number.NEGATIVE_INFINITY) return 0;
    x[id] = keep;
    return 1;
  }

  accept(id: number): void {
    const held = this.budget.held;
    const { bytes, offsets } = this.table;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    if (!held) this.inner?.accept(id);
    else if (
      this.phase === 'opening' &&
      this.fresh &&
      this.startsAnswer(id) &&
      this.continuesOpening(bytes, from, to)
    ) {
      // Both readings go on: the answer's (the inner constraint reads the token) and the opening's (below).
      this.inner?.accept(id);
      this.both = true;
      this.readOpening(bytes, from, to);
      // The marker is whole: the reply reasons, and the answer after it starts anew.
      if (this.phase !== 'opening') {
        this.inner = this.fresh();
        this.both = false;
      }
      return;
    } else if (this.phase === 'after' || this.startsAnswer(id)) {
      this.phase = 'after';
      this.both = false;
      this.inner?.accept(id);
      return;
    } else if (this.phase === 'opening' && this.both) {
      // Only the opening's reading goes on: the answer read so far was not one (its constraint starts anew).
      this.both = false;
      if (this.fresh) this.inner = this.fresh();
    }
    if (this.phase === 'forcing') {
      // Held, the white space the written tokens end with (a blank line after the close) counts in the gap.
      if (held) this.ws = this.spaceOnly(bytes, from, to) ? this.ws + (to - from) : 0;
      if (++this.n >= this.forced.length) this.phase = held ? 'gap' : 'after';
      return;
    }
    if (this.phase === 'opening') this.readOpening(bytes, from, to);
    else if (this.phase === 'inside') this.readInside(bytes, from, to);
    else if (this.phase === 'gap') this.ws += to - from;
  }

  /** The next token of the forced close. */
  private continuesForce(id: number): boolean {
    return id === this.forced[this.n];
  }

  /** Writes `tokens` for the model next (none: held, the gap follows). */
  private startForcing(tokens: readonly number[]): void {
    this.forced = tokens;
    this.n = 0;
    this.phase = tokens.length > 0 ? 'forcing' : 'gap';
  }

  /**
   * Held: whether a token that is not the answer's first fits where the reply is (before the reasoning's
   * opening, inside the reasoning, or in the white space after it): its bytes, or (where the reasoning's text
   * may end) the inner constraint's start.
   */
  private heldAllows(id: number): boolean {
    if (this.ends.has(id)) return false;
    if (this.startsAnswer(id)) return true;
    const { bytes, offsets } = this.table;
    if (id < 0 || id >= offsets.length - 1) return false;
    const from = offsets[id] as number;
    const to = offsets[id + 1] as number;
    if (this.phase === 'gap') return from < to && this.spaceFits(bytes, from, to);
    if (this.phase === 'inside') return this.closeLeavesSpace(bytes, from, to, this.n);
    // Opening: the marker's bytes (no white space before them: the reply begins with its reasoning or its answer),
    // then (once it is whole) reasoning.
    return this.continuesOpening(bytes, from, to);
  }

  /**
   * Held: whether token `id` begins (or goes on with) the answer, read by the inner constraint from its start —
   * where the reply may go on without a reasoning (before any of its opening has been written, or while what was
   * written of it began the answer too) or after it (in the gap).
   */
  private startsAnswer(id: number): boolean {
    const begins = this.phase === 'gap' || (this.phase === 'opening' && (this.n === 0 || this.both));
    return begins && !this.ends.has(id) && (this.inner ? this.inner.allows(id) : false);
  }

  /** Opening: whether bytes[from, to) go on with the opening marker (and, once it is whole, the reasoning). */
  private continuesOpening(bytes: Uint8Array, from: number, to: number): boolean {
    const open = this.budget.open;
    let n = this.n;
    for (let k = from; k < to; k++) {
      if (bytes[k] !== open[n]) return false;
      if (++n === open.length) return this.closeLeavesSpace(bytes, k + 1, to, 0);
    }
    return from < to;
  }

  /** Whether bytes[from, to) are white space that fits in the gap's room. */
  private spaceFits(bytes: Uint8Array, from: number, to: number): boolean {
    return this.ws + (to - from) <= this.budget.gap && this.spaceOnly(bytes, from, to);
  }

  private spaceOnly(bytes: Uint8Array, from: number, to: number): boolean {
    for (let k = from; k < to; k++) if (!isWs(bytes[k] as number)) return false;
    return true;
  }

  /** Inside the reasoning (`n` bytes of the close matched): whether any bytes after a close in them are white space. */
  private closeLeavesSpace(bytes: Uint8Array, from: number, to: number, matched: number): boolean {
    const { close, closeFail } = this.budget;
    let n = matched;
    for (let k = from; k < to; k++) {
      n = matchStep(close, closeFail, n, bytes[k] as number);
      if (n === close.length) {
        if (to - (k + 1) > this.budget.gap) return false;
        for (let j = k + 1; j < to; j++) if (!isWs(bytes[j] as number)) return false;
        return true;
      }
    }
    return true;
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
      this.n = matchStep(close, closeFail, this.n, bytes[k] as number);
      if (this.n === close.length) {
        // The model closed it itself; held, what is written for it after its close (if anything), and the white
        // space after it is the gap's.
        this.n = 0;
        this.ws = to - (k + 1);
        if (this.budget.held) this.startForcing(this.budget.afterClose);
        else this.phase = 'after';
        return;
      }
    }
    if (count) this.spent++;
    // Spent: the close is written for the model — unless it is writing the marker itself (a few tokens' grace).
    const over = this.spent - this.budget.tokens;
    if (over >= 0 && (this.n === 0 || over >= close.length)) this.startForcing(this.budget.force);
  }
}
