import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createStopMatcher } from '../../../src/main/tokenizer';
import { KvdeskError } from '../../../src/shared/errors';
import { chunked } from '../../helpers/chunked';

/** Feeds chunks and returns what was shown, whether it stopped, and which stop matched. */
function run(stops: string[], chunks: string[]): { shown: string; stopped: boolean; stop?: string; pushes: string[] } {
  const m = createStopMatcher(stops);
  const pushes: string[] = [];
  let stopped = false;
  let stop: string | undefined;
  for (const chunk of chunks) {
    const r = m.push(chunk);
    pushes.push(r.emit);
    if (r.stopped && !stopped) stop = r.stop;
    stopped ||= r.stopped;
  }
  const tail = m.flush();
  pushes.push(tail);
  return { shown: pushes.join(''), stopped, ...(stop === undefined ? {} : { stop }), pushes };
}

describe('createStopMatcher', () => {
  it('passes text through untouched when nothing can match', () => {
    expect(run(['</s>'], ['hello', ' world']).pushes).toEqual(['hello', ' world', '']);
    expect(run([], ['a', 'b']).pushes).toEqual(['a', 'b', '']);
  });

  it('holds back a tail that could start a stop string and releases it when it cannot', () => {
    expect(run(['###'], ['ab#', 'c']).pushes).toEqual(['ab', '#c', '']);
    expect(run(['###'], ['ab##', '#x']).pushes).toEqual(['ab', '', '']);
  });

  it('matches a stop string split across pushes and emits the text before it, never the stop', () => {
    const r = run(['</s>'], ['hello <', '/', 's> world']);
    expect(r.pushes).toEqual(['hello ', '', '', '']);
    expect(r).toMatchObject({ shown: 'hello ', stopped: true, stop: '</s>' });
  });

  it('stops at a match at the very start and ignores later text', () => {
    const m = createStopMatcher(['STOP']);
    expect(m.push('STOPafter')).toEqual({ emit: '', stopped: true, stop: 'STOP' });
    expect(m.push('more')).toEqual({ emit: '', stopped: true });
    expect(m.flush()).toBe('');
  });

  it('finds the stop after a false start that overlaps it ("aab" in "aaab")', () => {
    expect(run(['aab'], ['a', 'a', 'a', 'b', 'c'])).toMatchObject({ shown: 'a', stopped: true });
    expect(run(['aab'], ['aaab'])).toMatchObject({ shown: 'a', stopped: true });
  });

  it('picks the stop that completes first when stops overlap, however the text is chunked', () => {
    // "bc" completes at offset 3, before "abcd" would; both chunkings must agree.
    expect(run(['abcd', 'bc'], ['abcd'])).toMatchObject({ shown: 'a', stop: 'bc' });
    expect(run(['abcd', 'bc'], ['a', 'b', 'c', 'd'])).toMatchObject({ shown: 'a', stop: 'bc' });
    // Same end: the longer (earlier-starting) one wins.
    expect(run(['c', 'abc'], ['xabc'])).toMatchObject({ shown: 'x', stop: 'abc' });
  });

  it('keeps multi-character stops like <|im_end|> intact in the shown text', () => {
    const r = run(['<|im_end|>', '<|endoftext|>'], ['The answer', ' is 4.<', '|im', '_end', '|>\n<|im_start|>']);
    expect(r).toMatchObject({ shown: 'The answer is 4.', stopped: true, stop: '<|im_end|>' });
  });

  it('flush releases the held tail when the stream ends without a stop', () => {
    const m = createStopMatcher(['<|im_end|>']);
    expect(m.push('foo <|im')).toEqual({ emit: 'foo ', stopped: false });
    expect(m.flush()).toBe('<|im');
    expect(m.flush()).toBe('');
  });

  it('refuses an empty stop string', () => {
    expect(() => createStopMatcher(['ok', ''])).toThrow(KvdeskError);
    try {
      createStopMatcher(['ok', '']);
    } catch (err) {
      expect((err as KvdeskError).code).toBe('BAD_REQUEST');
      expect((err as KvdeskError).detail).toEqual({ index: 1 });
    }
  });

  it('property: chunking never changes the result, and the result is the text cut before the first completed stop', () => {
    const alphabet = fc.constantFrom('a', 'b', 'c', '<', '/');
    const text = fc.array(alphabet, { maxLength: 30 }).map((cs) => cs.join(''));
    const stops = fc.array(
      fc.array(alphabet, { minLength: 1, maxLength: 4 }).map((cs) => cs.join('')),
      { maxLength: 3 },
    );
    fc.assert(
      fc.property(text, stops, fc.array(fc.nat(30)), (t, ss, cuts) => {
        const chunks = chunked(t, cuts);
        // Reference: the earliest end position at which any stop is complete.
        let expected = t;
        let stopped = false;
        for (let end = 1; end <= t.length && !stopped; end++) {
          const hits = ss.filter((s) => t.slice(0, end).endsWith(s));
          if (hits.length > 0) {
            const longest = Math.max(...hits.map((s) => s.length));
            expected = t.slice(0, end - longest);
            stopped = true;
          }
        }
        const r = run(ss, chunks);
        expect(r.shown).toBe(expected);
        expect(r.stopped).toBe(stopped);
        // Held text is bounded by the longest stop string.
        const longestStop = Math.max(0, ...ss.map((s) => s.length));
        if (!stopped) expect(r.pushes.at(-1)?.length ?? 0).toBeLessThan(Math.max(1, longestStop));
      }),
      { numRuns: 500 },
    );
  });
});
