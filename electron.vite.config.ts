import path from 'node:path';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'electron-vite';

// main: the Electron composition root plus the engine process entry (forked by the host).
// preload: CommonJS (no "type": "module"), as a sandboxed preload requires.
// renderer: the same build serves the Electron window and the headless `serve` mode.
export default defineConfig({
  main: {
    build: {
      outDir: 'out/main',
      rollupOptions: {
        input: {
          index: path.resolve(__dirname, 'src/main/index.ts'),
          engine: path.resolve(__dirname, 'src/main/engine/process.ts'),
        },
        // A package loaded when first needed (mcp.ts's SDK) is required as the rest are, not imported as ESM.
        output: { dynamicImportInCjs: false },
      },
    },
  },
  preload: {
    build: {
      outDir: 'out/preload',
      rollupOptions: { input: { index: path.resolve(__dirname, 'src/preload/index.ts') } },
    },
  },
  renderer: {
    root: path.resolve(__dirname, 'src/renderer'),
    plugins: [react()],
    resolve: {
      alias: {
        // rehype-katex's HTML → tree parse: the parse5 one, not the browser's DOMParser, which reports every style
        // attribute of KaTeX's HTML as a Content-Security-Policy violation (style-src 'self').
        'hast-util-from-html-isomorphic': path.resolve(
          __dirname,
          'node_modules/hast-util-from-html-isomorphic/index.js',
        ),
      },
    },
    build: {
      outDir: path.resolve(__dirname, 'out/renderer'),
      minify: true,
      // No asset inlined as a data: URL (KaTeX's fonts): the page's Content-Security-Policy loads fonts from 'self' only.
      assetsInlineLimit: 0,
      rollupOptions: { input: path.resolve(__dirname, 'src/renderer/index.html') },
    },
  },
});
