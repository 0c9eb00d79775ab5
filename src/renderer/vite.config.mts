/**
 * Builds only the renderer (the same output electron-vite writes), for when the
 * main/preload builds are not needed: `npx vite build --config src/renderer/vite.config.mts`.
 * Paths are relative to the repository root (run it from there); no node imports,
 * so this file type-checks with the renderer's DOM-only tsconfig.
 */
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

export default defineConfig({
  root: 'src/renderer',
  base: './',
  plugins: [react()],
  build: {
    outDir: '../../out/renderer',
    emptyOutDir: true,
  },
});
