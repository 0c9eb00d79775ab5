/**
 * Preloaded (`node --require`) into Electron's installer (node_modules/electron/install.js) by `npm start`: the
 * installer prints a failed download's stack, whose first line is only "TypeError: fetch failed"; the cause (a name
 * that does not resolve, ENOTFOUND; a refused connection; a certificate a proxy put in) is in `err.cause`, which the
 * stack leaves out. A fetch that fails here throws an error whose message names it.
 */
'use strict';

const original = globalThis.fetch;
if (typeof original === 'function') {
  globalThis.fetch = async function fetchSayingCause(...args) {
    try {
      return await original.apply(this, args);
    } catch (err) {
      const cause = err instanceof Error ? err.cause : undefined;
      if (!(cause instanceof Error)) throw err;
      const code = typeof cause.code === 'string' && !cause.message.includes(cause.code) ? ` (${cause.code})` : '';
      const Kind = err instanceof TypeError ? TypeError : Error;
      throw new Kind(`${err.message}: ${cause.message}${code}`, { cause });
    }
  };
}
