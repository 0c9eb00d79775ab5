/**
 * The budget bar's colours as styles.css gives them: the bar's edge (the free track's boundary) at
 * 3:1 against the panel it sits on (WCAG 1.4.11, non-text contrast), and its segments apart from the free track and
 * from each other by lightness alone.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const css = readFileSync(new URL('../../../src/renderer/styles.css', import.meta.url), 'utf8');

/** A colour variable's value in one theme: each is `light-dark(#light, #dark)` in :root. */
function themed(name: string, theme: 'light' | 'dark'): string {
  const m = new RegExp(`\\n\\s*${name}:\\s*light-dark\\((#[0-9a-f]{6}),\\s*(#[0-9a-f]{6})\\)`, 'i').exec(css);
  if (!m?.[1] || !m[2]) throw new Error(`${name} is not light-dark(#rrggbb, #rrggbb) in styles.css`);
  return theme === 'light' ? m[1] : m[2];
}

/** A declaration's value in the first rule of exactly this selector. */
function declared(selector: string, property: string): string {
  const rule = new RegExp(`(?:^|\\n)${selector.replace(/[.*]/g, '\\$&')} \\{([^}]*)\\}`).exec(css);
  const value = rule?.[1] && new RegExp(`(?:^|\\n)\\s*${property}:\\s*([^;]+);`).exec(rule[1])?.[1];
  if (!value) throw new Error(`no ${property} in ${selector} in styles.css`);
  return value.trim();
}

/** WCAG 2's relative luminance of #rrggbb. */
function luminance(hex: string): number {
  const [r = 0, g = 0, b = 0] = [1, 3, 5].map((i) => {
    const c = Number.parseInt(hex.slice(i, i + 2), 16) / 255;
    return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** WCAG 2's contrast ratio of two colours, 1 to 21. */
function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x) as [number, number];
  return (hi + 0.05) / (lo + 0.05);
}

describe('contrast', () => {
  it('is WCAG 2’s ratio', () => {
    expect(contrast('#000000', '#ffffff')).toBeCloseTo(21, 5);
    expect(contrast('#777777', '#ffffff')).toBeCloseTo(4.48, 2);
    expect(contrast('#15171a', '#15171a')).toBe(1);
  });
});

describe('the budget bar in the dark theme', () => {
  const panel = themed('--panel', 'dark');
  const [used, reserved, held, free] = ['used', 'reserved', 'held', 'free'].map((k) => themed(`--kv-${k}`, 'dark')) as [
    string,
    string,
    string,
    string,
  ];

  it('draws its edge, and the legend’s swatches’, at 3:1 against the panel (the header and the inspector)', () => {
    for (const selector of ['.kvbar', '.swatch']) {
      const variable = /^1px solid var\((--[\w-]+)\)$/.exec(declared(selector, 'border'))?.[1];
      expect(variable, `${selector}'s border`).toBeDefined();
      expect(contrast(themed(variable ?? '', 'dark'), panel)).toBeGreaterThanOrEqual(3);
    }
    expect(declared('.kvbar', 'background')).toBe('var(--kv-free)');
    expect(declared('.header', 'background')).toBe('var(--panel)');
    expect(declared('.inspector', 'background')).toBe('var(--panel)');
  });

  it('draws its edge at 3:1 against the panel in the light theme too', () => {
    const variable = /^1px solid var\((--[\w-]+)\)$/.exec(declared('.kvbar', 'border'))?.[1] ?? '';
    expect(contrast(themed(variable, 'light'), themed('--panel', 'light'))).toBeGreaterThanOrEqual(3);
  });

  it('keeps reserved at 3:1 against the panel, and the four kinds three lightnesses apart', () => {
    expect(contrast(reserved, panel)).toBeGreaterThanOrEqual(3);
    // Darkest to lightest: free, reserved, used, held — each step at least 1.5:1 from the one before.
    const steps = [free, reserved, used, held];
    for (let i = 1; i < steps.length; i++) {
      expect(luminance(steps[i] ?? '')).toBeGreaterThan(luminance(steps[i - 1] ?? ''));
      expect(contrast(steps[i] ?? '', steps[i - 1] ?? '')).toBeGreaterThanOrEqual(1.5);
    }
  });
});
