/**
 * The writing direction of people's text (pure, unit-tested): a Hebrew or Arabic message, title or name reads right
 * to left. Most elements take it from the browser (`dir="auto"`: the first strong character of their text); this is
 * for what it cannot see through — a reply's Markdown, whose blocks each have their own direction, as a whole, and
 * a list or quote holding blocks (see rehypeDirection).
 */

/** The letters of the scripts written right to left (Unicode's bidi classes R and AL). */
const RTL_LETTER =
  /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}\p{Script=Samaritan}\p{Script=Mandaic}\p{Script=Adlam}\p{Script=Hanifi_Rohingya}\p{Script=Yezidi}\p{Script=Mende_Kikakui}\p{Script=Imperial_Aramaic}\p{Script=Phoenician}\p{Script=Kharoshthi}\p{Script=Avestan}\p{Script=Nabataean}\p{Script=Palmyrene}\p{Script=Hatran}\p{Script=Manichaean}\p{Script=Old_South_Arabian}\p{Script=Old_North_Arabian}\p{Script=Sogdian}\p{Script=Old_Sogdian}\p{Script=Elymaic}\p{Script=Chorasmian}\p{Script=Old_Hungarian}\p{Script=Lydian}\p{Script=Cypriot}\p{Script=Meroitic_Cursive}\p{Script=Meroitic_Hieroglyphs}\p{Script=Inscriptional_Parthian}\p{Script=Inscriptional_Pahlavi}\p{Script=Psalter_Pahlavi}]/u;
/** A strong character (near enough): a letter of any script; digits, marks and punctuation are not. */
const STRONG = /[\p{L}\p{Nl}]/u;

/** The direction of the first strong character of `text` (as `dir="auto"` finds it); undefined where none is. */
export function textDirection(text: string): 'ltr' | 'rtl' | undefined {
  const m = STRONG.exec(text);
  if (!m) return undefined;
  return RTL_LETTER.test(m[0]) ? 'rtl' : 'ltr';
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

/** The direction a Markdown text reads in: its first strong character outside code and math, as `textDirection`. */
export function markdownDirection(text: string): 'ltr' | 'rtl' | undefined {
  // The first strong character is most often in the first few: the rest is read only where it is not.
  const quick = textDirection(text.slice(0, 200).replace(/[`~$\\][\s\S]*/, ''));
  if (quick) return quick;
  return textDirection(CODE_AND_MATH.reduce((t, re) => t.replace(re, ' '), text));
}

/** A HAST node, as far as rehypeDirection reads one. */
export interface DirNode {
  type: string;
  tagName?: string;
  properties?: Record<string, unknown>;
  value?: string;
  children?: DirNode[];
}

/** Blocks whose text is one paragraph: the browser finds their direction (`dir="auto"`). */
const TEXT_BLOCKS = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'td', 'th', 'dt', 'dd', 'summary', 'figcaption']);
/** Blocks that hold blocks: given the direction of their first strong character (the browser's `dir="auto"` does
 * not look into a child with a `dir` of its own, which each block inside has). */
const CONTAINERS = new Set(['ul', 'ol', 'blockquote', 'table', 'li', 'details', 'dl']);

function isKatex(node: DirNode): boolean {
  const c = node.properties?.className;
  return Array.isArray(c) && (c.includes('katex') || c.includes('katex-display'));
}

/** The text `dir="auto"` reads of a node: all of it but what has a direction of its own (code, math). */
function directedText(node: DirNode): string {
  if (node.type === 'text') return node.value ?? '';
  if (node.tagName === 'pre' || node.tagName === 'code' || isKatex(node)) return '';
  return (node.children ?? []).map(directedText).join('');
}

/**
 * Gives each block of a reply its own direction: a paragraph, heading or table cell `dir="auto"`; a list, item,
 * quote or table the direction of its first strong character (none: it follows its parent); code (blocks and
 * inline) and math left to right, set apart from the text around them. Runs on the HAST that react-markdown made.
 */
export function setDirections(node: DirNode): void {
  for (const child of node.children ?? []) {
    if (child.type !== 'element') continue;
    if (child.tagName === 'pre' || child.tagName === 'code' || isKatex(child)) {
      child.properties = { ...child.properties, dir: 'ltr' };
      continue;
    }
    setDirections(child);
    if (child.tagName && TEXT_BLOCKS.has(child.tagName)) child.properties = { ...child.properties, dir: 'auto' };
    else if (child.tagName && CONTAINERS.has(child.tagName)) {
      const dir = textDirection(directedText(child));
      if (dir) child.properties = { ...child.properties, dir };
    }
  }
}

/** setDirections as a rehype plugin. */
export function rehypeDirection() {
  return (tree: DirNode) => setDirections(tree);
}
