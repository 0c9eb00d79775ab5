/**
 * The probabilities view of a reply: every token its generation wrote (its reasoning's included), each coloured by
 * how unlikely it was, the likeliest alternatives at its place on hover — and from the keyboard: the tokens are one
 * Tab stop (a reply has hundreds), the arrow keys go from token to token, and the one focused shows its card (Esc
 * hides it).
 */
import { type KeyboardEvent, useId, useLayoutEffect, useMemo, useRef, useState } from 'react';
import type { TokenProbability } from '../../shared/api';
import { alternatives, tokenName, tokenPieces } from '../lib/token-pieces';

/** Where each key moves the focus from token `at` of `count` (null: not a key of the group's). */
function step(key: string, at: number, count: number): number | null {
  if (key === 'ArrowRight' || key === 'ArrowDown') return Math.min(count - 1, at + 1);
  if (key === 'ArrowLeft' || key === 'ArrowUp') return Math.max(0, at - 1);
  if (key === 'Home') return 0;
  if (key === 'End') return count - 1;
  return null;
}

export function TokenView({ tokens, which }: { tokens: TokenProbability[]; which: string }) {
  const pieces = useMemo(() => tokenPieces(tokens), [tokens]);
  /** The token the group's one Tab stop is on: the last one focused. */
  const [current, setCurrent] = useState(0);
  const at = Math.min(current, Math.max(0, tokens.length - 1));
  /** Whether its card shows: while the focus is on it, until Esc. */
  const [carded, setCarded] = useState(false);
  const view = useRef<HTMLDivElement>(null);
  const list = useRef<HTMLDivElement>(null);
  const card = useRef<HTMLDivElement>(null);
  const cardId = useId();
  const token = tokens[at];
  const others = token ? alternatives(token) : [];

  // The card goes under the token's last line (a token may wrap), kept inside the view's width. It is placed in the
  // message (styles.css), whose bubble would cut off a card under the reply's last line.
  useLayoutEffect(() => {
    const el = list.current?.children[at];
    const box = view.current;
    const c = card.current;
    const parent = c?.offsetParent;
    if (!carded || !el || !box || !c || !parent) return;
    const rects = el.getClientRects();
    const line = rects[rects.length - 1] ?? el.getBoundingClientRect();
    const base = parent.getBoundingClientRect();
    const bounds = box.getBoundingClientRect();
    const left = Math.max(bounds.left, Math.min(line.left, bounds.right - c.offsetWidth));
    c.style.left = `${left - base.left}px`;
    c.style.top = `${line.bottom - base.top + 2}px`;
    // Under a reply's last lines it reaches below the list's edge: the list scrolls it into view.
    c.scrollIntoView({ block: 'nearest' });
  }, [at, carded]);

  const onKeyDown = (e: KeyboardEvent<HTMLDivElement>) => {
    if (e.key === 'Escape' && carded) {
      // The card goes, the focus stays; App's Esc (a drawer's close) is not for this press.
      e.preventDefault();
      setCarded(false);
      return;
    }
    const to = step(e.key, at, tokens.length);
    if (to === null) return;
    e.preventDefault();
    (list.current?.children[to] as HTMLElement | undefined)?.focus();
  };

  return (
    <div className="token-view" data-testid="token-view" ref={view}>
      <div className="hint">
        Each token as the model wrote it, coloured by its probability (the redder, the less likely); hover one, or focus
        it (the arrow keys go from token to token), for the likeliest tokens at its place.
      </div>
      <div
        className="tokens"
        role="listbox"
        aria-label={`Tokens of ${which}`}
        ref={list}
        onKeyDown={onKeyDown}
        onFocus={(e) => {
          const i = Number((e.target as HTMLElement).dataset.index);
          if (Number.isInteger(i)) setCurrent(i);
          setCarded(true);
        }}
        onBlur={(e) => {
          if (!e.currentTarget.contains(e.relatedTarget)) setCarded(false);
        }}
      >
        {tokens.map((t, i) => {
          const p = Math.exp(t.lp);
          const alpha = p >= 0.9 ? 0 : Math.min(0.6, (1 - p) * 0.65);
          // The same words as its card's.
          const title = [
            tokenName(pieces[i] ?? '', t.lp),
            ...(t.top.length > 0 ? ['likeliest here:', ...alternatives(t).map((a) => `  ${a}`)] : []),
          ].join('\n');
          return (
            <span
              // biome-ignore lint/suspicious/noArrayIndexKey: a finished reply's tokens never move
              key={i}
              className="tok"
              role="option"
              aria-selected={i === at}
              aria-label={tokenName(pieces[i] ?? '', t.lp)}
              aria-describedby={carded && i === at && others.length > 0 ? cardId : undefined}
              tabIndex={i === at ? 0 : -1}
              data-index={i}
              data-testid="token"
              data-p={p.toFixed(4)}
              title={title}
              style={alpha > 0 ? { backgroundColor: `hsl(8 85% 55% / ${alpha.toFixed(2)})` } : undefined}
            >
              {pieces[i]}
            </span>
          );
        })}
      </div>
      {carded && token && (
        <div className="token-card" data-testid="token-card" ref={card}>
          <div className="mono token-card-head">{tokenName(pieces[at] ?? '', token.lp)}</div>
          {others.length > 0 && (
            <div id={cardId}>
              <div className="muted">likeliest here:</div>
              <ul>
                {others.map((a, i) => (
                  // biome-ignore lint/suspicious/noArrayIndexKey: a token's alternatives never move
                  <li key={i} className="mono">
                    {a}
                  </li>
                ))}
              </ul>
            </div>
          )}
        </div>
      )}
    </div>
  );
}
