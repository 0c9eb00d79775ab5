/** A port serve cannot listen on: the advice names the flags as the command that started serve takes them. */
import { describe, expect, it } from 'vitest';
import { listenAdvice } from '../../../src/cli/serve';

describe('listenAdvice', () => {
  it('through npm, the flags after `--`; through npx or kvdesk itself, as they are', () => {
    expect(listenAdvice({ npm_lifecycle_event: 'serve', npm_command: 'run-script' })).toBe(
      'Choose another port or host: `npm run serve -- --port N` (or `npm run serve -- --host H`).',
    );
    expect(listenAdvice({ npm_lifecycle_event: 'start', npm_command: 'start' })).toBe(
      'Choose another port or host: `npm start -- --port N` (or `npm start -- --host H`).',
    );
    expect(listenAdvice({ npm_lifecycle_event: 'npx', npm_command: 'exec' })).toBe('Choose another --port or --host.');
    // npm test runs tests, whose servers are not the person's to start again.
    expect(listenAdvice({ npm_lifecycle_event: 'test', npm_command: 'test' })).toBe('Choose another --port or --host.');
    expect(listenAdvice({})).toBe('Choose another --port or --host.');
  });
});
