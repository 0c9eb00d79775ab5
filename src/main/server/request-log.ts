/**
 * `kvdesk serve --log-requests`: one line per HTTP request once it is answered (or its client went away), as
 * Ollama's server log has them — when, from where, what, how it ended, how long it took, and its ids: kvdesk's
 * (`request-id`, the id its reply and the inspector show) and the client's own `x-request-id`, so a client's log and
 * kvdesk's can be matched. The query is left out (a browser's `?token=` is in it); nothing of a body is written.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { clientRequestId } from './http-util';

/** At most this many characters of a path are written (a request line may be up to 16 KiB). */
const MAX_PATH_CHARS = 200;

/**
 * The log line of `req`, answered by `res`, `ms` after it came from `from` (its client's address, read as it came: a
 * socket closed by then has none). A response cut before its end (the client closed the connection, a stream
 * stopped) says so after its status, which is `-` where none was sent.
 */
export function requestLogLine(
  req: IncomingMessage,
  res: ServerResponse,
  ms: number,
  from = '-',
  at = new Date(),
): string {
  const raw = req.url ?? '/';
  const query = raw.indexOf('?');
  let where = query >= 0 ? raw.slice(0, query) : raw;
  if (where.length > MAX_PATH_CHARS) where = `${where.slice(0, MAX_PATH_CHARS)}…`;
  // Written as sent, each character outside printable ASCII escaped: a line of the log is one request.
  where = where.replace(/[^\x21-\x7e]/g, (c) => encodeURIComponent(c));
  const ended = res.writableFinished ? '' : ' (cut: the client went away before the end)';
  const status = res.headersSent ? String(res.statusCode) : '-';
  const id = res.getHeader('request-id');
  const own = clientRequestId(req);
  return [
    `kvdesk: ${at.toISOString()}`,
    from,
    `${req.method ?? '-'} ${where}`,
    `${status}${ended}`,
    `${Math.round(ms)} ms`,
    ...(typeof id === 'string' ? [`id=${id}`] : []),
    ...(own !== undefined ? [`x-request-id=${JSON.stringify(own)}`] : []),
  ].join(' ');
}
