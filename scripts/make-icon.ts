/**
 * resources/icon.png (512 × 512, the desktop window's icon on Linux and Windows) from resources/icon.svg, rendered
 * by Debian's Chromium; also copies the SVG to src/renderer/public (the page's icon). Run after changing the SVG:
 * `node bin/run-ts.cjs scripts/make-icon.ts`.
 */
import { copyFileSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS } from '../test/e2e/chromium';

const ROOT = path.resolve(__dirname, '..');

async function main(): Promise<void> {
  const svg = readFileSync(path.join(ROOT, 'resources/icon.svg'), 'utf8');
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage({ viewport: { width: 512, height: 512 }, deviceScaleFactor: 1 });
    await page.setContent(
      `<html><body style="margin:0;background:transparent">${svg.replace('<svg ', '<svg width="512" height="512" ')}</body></html>`,
    );
    await page.screenshot({ path: path.join(ROOT, 'resources/icon.png'), omitBackground: true });
  } finally {
    await browser.close();
  }
  copyFileSync(path.join(ROOT, 'resources/icon.svg'), path.join(ROOT, 'src/renderer/public/icon.svg'));
  console.log('wrote resources/icon.png and src/renderer/public/icon.svg');
}

void main();
