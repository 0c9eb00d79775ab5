/**
 * The HTTP API, in the Models view: in the desktop window, a switch for the local server (127.0.0.1, a port,
 * whether it starts with kvdesk), as LM Studio has one; under `kvdesk serve`, where its API already answers.
 */
import { useEffect, useState } from 'react';
import { useShallow } from 'zustand/react/shallow';
import { useApp, useBridge } from '../bridge/context';

/** LM Studio's port, which many tools expect of a local server. */
export const DEFAULT_API_PORT = 1234;

function ApiAddress({ url }: { url: string }) {
  return (
    <span>
      <a className="mono" href={url} target="_blank" rel="noreferrer" data-testid="api-server-url">
        {url}
      </a>{' '}
      <span className="muted">
        (OpenAI and Anthropic SDKs: <span className="mono">{url}/v1</span>; Ollama clients:{' '}
        <span className="mono">{url}</span>)
      </span>
    </span>
  );
}

export function ApiServerPanel() {
  const bridge = useBridge();
  const { status, saved } = useApp(useShallow((s) => ({ status: s.apiServer, saved: s.ui.apiServer })));
  const [port, setPort] = useState(String(saved?.port ?? DEFAULT_API_PORT));
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
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
          <h3>API</h3>
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
  const start = () => {
    const n = Number(port);
    if (port.trim() === '' || !Number.isInteger(n) || n < 0 || n > 65_535) {
      setError('The port is a whole number from 0 (any free port) to 65535.');
      return;
    }
    void act(() => bridge.startApiServer(n, autostart));
  };
  return (
    <div className="card api-server" data-testid="api-server" data-running={status.running}>
      <div className="top">
        <h3>API server</h3>
        <span className={`badge ${status.running ? 'ok' : ''}`} data-testid="api-server-state">
          {status.running ? 'on' : 'off'}
        </span>
      </div>
      {status.running && status.url ? (
        <div>
          Serving the OpenAI-, Anthropic- and Ollama-compatible APIs for this window's models at{' '}
          <ApiAddress url={status.url} />. Requests share the KV budget with your chats.
        </div>
      ) : (
        <div className="muted">
          Serve the OpenAI-, Anthropic- and Ollama-compatible APIs on this computer (127.0.0.1), for editors, scripts
          and other apps, with the models loaded here.
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
            onChange={(e) => {
              // The port it was started on (as asked: 0 stays "any"), else the one in the field.
              const field = port.trim() !== '' && Number.isInteger(Number(port)) ? Number(port) : DEFAULT_API_PORT;
              bridge.setApiServerAutostart(
                e.target.checked,
                saved?.port ?? (status.running ? status.port : field) ?? field,
              );
            }}
          />{' '}
          start with kvdesk
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
      {error && (
        <div className="refusal failed" role="alert" data-testid="api-server-error">
          {error}
        </div>
      )}
    </div>
  );
}
