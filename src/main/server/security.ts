/**
 * Who may talk to the headless server. A page on another site must not reach
 * it through the browser (DNS rebinding: the attacker's name resolves to
 * 127.0.0.1, so the Host header is the only tell), and off loopback nobody may
 * reach it without the token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import os from 'node:os';

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** True for the addresses that bind every interface (`0.0.0.0`, `::`). */
export function isWildcard(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === '0.0.0.0' || h === '::' || h === '';
}

function hostWithPort(host: string, port: number): string {
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  return bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}`;
}

/** The names a server answers to: the loopback names, its bound address (or every interface's and the machine's name), and `extra`. */
function namesFor(bindHost: string, extra: string[]): string[] {
  const names = ['127.0.0.1', 'localhost', '::1', ...extra];
  if (isWildcard(bindHost)) {
    for (const addrs of Object.values(os.networkInterfaces())) {
      for (const a of addrs ?? []) names.push(a.address.replace(/%.*$/, ''));
    }
    names.push(os.hostname());
  } else {
    names.push(bindHost);
  }
  return names;
}

/** A name given with its own port (`proxy.example:443`, `[::1]:8443`): [name, port]; null for a bare name. */
function withOwnPort(n: string): [string, string] | null {
  const m = /^([^[\]:]+):(\d+)$/.exec(n) ?? /^(\[.*\]):(\d+)$/.exec(n);
  return m ? [m[1] as string, m[2] as string] : null;
}

/**
 * Host header values the server answers to: the loopback names, the bound
 * address (every interface's address and the machine's name when bound to a
 * wildcard), and any names given explicitly (a reverse proxy's name).
 */
export function allowedHostsFor(bindHost: string, port: number, extra: string[] = []): Set<string> {
  const allowed = new Set<string>();
  const bareOf = (n: string) => {
    const bare = n.replace(/^\[|\]$/g, '').toLowerCase();
    return bare.includes(':') ? `[${bare}]` : bare;
  };
  const given = new Set(extra);
  for (const n of namesFor(bindHost, extra)) {
    // Extra names may carry their own port (a proxy's public port).
    const withPort = withOwnPort(n);
    if (withPort) {
      allowed.add(n.toLowerCase());
      // Browsers and proxies leave a default port out of Host: https://proxy.example/ sends "proxy.example".
      if (withPort[1] === '80' || withPort[1] === '443') allowed.add(bareOf(withPort[0]));
      continue;
    }
    allowed.add(hostWithPort(n, port));
    // Browsers leave the default port out of Host and Origin; a name given without a port is a name of the
    // person's (a reverse proxy's, Docker's host.docker.internal), reached on the proxy's port as often as on this.
    if (port === 80 || given.has(n)) allowed.add(bareOf(n));
  }
  return allowed;
}

/**
 * The origins of the pages that are the UI's own, each as `host:port` (the port always written): the server's
 * names on its own port, and a name given with a port (a proxy's public one) on that port. A name given without a
 * port is a Host on a default port too (above), but a page on port 80 or 443 of that name is another web app on
 * that machine, not this UI: its browser would send the UI's cookie with its requests (a cookie ignores ports).
 */
export function ownOriginsFor(bindHost: string, port: number, extra: string[] = []): Set<string> {
  const own = new Set<string>();
  for (const n of namesFor(bindHost, extra)) own.add(withOwnPort(n) ? n.toLowerCase() : hostWithPort(n, port));
  return own;
}

/** An Origin header as `host:port`, its scheme's default port written out; null for one that is no http(s) origin. */
export function originHostPort(origin: string): string | null {
  try {
    const o = new URL(origin);
    if (o.protocol !== 'http:' && o.protocol !== 'https:') return null;
    return `${o.hostname.toLowerCase()}:${o.port || (o.protocol === 'https:' ? '443' : '80')}`;
  } catch {
    return null;
  }
}

/**
 * The Host names a server answers to, as the checks ask them: {@link allowedHostsFor} read once, or — bound to
 * every address — read again (at most once a second), since this computer's addresses change (a network joined
 * later, a new DHCP lease) and a Host of one it has now is its own.
 */
export function liveAllowedHosts(bindHost: string, port: number, extra: string[] = []): Pick<Set<string>, 'has'> {
  return liveSet(bindHost, () => allowedHostsFor(bindHost, port, extra));
}

/** The UI's own origins ({@link ownOriginsFor}), read again as {@link liveAllowedHosts} reads the Host names. */
export function liveOwnOrigins(bindHost: string, port: number, extra: string[] = []): Pick<Set<string>, 'has'> {
  return liveSet(bindHost, () => ownOriginsFor(bindHost, port, extra));
}

function liveSet(bindHost: string, read: () => Set<string>): Pick<Set<string>, 'has'> {
  let names = read();
  if (!isWildcard(bindHost)) return names;
  let readAt = Date.now();
  return {
    has: (name) => {
      if (Date.now() - readAt > 1000) {
        readAt = Date.now();
        try {
          names = read();
        } catch {
          // The system could not list its addresses just now: the last list stands.
        }
      }
      return names.has(name);
    },
  };
}

/** Outcome of checking one request (HTTP or WebSocket upgrade). */
export type AccessDecision =
  | { ok: true; setCookie: string | null }
  | { ok: false; status: 401 | 403; code: string; message: string };

/** The security settings of a running server. */
export interface AccessPolicy {
  allowedHosts: Pick<Set<string>, 'has'>;
  /** The origins (`host:port`, {@link originHostPort}) of the UI's own pages ({@link ownOriginsFor}). */
  ownOrigins: Pick<Set<string>, 'has'>;
  /** Required on every request when set. */
  token: string | undefined;
  /** Cookie that carries the token for the browser UI; named per port because cookies ignore ports. */
  cookieName: string;
  /**
   * Pages of other sites that may call the model APIs (`--allow-origin`): exact origins (`https://app.example`),
   * or `*` for any. The token, when set, is still required.
   */
  allowedOrigins?: ReadonlySet<string>;
}

