export {
  type AppliedChat,
  type ApplyChatOptions,
  applyChat,
  type ChatMessage,
  DEFAULT_CHAT_TEMPLATE,
  encodeChat,
  type RenderChatOptions,
  renderChat,
  renderChatTemplate,
} from './chat-template';
export { createHarmonySplitter } from './harmony-splitter';
export {
  type AnswerPart,
  createReasoningSplitter,
  promptOpensReasoning,
  type ReasoningSplitter,
  type ReasoningState,
} from './reasoning-splitter';
export { createStopMatcher, type StopMatcher, type StopPush } from './stop-matcher';
export { createStreamDecoder, MAX_STREAM_WINDOW, type StreamDecoder } from './stream-decoder';
export {
  createTextTokenizer,
  type DecodeOptions,
  type EncodeOptions,
  loadTokenizer,
  type SpecialToken,
  type SpecialTokens,
  type TextTokenizer,
  type TextTokenizerInput,
} from './text-tokenizer';
