/**
 * kvdesk's requests to other machines (the Hugging Face hub, MCP servers at a URL) through the proxy the environment
 * names, as curl, pip and Ollama take it.
 */
import type { EnvHttpProxyAgent } from 'undici';

/** The variables naming a proxy, as curl, pip and Ollama read them. */
const PROXY_VARIABLES = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy'] as const;

let proxied: { settings: string; agent: EnvHttpProxyAgent } | undefined;

/**
 * fetch through the proxy the environment names (HTTPS_PROXY / HTTP_PROXY, NO_PROXY for hosts to reach directly, in
 * either case), or undefined where none is named: Node's own fetch ignores them, so behind a proxy every request
 * (to the hub, to an MCP server at a URL) failed as "could not reach". The proxy, for messages, with it (without
 * its credentials).
 */
export function proxyFetch(url: string): { fetch: typeof fetch; proxy: string } | undefined {
  // The proxy undici's agent takes for this URL (the lower-case variable first, as it reads them); none: direct.
  const env = process.env;
  const httpProxy = env.http_proxy?.trim() || env.HTTP_PROXY?.trim();
  const proxy = url.startsWith('https:') ? env.https_proxy?.trim() || env.HTTPS_PROXY?.trim() || httpProxy : httpProxy;
  if (!proxy || reachedDirectly(url)) return undefined;
  const settings = [...PROXY_VARIABLES, 'NO_PROXY', 'no_proxy'].map((name) => process.env[name] ?? '').join('\n');
  // Loaded here, not with this module: undici takes a tenth of a second to load, which every kvdesk command paid.
  const undici = require('undici') as typeof import('undici');
  // One agent (its connections kept) while the settings stay as they are.
  if (proxied?.settings !== settings) {
    void proxied?.agent.close().catch(() => {});
    proxied = { settings, agent: new undici.EnvHttpProxyAgent() };
  }
  const dispatcher = proxied.agent;
  const through = (url: string | URL | Request, init?: RequestInit) =>
    undici.fetch(url as string, { ...(init as object), dispatcher });
  return {
    fetch: through as unknown as typeof fetch,
    proxy: proxy.replace(/\/\/[^@/]*@/, '//'),
  };
}

/**
 * Whether NO_PROXY (or no_proxy, read first) names the URL's host — a host, a domain whose subdomains it covers
 * (`example.com`, `.example.com`, `*.example.com`), with a port or not, or `*` for all — as undici's agent reads it
 * (its requests then go straight to the host, and kvdesk's messages must not say "through the proxy").
 */
export function reachedDirectly(url: string): boolean {
  if (!URL.canParse(url)) return false;
  const value = process.env.no_proxy ?? process.env.NO_PROXY ?? '';
  if (value === '*') return true;
  const u = new URL(url);
  // The host without its port, IPv6 brackets kept (as undici compares it).
  const host = u.host.replace(/:\d*$/, '').toLowerCase();
  const port = Number.parseInt(u.port, 10) || (u.protocol === 'https:' ? 443 : u.protocol === 'http:' ? 80 : 0);
  for (const entry of value.split(/[,\s]/)) {
    if (!entry) continue;
    const m = /^(.+):(\d+)$/.exec(entry);
    const name = (m ? (m[1] as string) : entry).replace(/^\*?\./, '').toLowerCase();
    if (m && Number.parseInt(m[2] as string, 10) !== port) continue;
    if (host === name || host.endsWith(`.${name}`)) return true;
  }
  return false;
}
