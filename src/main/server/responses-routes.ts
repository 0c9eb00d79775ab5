/**
 * POST /v1/responses over HostApi.generate. As with chat completions, the status is sent only once the request
 * is admitted, so every refusal is a plain HTTP error and a 200 means the KV is reserved. A stream is OpenAI's
 * semantic events: response.created and .in_progress, then for each output item (a message, a function call)
 * its added / delta / done events in order, then response.completed (or .incomplete when the reply ran out of
 * room) carrying the whole response.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HostApi } from '../host/host-api';
import { withoutFolders } from './hide-paths';
import {
  errorFromInfo,
  HttpError,
  type ParamHint,
  SSE_HEADERS,
  sendHttpError,
  sendJson,
  sendsSystem,
  writeEvents,
} from './http-util';
import { runGeneration } from './openai-routes';
import {
  incomplete,
  type MappedResponseRequest,
  mapResponsesRequest,
  outputItems,
  ResponseEvents,
  type ResponseHead,
  responseBody,
  responseId,
  type StreamEvent,
} from './responses-adapter';

/** Runs one Responses request to its end. Resolves when the response is complete or the client is gone. */
export function serveResponse(
  hostApi: HostApi,
  body: unknown,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let mapped: MappedResponseRequest;
  try {
    mapped = mapResponsesRequest(body);
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    sendHttpError(res, err);
    return Promise.resolve();
  }
  const { echo } = mapped;
  const createdAt = Math.floor(Date.now() / 1000);

  let head: ResponseHead | null = null;
  let events: ResponseEvents | null = null;
  const send = (list: StreamEvent[]) => writeEvents(res, list);
  const paramHint: ParamHint = {
    prompt: 'input',
    api: 'responses',
    origins: mapped.origins,
    ...(mapped.request.contextOverflow === 'drop-oldest'
      ? { truncation: { tools: (mapped.request.tools?.length ?? 0) > 0, system: sendsSystem(mapped.request) } }
      : {}),
  };
  return runGeneration(
    hostApi,
    mapped.request,
    req,
    res,
    (frame, finish) => {
      switch (frame.type) {
        case 'accepted':
        case 'prefill':
          return;
        case 'admitted': {
          head = { id: responseId(frame.requestId), created_at: createdAt, model: mapped.model };
          if (!mapped.stream) return;
          res.writeHead(200, SSE_HEADERS);
          events = new ResponseEvents(head, echo);
          send(events.start());
          return;
        }
        case 'tokens': {
          const row = frame.rows[0];
          if (events && row)
            send(events.tokens(row.text, row.toolCalls ?? [], row.toolCallDeltas ?? [], row.reasoning));
          return;
        }
        case 'done': {
          const result = frame.result;
          const h = head ?? { id: responseId(result.requestId), created_at: createdAt, model: mapped.model };
          const status = incomplete(result) ? 'incomplete' : 'completed';
          finish();
          if (!events) {
            sendJson(res, 200, responseBody(h, echo, status, outputItems(h, result), result));
            return;
          }
          send(events.done(result));
          res.end();
          return;
        }
        case 'error': {
          finish();
          const err = errorFromInfo(frame.error, paramHint);
          if (!res.headersSent) {
            sendHttpError(res, err);
            return;
          }
          const e = withoutFolders(res, err.body.error) as { code?: string; message?: string; param?: string | null };
          if (events) send(events.failed(e.code ?? 'server_error', e.message ?? '', e.param ?? null));
          res.end();
          return;
        }
      }
    },
    sendHttpError,
    paramHint,
  );
}
