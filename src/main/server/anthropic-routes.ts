/**
 * POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API) over HostApi. As with OpenAI's
 * endpoints the status is sent only once the request is admitted, so a refusal is a plain HTTP error (in
 * Anthropic's error shape) and a 200 means the KV is reserved. A stream is Anthropic's events: message_start,
 * the content blocks' start / delta / stop, message_delta with the stop reason, message_stop.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { toErrorInfo } from '../../shared/errors';
import type { HostApi } from '../host/host-api';
import {
  anthropicError,
  type MappedMessagesRequest,
  type MessageEvent,
  MessageEvents,
  mapMessagesRequest,
  messageBody,
  messageId,
} from './anthropic-adapter';
import { withoutFolders } from './hide-paths';
import {
  errorFromInfo,
  HttpError,
  jsonText,
  type MessageOrigin,
  SSE_HEADERS,
  sendJson,
  sendJsonText,
  writeEvents,
} from './http-util';
import { apiModelName } from './model-names';
import { runGeneration } from './openai-routes';

const PARAM_HINT = { prompt: 'messages', api: 'anthropic' as const };

/** Answers an error in Anthropic's shape (or closes a stream that has begun). */
export function sendAnthropicError(res: ServerResponse, err: HttpError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { status, body, headers } = anthropicError(err);
  sendJson(res, status, withoutFolders(res, body), headers);
}

/** POST /v1/messages/count_tokens: the prompt's tokens, rendered as a request with the same fields would be. */
export async function serveCountTokens(hostApi: HostApi, body: unknown, res: ServerResponse): Promise<void> {
  let origins: MessageOrigin[] | undefined;
  try {
    const mapped = mapMessagesRequest(body, { countOnly: true });
    origins = mapped.origins;
    // Counting needs the model's tokenizer: a library package is loaded as a message to it would load it.
    const request = { ...mapped.request, model: await apiModelName(hostApi, mapped.request.model) };
    await hostApi.ensureModel(request.model);
    sendJson(res, 200, { input_tokens: (await hostApi.runner.measurePromptOffThread(request)).promptTokens });
  } catch (err) {
    sendAnthropicError(
      res,
      err instanceof HttpError
        ? err
        : errorFromInfo(toErrorInfo(err), { ...PARAM_HINT, ...(origins ? { origins } : {}) }),
    );
  }
}

/** Runs one Messages request to its end. Resolves when the response is complete or the client is gone. */
export function serveMessages(
  hostApi: HostApi,
  body: unknown,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let mapped: MappedMessagesRequest;
  try {
    mapped = mapMessagesRequest(body);
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    sendAnthropicError(res, err);
    return Promise.resolve();
  }
  let events: MessageEvents | null = null;
  let promptTokens = 0;
  const send = (list: MessageEvent[]) => writeEvents(res, list);
  return runGeneration(
    hostApi,
    mapped.request,
    req,
    res,
    (frame, finish) => {
      switch (frame.type) {
        case 'accepted':
          promptTokens = frame.promptTokens;
          return;
        case 'prefill':
          return;
        case 'admitted':
          if (!mapped.stream) return;
          res.writeHead(200, SSE_HEADERS);
          events = new MessageEvents(messageId(frame.requestId), mapped.model);
          return;
        case 'started':
          // message_start carries the final input and cache-read counts: the reused tokens are known only now.
          if (events) send(events.start(promptTokens, frame.reusedTokens));
          return;
        case 'tokens': {
          const row = frame.rows[0];
          // message_start first, should tokens come without a started frame before them.
          if (events && row)
            send([
              ...events.start(promptTokens, 0),
              ...events.tokens(
                row.text,
                row.toolCalls ?? [],
                row.toolCallDeltas ?? [],
                mapped.showThinking ? row.reasoning : undefined,
              ),
            ]);
          return;
        }
        case 'done':
          finish();
          if (!events) {
            sendJsonText(res, 200, jsonText(messageBody(mapped.model, frame.result, mapped.showThinking)));
            return;
          }
          send([...events.start(frame.result.promptTokens, frame.result.reusedTokens), ...events.done(frame.result)]);
          res.end();
          return;
        case 'error': {
          finish();
          const err = errorFromInfo(frame.error, { ...PARAM_HINT, origins: mapped.origins });
          if (!res.headersSent) {
            sendAnthropicError(res, err);
            return;
          }
          send([{ type: 'error', error: withoutFolders(res, anthropicError(err).body.error) }]);
          res.end();
          return;
        }
      }
    },
    sendAnthropicError,
    { ...PARAM_HINT, origins: mapped.origins },
  );
}
