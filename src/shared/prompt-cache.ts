/** Session ids of the host's prompt cache (anonymous sessions of HTTP API requests) start with this. */
export const PROMPT_CACHE_PREFIX = 'prompt-cache-';
