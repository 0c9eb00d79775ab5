import type { IncomingMessage } from 'node:http';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import {
  type AccessPolicy,
  allowedHostsFor,
  checkAccess,
  isLoopback,
  originHostPort,
  ownOriginsFor,
  tokenMatches,
} from '../../../src/main/server/security';

function req(headers: Record<string, string>): IncomingMessage {
  return { headers } as unknown as IncomingMessage;
}

function policy(token?: string, extra: string[] = []): AccessPolicy {
  return {
    allowedHosts: allowedHostsFor('127.0.0.1', 8080, extra),
    ownOrigins: ownOriginsFor('127.0.0.1', 8080, extra),
    token,
    cookieName: 'kvdesk_token_8080',
  };
}

const url = (q = '') => new URL(`http://x/${q}`);

describe('allowed hosts', () => {
  it('are the loopback names with the port on a loopback bind', () => {
    expect([...allowedHostsFor('127.0.0.1', 8080)].sort()).toEqual(['127.0.0.1:8080', '[::1]:8080', 'localhost:8080']);
  });

  it('add the bound address, bracketing IPv6', () => {
    expect(allowedHostsFor('192.168.1.20', 9000).has('192.168.1.20:9000')).toBe(true);
    expect(allowedHostsFor('fe80::1', 9000).has('[fe80::1]:9000')).toBe(true);
  });

  it('add every interface address and the machine name on a wildcard bind', () => {
    const hosts = allowedHostsFor('0.0.0.0', 9000);
    expect(hosts.has(`${os.hostname().toLowerCase()}:9000`)).toBe(true);
    for (const addrs of Object.values(os.networkInterfaces())) {
      for (const a of addrs ?? []) if (a.family === 'IPv4') expect(hosts.has(`${a.address}:9000`)).toBe(true);
    }
  });

  it('take extra names with their own port as given, and bare where a client sends none (a default port)', () => {
    const hosts = allowedHostsFor('127.0.0.1', 9000, ['proxy.lan:443', 'box', 'alt.lan:8443']);
    expect(hosts.has('proxy.lan:443')).toBe(true);
    expect(hosts.has('proxy.lan')).toBe(true);
    expect(hosts.has('box:9000')).toBe(true);
    expect(hosts.has('box')).toBe(true);
    expect(hosts.has('box:1')).toBe(false);
    expect(hosts.has('alt.lan:8443')).toBe(true);
    expect(hosts.has('alt.lan')).toBe(false);
    // The server's own names keep their port (a page of another site on port 80 is not this server).
    expect(hosts.has('localhost')).toBe(false);
  });

  it('include the bare names on port 80, where browsers omit the port', () => {
    const hosts = allowedHostsFor('127.0.0.1', 80);
    expect(hosts.has('localhost')).toBe(true);
    expect(hosts.has('[::1]')).toBe(true);
    expect(allowedHostsFor('127.0.0.1', 8080).has('localhost')).toBe(false);
  });

  it('knows loopback from the rest', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]']) expect(isLoopback(h), h).toBe(true);
    for (const h of ['0.0.0.0', '::', '192.168.1.1', 'example.com', '127.0.0.1.nip.io'])
      expect(isLoopback(h), h).toBe(false);
  });
});

