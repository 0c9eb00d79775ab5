/**
 * KaTeX (its stylesheet and fonts too) and highlight.js, as the Markdown view uses them: one chunk of its own, which
 * Markdown.tsx loads the first time a reply holds math or code to colour (imported here by name, so the bundle keeps
 * only highlight.js's common languages).
 */
import 'katex/dist/katex.min.css';
import { common, createLowlight } from 'lowlight';
import rehypeHighlight from 'rehype-highlight';
import rehypeKatex from 'rehype-katex';

/** The KaTeX rehype plugin with kvdesk's options (a formula it cannot read shows its source). */
export const katex: [typeof rehypeKatex, Parameters<typeof rehypeKatex>[0]] = [
  rehypeKatex,
  { strict: 'ignore', maxExpand: 1000, maxSize: 50 },
];

/**
 * rehype-highlight sets up its highlighter (highlight.js's common languages, ~3 ms) each time a parse starts, and
 * react-markdown starts one at each render: one highlighter serves them all (its transform keeps no state).
 */
const highlighter = rehypeHighlight({ detect: false });
export const sharedHighlight = (): typeof highlighter => highlighter;

/** highlight.js's common languages, as rehype-highlight sets them up, for code written without the parse. */
export const lowlight = createLowlight(common);
