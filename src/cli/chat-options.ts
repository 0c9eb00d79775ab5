/**
 * `kvdesk chat`'s flags, apart from chat.ts (which brings the runner, the package loader and the template code) so
 * that main.ts reads them for `kvdesk chat --help`, or a flag's error, without loading those.
 */
import { HOST_OPTIONS, LOAD_OPTIONS, SAMPLING_OPTIONS } from './common';

/** `kvdesk chat`'s flags (main.ts's help describes each). */
export const CHAT_OPTIONS = {
  system: { type: 'string' },
  'max-new-tokens': { type: 'string' },
  ...SAMPLING_OPTIONS,
  verbose: { type: 'boolean' },
  think: { type: 'boolean' },
  nothink: { type: 'boolean' },
  'thinking-budget': { type: 'string' },
  effort: { type: 'string' },
  'context-overflow': { type: 'string' },
  ...HOST_OPTIONS,
  ...LOAD_OPTIONS,
} as const;
