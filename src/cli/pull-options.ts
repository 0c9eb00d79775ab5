/**
 * `kvdesk pull`'s and `kvdesk search`'s flags, apart from pull.ts (the hub's code, and the package loader it checks a
 * download with) so that main.ts reads them for a command's help, or a flag's error, without loading those.
 */

/** `kvdesk pull`'s flags (main.ts's help describes each). */
export const PULL_OPTIONS = {
  variant: { type: 'string' },
  revision: { type: 'string' },
  list: { type: 'boolean' },
  json: { type: 'boolean' },
  'data-dir': { type: 'string' },
} as const;

/** `kvdesk search`'s flags. */
export const SEARCH_OPTIONS = { limit: { type: 'string' }, json: { type: 'boolean' } } as const;