/**
 * The routes a page of an allowed origin may call: the model APIs (OpenAI, Anthropic, Ollama). Not the UI, its
 * WebSocket (chats, tools), uploads, downloads, deletes, kvdesk's own management or the metrics.
 */
const CROSS_ORIGIN_PATHS =
  /^\/(v1\/(models(\/.+)?|chat\/completions|completions|messages(\/count_tokens)?|responses)|api\/(chat|generate|show|tags|ps|version))$/;

/**
 * Whether the request GETs a file of the UI (its page, scripts, styles): what any client that passes the Host check
 * (and the token, where one is set) may read anyway, so its Origin is not checked. A module script or a stylesheet
 * the page loads goes with an Origin, which through a proxy on a default port (http://proxy.example, for
 * `--allow-host proxy.example`) is no own origin of the UI's: refused, the page would stay blank. Not the WebSocket,
 * nor a route of the APIs, kvdesk's own (/health, /metrics) or anything that changes a thing.
 */
export function uiFileRequest(req: IncomingMessage, url: URL): boolean {
  if (req.method !== 'GET' && req.method !== 'HEAD') return false;
  if (req.headers.upgrade !== undefined) return false;
  const p = url.pathname;
  return !(p.startsWith('/v1/') || p.startsWith('/api/') || p === '/ws' || p === '/health' || p === '/metrics');
}

/**
 * An origin as browsers send it (`scheme://host[:port]`), or `*`; null for anything else (a path, a bare name).
 */
export function normalOrigin(text: string): string | null {
  if (text === '*') return '*';
  try {
    const u = new URL(text);
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.pathname !== '/' || u.search || u.hash) return null;
    return u.origin;
  } catch {
    return null;
  }
}

/** The request's Origin when it is one the policy lets call this route across sites; else null. */
export function crossOrigin(req: IncomingMessage, url: URL, policy: AccessPolicy): string | null {
  const origin = req.headers.origin;
  if (origin === undefined || !policy.allowedOrigins || policy.allowedOrigins.size === 0) return null;
  if (!CROSS_ORIGIN_PATHS.test(url.pathname)) return null;
  return originAllowed(origin, policy) ? origin : null;
}

/**
 * Whether the request is a page of another site that --allow-origin lets call this model API route: not the UI's
 * own page (`--allow-origin '*'` lets that in by this way too), nor a client that sends no Origin.
 */
export function fromAnotherSite(req: IncomingMessage, url: URL, policy: AccessPolicy): boolean {
  const origin = crossOrigin(req, url, policy);
  if (origin === null) return false;
  const hostPort = originHostPort(origin);
  return hostPort === null || !policy.ownOrigins.has(hostPort);
}

