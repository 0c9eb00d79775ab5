/** Debian's Chromium and the flags it runs with in the tests (root in a container: no sandbox; no network chatter). */
export const CHROMIUM = process.env.KVDESK_CHROMIUM ?? '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
