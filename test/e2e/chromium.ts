import { existsSync } from 'node:fs';

/** Debian's Chromium: what the screenshots and the bench's chat-view figure run in (the browser a person opens). */
export const CHROMIUM = process.env.KVDESK_CHROMIUM ?? '/usr/bin/chromium';

/** Debian's headless shell of the same Chromium (`apt-get install -y chromium-headless-shell`). */
const HEADLESS_SHELL = '/usr/lib/chromium/chromium-headless-shell';

/**
 * What the browser tests run in: the headless shell where it is installed — the same Blink and V8 without the
 * browser's own window and services, which Playwright also runs headless tests in by default; on 2 cores the browser
 * tests took 6.3 minutes in it against 9 in the whole browser, whose own process and compositor cost as much CPU
 * as the pages' — else Chromium. KVDESK_CHROMIUM names another binary for both.
 */
export const TEST_CHROMIUM =
  process.env.KVDESK_CHROMIUM === undefined && existsSync(HEADLESS_SHELL) ? HEADLESS_SHELL : CHROMIUM;

/** The flags they run with (root in a container: no sandbox; no network chatter). */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
