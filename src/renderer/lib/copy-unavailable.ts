/**
 * What a copy button says when neither way took the text (lib/clipboard.ts). Apart from it, with nothing of the
 * page's: the browser tests, which have no DOM types, read it too.
 */
export const COPY_UNAVAILABLE = 'copy is not available here: select the text';
