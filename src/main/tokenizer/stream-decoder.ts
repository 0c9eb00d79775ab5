import type { DecodeOptions, TextTokenizer } from './text-tokenizer';

/** Turns generated ids into text as they arrive, one call per token. */
export interface StreamDecoder {
  /** Adds one id and returns the text that became stable with it (often ''). */
  push(id: number): string;
  /** Ends the stream: returns whatever was held back and resets the decoder for reuse. */
  flush(): string;
}

const REPLACEMENT = '\uFFFD';

/**
 * Ids the window may hold while the text still ends mid-character. Real text completes a
 * character within a few byte tokens; only a model emitting garbage bytes gets here, and then
 * bounding the per-token cost matters more than holding a replacement character back.
 */
export const MAX_STREAM_WINDOW = 64;

/**
 * Streaming detokenizer using the prefix-offset technique: each push decodes a short window
 * (the ids of the previous stable chunk as context, plus the ids since) and emits what the window
 * adds beyond the text already sent. Decoding with context matters because decoders are not
 * per-token: byte-level BPE and `<0xNN>` byte fallback spread one character over several ids, and
 * Metaspace/Strip/WordLevel decoders put spaces depending on the previous token.
 *
 * Text up to a trailing U+FFFD (an incomplete UTF-8 sequence) is sent at once; the U+FFFD itself
 * is held until the next id completes or invalidates it. Concatenating every push and the flush
 * gives `tok.decode(allIds, opts)`.
 */
export function createStreamDecoder(tok: Pick<TextTokenizer, 'decode'>, opts?: DecodeOptions): StreamDecoder {
  const decodeOpts: DecodeOptions = {
    skipSpecialTokens: opts?.skipSpecialTokens ?? false,
    ...(opts?.keepSpecialIds ? { keepSpecialIds: opts.keepSpecialIds } : {}),
  };
  let window: number[] = [];
  // window[0, contextEnd) is context whose text has been sent in full.
  let contextEnd = 0;
  // Characters of decode(window) already sent.
  let sent = 0;

  // Characters of decode(window[0, contextEnd)).
  let contextText = 0;

  const restartWindowAt = (start: number): void => {
    window = window.slice(start);
    contextEnd = window.length;
    sent = tok.decode(window, decodeOpts).length;
    contextText = sent;
  };

  return {
    push(id) {
      window.push(id);
      const text = tok.decode(window, decodeOpts);
      const incomplete = text.endsWith(REPLACEMENT);
      const stableEnd = incomplete ? text.length - 1 : text.length;
      let out = '';
      if (stableEnd > sent) {
        out = text.slice(sent, stableEnd);
        sent = stableEnd;
      }
      if (!incomplete) {
        // The ids since the last stable point become the next window's context, once they wrote text: an id
        // that decodes to nothing (a skipped special token) would be no context at all, and the next word would
        // lose the space its decoder puts after the word before.
        if (text.length > contextText) restartWindowAt(contextEnd);
        else if (window.length > MAX_STREAM_WINDOW) {
          // Too many ids that wrote nothing (skipped special tokens): drop them but keep the context ids, which
          // did write text. Restarting at them instead left no context, and a Metaspace/Strip decoder then took
          // the next ▁word for the start of the text and dropped its space ("helloworld" after 64 × </s>).
          window = window.slice(0, contextEnd);
          sent = tok.decode(window, decodeOpts).length;
          contextText = sent;
        }
      } else if (window.length > MAX_STREAM_WINDOW) {
        out += text.slice(sent);
        restartWindowAt(window.length - 1);
      }
      return out;
    },
    flush() {
      const out = window.length === 0 ? '' : tok.decode(window, decodeOpts).slice(sent);
      window = [];
      contextEnd = 0;
      sent = 0;
      contextText = 0;
      return out;
    },
  };
}
