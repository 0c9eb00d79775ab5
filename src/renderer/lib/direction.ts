/**
 * The writing direction of people's text (pure, unit-tested): a Hebrew or Arabic message reads right to left. A
 * message's lines and a reply's blocks take the direction most of their letters read in, not the first letter's
 * (the browser's `dir="auto"`): an English line that opens with a Hebrew or Arabic word (a language lesson) reads
 * left to right, and a Hebrew one that opens with a brand name right to left. Titles, names and the boxes being
 * typed in keep `dir="auto"`.
 */

/** The letters of the scripts written right to left (Unicode's bidi classes R and AL). */
const RTL_LETTER =
  /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}\p{Script=Samaritan}\p{Script=Mandaic}\p{Script=Adlam}\p{Script=Hanifi_Rohingya}\p{Script=Yezidi}\p{Script=Mende_Kikakui}\p{Script=Imperial_Aramaic}\p{Script=Phoenician}\p{Script=Kharoshthi}\p{Script=Avestan}\p{Script=Nabataean}\p{Script=Palmyrene}\p{Script=Hatran}\p{Script=Manichaean}\p{Script=Old_South_Arabian}\p{Script=Old_North_Arabian}\p{Script=Sogdian}\p{Script=Old_Sogdian}\p{Script=Elymaic}\p{Script=Chorasmian}\p{Script=Old_Hungarian}\p{Script=Lydian}\p{Script=Cypriot}\p{Script=Meroitic_Cursive}\p{Script=Meroitic_Hieroglyphs}\p{Script=Inscriptional_Parthian}\p{Script=Inscriptional_Pahlavi}\p{Script=Psalter_Pahlavi}]/u;
/** A strong character (near enough): a letter of any script; digits, marks and punctuation are not. */
const STRONG = /[\p{L}\p{Nl}]/gu;
/** The letters read to tell a text's direction: its first ones (a reply of MBs is not read whole at each token). */
const READ_CHARS = 4096;

/**
 * The direction most of the strong characters of `text` read in (its first READ_CHARS characters'; a tie: the first
 * one's); undefined where it has none.
 */
export function textDirection(text: string): 'ltr' | 'rtl' | undefined {
  let rtl = 0;
  let ltr = 0;
  let first: 'ltr' | 'rtl' | undefined;
  for (const m of text.slice(0, READ_CHARS).matchAll(STRONG)) {
    const dir = RTL_LETTER.test(m[0]) ? 'rtl' : 'ltr';
    first ??= dir;
    if (dir === 'rtl') rtl++;
    else ltr++;
  }
  return rtl === ltr ? first : rtl > ltr ? 'rtl' : 'ltr';
}

