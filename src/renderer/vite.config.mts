/**
 * Builds only the renderer (the same output electron-vite writes), for when the
 * main/preload builds are not needed: `npx vite build --config src/renderer/vite.config.mts`.
 * Paths are relative to the repository root (run it from there); no node imports,
 * so this file type-checks with the renderer's DOM-only tsconfig.
 */
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

/** A file: URL's path (spaces and other letters decoded; Windows' drive letter without the slash before it). */
function fileOf(url: URL): string {
  return decodeURIComponent(url.pathname).replace(/^\/([A-Za-z]:)/, '$1');
}

export default defineConfig({
  root: 'src/renderer',
  base: './',
  plugins: [react()],
  resolve: {
    alias: {
      // rehype-katex's HTML → tree parse: the parse5 one, not the browser's DOMParser, which reports every style
      // attribute of KaTeX's HTML as a Content-Security-Policy violation (style-src 'self').
      'hast-util-from-html-isomorphic': fileOf(
        new URL('../../node_modules/hast-util-from-html-isomorphic/index.js', import.meta.url),
      ),
    },
  },
  build: {
    outDir: '../../out/renderer',
    emptyOutDir: true,
    // No asset inlined as a data: URL (KaTeX's fonts): the page's Content-Security-Policy loads fonts from 'self' only.
    assetsInlineLimit: 0,
  },
});
