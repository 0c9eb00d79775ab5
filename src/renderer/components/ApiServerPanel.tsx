/**
 * The HTTP API, in the Models view: in the desktop window, a switch for the local server (a port, whether it
 * starts with kvdesk, this computer only or the local network, the API key), as LM Studio has one; under
 * `kvdesk serve`, where its API already answers.
 */
import { useEffect, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import type { ApiServerSettings } from '../../shared/api';
import { useApp, useBridge } from '../bridge/context';
import { CopyButton } from './Markdown';

/** LM Studio's port, which many tools expect of a local server. */
export const DEFAULT_API_PORT = 1234;

function ApiAddress({ url, href = url }: { url: string; href?: string }) {
  return (
    <span>
      <a className="mono" href={href} target="_blank" rel="noreferrer" data-testid="api-server-url">
        {url}
      </a>{' '}
      <span className="muted">
        (OpenAI and Anthropic SDKs: <span className="mono">{url}/v1</span>{' '}
        <CopyButton text={`${url}/v1`} what="the OpenAI and Anthropic address" testId="api-copy-v1" />; Ollama clients:{' '}
        <span className="mono">{url}</span> <CopyButton text={url} what="the Ollama address" testId="api-copy-base" />)
      </span>
    </span>
  );
}

/** The window's API key: hidden until asked, copied with a click, replaced on demand. */
function ApiKey({ apiKey, busy, renew }: { apiKey: string; busy: boolean; renew: () => void }) {
  const [shown, setShown] = useState(false);
  return (
    <div className="row api-key" data-testid="api-key">
      API key{' '}
      <span className="mono" data-testid="api-key-value">
        {shown ? apiKey : `${apiKey.slice(0, 4)}${'•'.repeat(12)}`}
      </span>
      <button type="button" className="small" data-testid="api-key-show" onClick={() => setShown(!shown)}>
        {shown ? 'Hide' : 'Show'}
      </button>
      {/* Not copied: the key shown, to select. */}
      <CopyButton
        text={apiKey}
        what="the API key"
        label="Copy"
        testId="api-key-copy"
        onCopy={(done) => {
          if (!done) setShown(true);
        }}
      />
      <button
        type="button"
        className="small"
        disabled={busy}
        data-testid="api-key-new"
        title="Make a new key: clients with the old one are refused"
        onClick={renew}
      >
        New key
      </button>
      <span className="muted">
        clients send <span className="mono">Authorization: Bearer</span> and the key (the SDKs' api_key). Whoever has it
        can use your models, read your chats and run the chats' MCP tools: give it only to your own devices.
      </span>
    </div>
  );
}

export function ApiServerPanel() {
  const bridge = useBridge();
  const { status, saved } = useApp(useShallow((s) => ({ status: s.apiServer, saved: s.ui.apiServer })));
  const [port, setPort] = useState(String(saved?.port ?? DEFAULT_API_PORT));
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [pending, setPending] = useState<Partial<ApiServerSettings> | null>(null);
  // The saved port arrives with the settings (and changes when the server starts elsewhere): the field follows it.
  useEffect(() => {
    if (saved?.port !== undefined) setPort(String(saved.port));
  }, [saved?.port]);
  const autostart = saved?.autostart ?? false;
  if (!status || status.controlledBy === 'none') return null;

  if (status.controlledBy === 'serve') {
    // The address this page came from (serve may listen on every interface; its own URL says loopback).
    const url = typeof location !== 'undefined' && location.origin.startsWith('http') ? location.origin : status.url;
    return (
      <div className="card api-server" data-testid="api-server" data-running={status.running}>
        <div className="top">
          <h2>API</h2>
          <span className="badge ok">kvdesk serve</span>
        </div>
        {url && (
          <div>
            The OpenAI-, Anthropic- and Ollama-compatible APIs answer at <ApiAddress url={url} />
            {status.tokenRequired ? ', with the token' : ''}, for as long as <span className="mono">kvdesk serve</span>{' '}
            runs.
          </div>
        )}
      </div>
    );
  }

  const act = async (fn: () => Promise<string | null>) => {
    setBusy(true);
    setError(await fn());
    setBusy(false);
  };
  // A change the running server is taking: shown at once, the saved one again if it fails.
  const lan = pending?.lan ?? saved?.lan ?? false;
  const requireKey = lan || (pending?.requireKey ?? saved?.requireKey ?? false);
  const cors = pending?.cors ?? saved?.cors ?? false;
  /** The port field as a number, or null (and why) when it is not one. */
  const portNumber = (): number | null => {
    const n = Number(port);
    if (port.trim() === '' || !Number.isInteger(n) || n < 0 || n > 65_535) {
      setError('The port is a whole number from 0 (any free port) to 65535.');
      return null;
    }
    return n;
  };
  const start = (change: Partial<ApiServerSettings> = {}) => {
    const n = portNumber();
    if (n === null) return;
    void act(() => bridge.startApiServer({ port: n, autostart, lan, requireKey, cors, ...change }));
  };
  /** A setting changed: a running server takes it at once (on its port); a stopped one keeps it for its start. */
  const change = (next: Partial<ApiServerSettings>) => {
    if (status.running) {
      setPending(next);
      const settings = {
        port: saved?.port ?? status.port ?? DEFAULT_API_PORT,
        autostart,
        lan,
        requireKey,
        cors,
        ...next,
      };
      void act(() => bridge.startApiServer(settings)).finally(() => setPending(null));
      return;
    }
    bridge.saveApiServer({ port: portToSave(), autostart, lan, requireKey, cors, ...next });
  };
  /** The port to remember: the one it was started on (as asked: 0 stays "any"), else the running one, else the field's. */
  const portToSave = (): number => {
    const field = port.trim() !== '' && Number.isInteger(Number(port)) ? Number(port) : DEFAULT_API_PORT;
    return saved?.port ?? (status.running ? status.port : undefined) ?? field;
  };
  const keyedHref = (url: string) => (status.key ? `${url}/?token=${encodeURIComponent(status.key)}` : url);
  return (
    <div className="card api-server" data-testid="api-server" data-running={status.running}>
      <div className="top">
        <h2>API server</h2>
        <span className={`badge ${status.running ? 'ok' : ''}`} data-testid="api-server-state">
          {status.running ? 'on' : 'off'}
        </span>
      </div>
      {status.running && status.url ? (
        <div>
          Serving the OpenAI-, Anthropic- and Ollama-compatible APIs for this window's models at{' '}
          <ApiAddress url={status.url} href={keyedHref(status.url)} />
          {status.tokenRequired ? ', with the API key' : ''}. Requests share the KV budget with your chats.
          {status.cors && (
            <div data-testid="api-server-cors" className={status.tokenRequired ? '' : 'note'}>
              Web pages of any site may call its model APIs from a browser
              {status.tokenRequired
                ? ', with the API key.'
                : ': without the key, that is any site you open — require the key unless you mean it.'}
            </div>
          )}
          {status.lan && (
            <div data-testid="api-server-lan">
              On the local network:{' '}
              {(status.lanUrls ?? []).length > 0 ? (
                (status.lanUrls ?? []).map((u) => (
                  <a key={u} className="mono lan-url" href={keyedHref(u)} target="_blank" rel="noreferrer">
                    {u}
                  </a>
                ))
              ) : (
                <span className="muted">this computer has no network address yet</span>
              )}{' '}
              <span className="muted">(other devices; a firewall may need to let the port in)</span>
            </div>
          )}
        </div>
      ) : (
        <div className="muted">
          Serve the OpenAI-, Anthropic- and Ollama-compatible APIs on this computer (127.0.0.1), or to the other devices
          of your network, for editors, scripts and other apps, with the models loaded here.
        </div>
      )}
      <div className="row api-controls">
        <label>
          port{' '}
          <input
            type="number"
            min={0}
            max={65535}
            data-testid="api-server-port"
            value={port}
            disabled={busy}
            onChange={(e) => setPort(e.target.value)}
          />
        </label>
        <label title="Start the server whenever kvdesk starts">
          <input
            type="checkbox"
            data-testid="api-server-autostart"
            checked={autostart}
            disabled={busy}
            onChange={(e) =>
              bridge.saveApiServer({ port: portToSave(), autostart: e.target.checked, lan, requireKey, cors })
            }
          />{' '}
          start with kvdesk
        </label>
        <label title="Listen on every address of this computer, so phones and other computers of the network can use it">
          <input
            type="checkbox"
            data-testid="api-server-lan-toggle"
            checked={lan}
            disabled={busy}
            onChange={(e) => change({ lan: e.target.checked })}
          />{' '}
          on the local network
        </label>
        <label
          title={
            lan
              ? 'On the network the key is always needed: anyone there could otherwise use your models and read your chats'
              : 'Every request must carry the API key'
          }
        >
          <input
            type="checkbox"
            data-testid="api-server-key-toggle"
            checked={requireKey}
            disabled={busy || lan}
            onChange={(e) => change({ requireKey: e.target.checked })}
          />{' '}
          require the API key
        </label>
        <label
          title={
            requireKey
              ? "Chat apps that run in a web page (of any site) may call the model APIs from the browser, with the API key (CORS). Never this window's chats, tools or settings."
              : "Chat apps that run in a web page (of any site) may call the model APIs from the browser (CORS). Without the key, that is any site you open: require the key too. Never this window's chats, tools or settings."
          }
        >
          <input
            type="checkbox"
            data-testid="api-server-cors-toggle"
            checked={cors}
            disabled={busy}
            onChange={(e) => change({ cors: e.target.checked })}
          />{' '}
          web pages may call it (CORS)
        </label>
        {status.running ? (
          <>
            {Number(port) !== status.port && Number(port) !== 0 && (
              <button type="button" disabled={busy} data-testid="api-server-move" onClick={() => start()}>
                Move to {port}
              </button>
            )}
            <button
              type="button"
              disabled={busy}
              data-testid="api-server-stop"
              onClick={() => void act(bridge.stopApiServer)}
            >
              Stop
            </button>
          </>
        ) : (
          <button
            type="button"
            className="primary"
            disabled={busy}
            data-testid="api-server-start"
            onClick={() => start()}
          >
            Start
          </button>
        )}
      </div>
      {status.running && status.key && (
        <ApiKey apiKey={status.key} busy={busy} renew={() => void act(bridge.newApiKey)} />
      )}
      {error && (
        <div className="refusal failed" role="alert" data-testid="api-server-error">
          {error}
        </div>
      )}
    </div>
  );
}