/** Markdown's code and math: left to right, whatever the text around them (a fence left open runs to the end). */
const CODE_AND_MATH = [
  /^ {0,3}(`{3,}|~{3,})[\s\S]*?^ {0,3}\1/gm,
  /^ {0,3}(`{3,}|~{3,})[\s\S]*/m,
  /`[^`\n]*`/g,
  /\$\$[\s\S]*?\$\$/g,
  /\\\[[\s\S]*?\\\]/g,
  /\\\([\s\S]*?\\\)/g,
];

/** How much of a Markdown text markdownDirection reads: its first characters (code and math are taken out of them). */
export const MARKDOWN_READ_CHARS = 4 * READ_CHARS;

/** The direction a Markdown text reads in: its letters' outside code and math, as `textDirection`. */
export function markdownDirection(text: string): 'ltr' | 'rtl' | undefined {
  // Its first few KB: code and math taken out of them first (a fence they cut runs to their end, and goes too).
  return textDirection(CODE_AND_MATH.reduce((t, re) => t.replace(re, ' '), text.slice(0, MARKDOWN_READ_CHARS)));
}

/**
 * markdownDirection for one message whose text grows (a reply streaming, a frame at a time): once the text is
 * MARKDOWN_READ_CHARS long, what is read of it no longer changes as it grows, and neither does its direction, which
 * is kept rather than worked out again (six passes over 16 KB) at every frame. A text that does not begin as the
 * one kept did (the reply edited, another version shown) is read again. `compute`: markdownDirection (tests count).
 */
export function directionKeeper(
  compute: (text: string) => 'ltr' | 'rtl' | undefined = markdownDirection,
): (text: string) => 'ltr' | 'rtl' | undefined {
  let kept: { head: string; dir: 'ltr' | 'rtl' | undefined } | null = null;
  return (text) => {
    if (kept && text.length >= MARKDOWN_READ_CHARS && text.startsWith(kept.head)) return kept.dir;
    const dir = compute(text);
    kept = text.length >= MARKDOWN_READ_CHARS ? { head: text.slice(0, MARKDOWN_READ_CHARS), dir } : null;
    return dir;
  };
}

/** A HAST node, as far as rehypeDirection reads one. */
export interface DirNode {
  type: string;
  tagName?: string;
  properties?: Record<string, unknown>;
  value?: string;
  children?: DirNode[];
}

/** Blocks whose text is one paragraph: given the direction of their letters. */
const TEXT_BLOCKS = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'td', 'th', 'dt', 'dd', 'summary', 'figcaption']);
/** Blocks that hold blocks: given the direction of the letters of all of them (each block inside has its own). */
const CONTAINERS = new Set(['ul', 'ol', 'blockquote', 'table', 'li', 'details', 'dl']);

function isKatex(node: DirNode): boolean {
  const c = node.properties?.className;
  return Array.isArray(c) && (c.includes('katex') || c.includes('katex-display'));
}

/** The text of a node that tells its direction: all of it but what has a direction of its own (code, math). */
function directedText(node: DirNode): string {
  if (node.type === 'text') return node.value ?? '';
  if (node.tagName === 'pre' || node.tagName === 'code' || isKatex(node)) return '';
  return (node.children ?? []).map(directedText).join('');
}

/**
 * Gives each block of a reply its own direction: a paragraph, heading, table cell, list, item, quote or table the
 * direction of its letters (none: it follows its parent); code (blocks and inline) and math left to right, set apart
 * from the text around them. Runs on the HAST that react-markdown made.
 */
export function setDirections(node: DirNode): void {
  for (const child of node.children ?? []) {
    if (child.type !== 'element') continue;
    if (child.tagName === 'pre' || child.tagName === 'code' || isKatex(child)) {
      child.properties = { ...child.properties, dir: 'ltr' };
      continue;
    }
    setDirections(child);
    if (child.tagName && (TEXT_BLOCKS.has(child.tagName) || CONTAINERS.has(child.tagName))) {
      const dir = textDirection(directedText(child));
      if (dir) child.properties = { ...child.properties, dir };
    }
  }
}

/** setDirections as a rehype plugin. */
export function rehypeDirection() {
  return (tree: DirNode) => setDirections(tree);
}

/**
 * A name a person chose (a chat's title, a model's, a preset's, a tool's) set apart in a plain string such as a
 * `title=` tooltip, where no <bdi> can go: between U+2068 FIRST STRONG ISOLATE and U+2069 POP DIRECTIONAL ISOLATE,
 * so a Hebrew or Arabic name keeps its place in the English sentence around it and takes none of its punctuation.
 */
export function isolated(name: string): string {
  return `\u2068${name}\u2069`;
}

/** A name in quotes, set apart from the sentence around it ({@link isolated}): how notices and tooltips name a chat. */
export function quoted(name: string): string {
  return `“${isolated(name)}”`;
}

/** A run of a string made with {@link isolated}: a name set apart (`isolated`), or the text around it. */
export interface IsolateRun {
  text: string;
  isolated: boolean;
}

/**
 * A string made with {@link isolated} cut into its names and the text around them, its U+2068 and U+2069 marks
 * left out, for a page to show each name in a <bdi> of its own: the same isolation, with no invisible characters in
 * the text a person selects and copies. Marks a name holds itself stay in it (they are balanced inside the <bdi>); a
 * U+2069 with no U+2068 open is text.
 */
export function isolateRuns(text: string): IsolateRun[] {
  const runs: IsolateRun[] = [];
  let depth = 0;
  let start = 0;
  const push = (end: number, inside: boolean) => {
    if (end > start) runs.push({ text: text.slice(start, end), isolated: inside });
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\u2068') {
      if (depth === 0) {
        push(i, false);
        start = i + 1;
      }
      depth++;
    } else if (c === '\u2069' && depth > 0) {
      depth--;
      if (depth === 0) {
        push(i, true);
        start = i + 1;
      }
    }
  }
  push(text.length, depth > 0);
  return runs;
}
