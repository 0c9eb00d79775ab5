/**
 * Which hosts NO_PROXY sends straight to, read as undici's EnvHttpProxyAgent reads it: kvdesk's messages say
 * "through the proxy" only for requests that go through it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { proxyFetch, reachedDirectly } from '../../../src/main/host/proxy-fetch';
import { restoreProxy, setProxy } from '../../helpers/connect-proxy';

afterEach(restoreProxy);

describe('NO_PROXY', () => {
  it('names hosts, domains with their subdomains, ports, or everything', () => {
    setProxy({ NO_PROXY: 'localhost, .corp.example,*.lan  10.0.0.5:8080,[::1]' });
    expect(reachedDirectly('http://localhost:3000/mcp')).toBe(true);
    expect(reachedDirectly('https://hub.corp.example/x')).toBe(true);
    expect(reachedDirectly('https://corp.example/x')).toBe(true);
    expect(reachedDirectly('http://box.lan/mcp')).toBe(true);
    expect(reachedDirectly('http://10.0.0.5:8080/mcp')).toBe(true);
    expect(reachedDirectly('http://[::1]:9/mcp')).toBe(true);
    // Another port of a host named with one; a name that only ends the same; another host.
    expect(reachedDirectly('http://10.0.0.5/mcp')).toBe(false);
    expect(reachedDirectly('https://notcorp.example/x')).toBe(false);
    expect(reachedDirectly('https://huggingface.co/api')).toBe(false);
    setProxy({ NO_PROXY: '*' });
    expect(reachedDirectly('https://huggingface.co/api')).toBe(true);
    // The lower-case variable is read first, as undici reads it.
    setProxy({ no_proxy: 'a.example', NO_PROXY: 'b.example' });
    expect(reachedDirectly('https://a.example/')).toBe(true);
    expect(reachedDirectly('https://b.example/')).toBe(false);
    setProxy({ NO_PROXY: 'example.com:443' });
    expect(reachedDirectly('https://example.com/')).toBe(true);
    expect(reachedDirectly('http://example.com/')).toBe(false);
  });

  it('a host it names is fetched directly: no proxy to name in a message', () => {
    setProxy({ HTTPS_PROXY: 'http://proxy.example:3128', NO_PROXY: '.corp.example' });
    expect(proxyFetch('https://hub.corp.example/api')).toBeUndefined();
    expect(proxyFetch('https://huggingface.co/api')?.proxy).toBe('http://proxy.example:3128');
  });
});