/** Whether `origin` is one the server was started with (`--allow-origin`), whatever the route. */
function originAllowed(origin: string, policy: AccessPolicy): boolean {
  const normal = normalOrigin(origin);
  if (normal === null || normal === '*' || !policy.allowedOrigins) return false;
  return policy.allowedOrigins.has('*') || policy.allowedOrigins.has(normal);
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Constant-time token comparison (hashing first makes the lengths equal). */
export function tokenMatches(given: string, expected: string): boolean {
  return timingSafeEqual(digest(given), digest(expected));
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      try {
        return decodeURIComponent(part.slice(eq + 1).trim());
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/**
 * Checks Host, then Origin, then the token. A token given in `?token=` is
 * answered with a cookie so the browser page's own requests (assets, the
 * WebSocket, uploads) carry it without putting it in every URL.
 */
export function checkAccess(req: IncomingMessage, url: URL, policy: AccessPolicy): AccessDecision {
  const host = req.headers.host?.toLowerCase();
  if (!host || !policy.allowedHosts.has(host)) {
    return {
      ok: false,
      status: 403,
      code: 'host_not_allowed',
      message: `Host "${host ?? ''}" is not a name this server answers to. This protects against DNS rebinding: open the server by its own address (e.g. 127.0.0.1 or localhost with its port), or, for a name of yours (a reverse proxy's, Docker's host.docker.internal), start kvdesk serve with --allow-host NAME.`,
    };
  }
  const origin = req.headers.origin;
  /** A page of another origin, let in by --allow-origin: its browser would attach the page's cookie too. */
  let foreign = false;
  if (origin !== undefined) {
    const hostPort = originHostPort(origin);
    // The UI's own page: one of the server's names on its port, or a name given with its own port (a proxy's).
    // A page on another port of a name the Host check lets in bare (box.local on 80) is another site's.
    foreign = hostPort === null || !policy.ownOrigins.has(hostPort);
    // A file of the UI is no secret (a client with no Origin gets it): its page keeps its cookie for it too.
    if (foreign && uiFileRequest(req, url)) foreign = false;
    if (foreign && crossOrigin(req, url, policy) === null) {
      // An origin it was started with that calls a route beyond the model APIs is told that, not to allow it again.
      const allowed = originAllowed(origin, policy);
      const named = hostPort === null ? null : new URL(origin).host.toLowerCase();
      return {
        ok: false,
        status: 403,
        code: 'origin_not_allowed',
        message: allowed
          ? `Origin "${origin}" may call this server's model APIs only (OpenAI's, Anthropic's and Ollama's routes), not ${url.pathname}: the rest (the UI, its chats and tools, uploads, downloads, kvdesk's own routes, /metrics) answers only pages the server serves itself. Open the UI from the server's own address.`
          : named !== null && policy.allowedHosts.has(named)
            ? `Origin "${origin}" is not this server's UI: a name given without a port (--allow-host) answers as a Host, but a page on ${hostPort} is another site's. Open the UI at the server's own port, or, where ${hostPort} is a reverse proxy to this server, start kvdesk serve with --allow-host ${hostPort}.`
            : `Origin "${origin}" may not call this server: only pages it serves itself may, and pages of origins it was started with (kvdesk serve --allow-origin ${origin}), which may call the model APIs only. Open the UI from the server's own address.`,
      };
    }
  }
  if (policy.token === undefined) return { ok: true, setCookie: null };
  const auth = req.headers.authorization;
  const bearer = auth?.match(/^Bearer\s+(.+)$/i)?.[1]?.trim();
  if (bearer !== undefined && tokenMatches(bearer, policy.token)) return { ok: true, setCookie: null };
  // Anthropic's clients send their key as x-api-key.
  const apiKey = req.headers['x-api-key'];
  if (typeof apiKey === 'string' && tokenMatches(apiKey.trim(), policy.token)) return { ok: true, setCookie: null };
  // The cookie and `?token=` are the UI's own: a page of another site (of this one, on another port: cookies
  // ignore ports) must send the token itself.
  if (foreign) return refusedToken(true);
  const fromQuery = url.searchParams.get('token');
  if (fromQuery !== null && tokenMatches(fromQuery, policy.token)) {
    return {
      ok: true,
      setCookie: `${policy.cookieName}=${encodeURIComponent(policy.token)}; Path=/; HttpOnly; SameSite=Strict`,
    };
  }
  const fromCookie = cookieValue(req.headers.cookie, policy.cookieName);
  if (fromCookie !== undefined && tokenMatches(fromCookie, policy.token)) return { ok: true, setCookie: null };
  return refusedToken(false);
}

/** The token's refusal; a page of another site is not told of the UI's `?token=` (its cookie would not reach it). */
function refusedToken(foreign: boolean): AccessDecision {
  const send = 'send "Authorization: Bearer <token>" (or "x-api-key: <token>")';
  return {
    ok: false,
    status: 401,
    code: 'invalid_token',
    message: `This server requires its access token: ${send}${foreign ? ' with each request from this page' : ', or open the UI once as /?token=<token>'}. The token was given with --token when the server started.`,
  };
}