describe('checkAccess', () => {
  it('refuses a missing or foreign Host with 403', () => {
    expect(checkAccess(req({}), url(), policy())).toMatchObject({ ok: false, status: 403, code: 'host_not_allowed' });
    expect(checkAccess(req({ host: 'attacker.example:8080' }), url(), policy())).toMatchObject({
      ok: false,
      status: 403,
    });
    expect(checkAccess(req({ host: 'LOCALHOST:8080' }), url(), policy())).toEqual({ ok: true, setCookie: null });
  });

  it('refuses an Origin that is not one of the allowed hosts, or not http(s)', () => {
    const h = { host: '127.0.0.1:8080' };
    expect(checkAccess(req({ ...h, origin: 'http://localhost:8080' }), url(), policy()).ok).toBe(true);
    for (const origin of [
      'http://evil.example',
      'null',
      'file://',
      'chrome-extension://abc',
      'http://localhost:8081',
      'garbage',
    ]) {
      expect(checkAccess(req({ ...h, origin }), url(), policy()), origin).toMatchObject({
        ok: false,
        status: 403,
        code: 'origin_not_allowed',
      });
    }
  });

  it('an origin it was started with, calling beyond the model APIs: told those are all it may call, not to allow it', () => {
    const p = { ...policy(), allowedOrigins: new Set(['http://localhost:3000']) };
    const h = { host: '127.0.0.1:8080', origin: 'http://localhost:3000' };
    expect(checkAccess(req(h), url('v1/chat/completions'), p).ok).toBe(true);
    const refused = checkAccess(req(h), url('v1/kvdesk/budget'), p);
    expect(refused).toMatchObject({ ok: false, status: 403, code: 'origin_not_allowed' });
    const message = refused.ok ? '' : refused.message;
    expect(message).toContain("may call this server's model APIs only");
    expect(message).toContain('not /v1/kvdesk/budget');
    expect(message).not.toContain('--allow-origin');
    // Another origin is told how it could be let in.
    const other = checkAccess(req({ ...h, origin: 'http://localhost:4000' }), url('v1/chat/completions'), p);
    expect(other.ok ? '' : other.message).toContain('kvdesk serve --allow-origin http://localhost:4000');
  });

  it('with a token: 401 without it, accepted as Bearer, query (setting a cookie) or cookie', () => {
    const p = policy('s3cret');
    const h = { host: '127.0.0.1:8080' };
    expect(checkAccess(req(h), url(), p)).toMatchObject({ ok: false, status: 401, code: 'invalid_token' });
    expect(checkAccess(req({ ...h, authorization: 'Bearer wrong' }), url(), p)).toMatchObject({
      ok: false,
      status: 401,
    });
    expect(checkAccess(req({ ...h, authorization: 'Bearer s3cret' }), url(), p)).toEqual({ ok: true, setCookie: null });
    expect(checkAccess(req({ ...h, authorization: 'bearer   s3cret' }), url(), p).ok).toBe(true);
    const q = checkAccess(req(h), url('?token=s3cret'), p);
    expect(q).toEqual({ ok: true, setCookie: 'kvdesk_token_8080=s3cret; Path=/; HttpOnly; SameSite=Strict' });
    expect(checkAccess(req(h), url('?token=s3cre'), p).ok).toBe(false);
    expect(checkAccess(req({ ...h, cookie: 'a=1; kvdesk_token_8080=s3cret' }), url(), p)).toEqual({
      ok: true,
      setCookie: null,
    });
    // A cookie of another port's server does not count.
    expect(checkAccess(req({ ...h, cookie: 'kvdesk_token_9090=s3cret' }), url(), p).ok).toBe(false);
  });

  it("a name given without a port answers as Host bare, but a page on that name's port 80 or 443 is not the UI", () => {
    const p = policy('s3cret', ['box.local', 'proxy.lan:443']);
    const cookie = 'kvdesk_token_8080=s3cret';
    // The bare name is a Host it answers to (a proxy, a browser on a default port), as before.
    expect(checkAccess(req({ host: 'box.local', cookie }), url(), p).ok).toBe(true);
    // The UI on the server's own port, by that name: its own page.
    expect(checkAccess(req({ host: 'box.local:8080', origin: 'http://box.local:8080', cookie }), url(), p).ok).toBe(
      true,
    );
    // Another web app on box.local (port 80 or 443) carries the same-site cookie: refused, told what to do.
    for (const origin of ['http://box.local', 'https://box.local', 'http://box.local:80']) {
      const refused = checkAccess(req({ host: 'box.local:8080', origin, cookie }), url(), p);
      expect(refused, origin).toMatchObject({ ok: false, status: 403, code: 'origin_not_allowed' });
      expect(refused.ok ? '' : refused.message).toContain('--allow-host box.local:');
    }
    // A name given with its own port (a proxy's https address) is the UI's origin on that port only.
    expect(checkAccess(req({ host: 'proxy.lan', origin: 'https://proxy.lan', cookie }), url(), p).ok).toBe(true);
    expect(checkAccess(req({ host: 'proxy.lan', origin: 'http://proxy.lan', cookie }), url(), p).ok).toBe(false);
    expect(checkAccess(req({ host: 'proxy.lan', origin: 'https://proxy.lan:8080', cookie }), url(), p).ok).toBe(false);
  });

  it('reads an origin as host and port, the default port written', () => {
    expect(originHostPort('http://Box.Local')).toBe('box.local:80');
    expect(originHostPort('https://box.local')).toBe('box.local:443');
    expect(originHostPort('http://[::1]:9000')).toBe('[::1]:9000');
    for (const bad of ['null', 'file://', 'garbage', 'chrome-extension://abc']) expect(originHostPort(bad)).toBeNull();
  });

  it('checks Host before the token, so a rebinding page learns nothing about it', () => {
    expect(
      checkAccess(req({ host: 'evil:8080', authorization: 'Bearer s3cret' }), url(), policy('s3cret')),
    ).toMatchObject({ status: 403 });
  });

  it('compares tokens exactly', () => {
    expect(tokenMatches('abc', 'abc')).toBe(true);
    expect(tokenMatches('abc', 'abcd')).toBe(false);
    expect(tokenMatches('', 'abc')).toBe(false);
  });
});
