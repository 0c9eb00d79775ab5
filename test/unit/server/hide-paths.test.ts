/**
 * hideFolders (src/main/server/hide-paths.ts): what a page of another origin is answered names no folder of this
 * computer, each replaced where it is a whole path, in plain text and in JSON (Windows' backslashes doubled); what the
 * request sent, quoted, goes as it was sent, so the page cannot test its guesses of the folders by the answer.
 */
import { describe, expect, it } from 'vitest';
import { hideFolders } from '../../../src/main/server/hide-paths';

const folders = [
  { at: '/home/ann/models/qwen', as: '<folder of model qwen>' },
  { at: '/home/ann/.kvdesk', as: '<data folder>' },
  { at: '/home/ann', as: '~' },
  { at: 'C:\\Users\\ann\\kvd', as: '<data folder>' },
];

describe('hideFolders', () => {
  it('replaces each folder where it is a whole path, the longest first', () => {
    expect(hideFolders('/home/ann/models/qwen is not a package', folders)).toBe(
      '<folder of model qwen> is not a package',
    );
    expect(hideFolders('read /home/ann/.kvdesk/threads/t1.json', folders)).toBe('read <data folder>/threads/t1.json');
    expect(hideFolders('(/home/ann/x)', folders)).toBe('(~/x)');
    // A longer name that starts the same is another folder.
    expect(hideFolders('/home/anna/x and /home/ann.old', folders)).toBe('/home/anna/x and /home/ann.old');
    // In any script: a letter or digit past the ASCII ones continues the name too.
    expect(hideFolders('/home/annö/x /home/ann٣/y /home/annа/z', folders)).toBe(
      '/home/annö/x /home/ann٣/y /home/annа/z',
    );
    expect(hideFolders('ö/home/ann/x', folders)).toBe('ö/home/ann/x');
    expect(hideFolders('«/home/ann/x»', folders)).toBe('«~/x»');
  });

  it('in JSON too, the stand-in written as JSON writes it', () => {
    const json = JSON.stringify({ root: '/home/ann/models/qwen', win: 'C:\\Users\\ann\\kvd\\threads' });
    const hidden = hideFolders(json, folders);
    expect(JSON.parse(hidden)).toEqual({ root: '<folder of model qwen>', win: '<data folder>\\threads' });
  });

  it('leaves what the request sent as it was sent where the message quotes it: no oracle of the folders', () => {
    // A guess of the home folder, and one that is no folder: quoted back alike, neither rewritten.
    for (const guess of ['/home/ann/x', '/home/bob/x', '/home/ann']) {
      const said = `model "${guess}" is neither loaded nor in the library (known: qwen)`;
      expect(hideFolders(said, folders, ['hi', guess])).toBe(said);
      expect(hideFolders(`got ${JSON.stringify(guess)}.`, folders, [guess])).toBe(`got ${JSON.stringify(guess)}.`);
    }
    // Quoted as JSON writes it (Windows' backslashes doubled) or composed (an id is NFC) too.
    const win = 'C:\\Users\\ann\\kvd\\x';
    expect(hideFolders(`role ${JSON.stringify(win)}`, folders, [win])).toBe(`role ${JSON.stringify(win)}`);
    const decomposed = '/home/ann/mo\u0308del';
    const composed = `model "${decomposed.normalize('NFC')}" not found`;
    expect(hideFolders(composed, folders, [decomposed])).toBe(composed);
    // kvdesk's own folders in the same message are hidden, even where the request sent that text too (a guess that
    // matches gets the stand-in, as a wrong one would): kvdesk never quotes a folder it names itself.
    const own = 'model "/home/ann/x" is in the library, but cannot load: /home/ann/models/qwen/config.json is missing';
    const sent = ['/home/ann/x', '/home/ann/models/qwen/config.json', '/home/ann/models/qwen'];
    expect(hideFolders(own, folders, sent)).toBe(
      'model "/home/ann/x" is in the library, but cannot load: <folder of model qwen>/config.json is missing',
    );
    // A detail that is the folder alone (no quotes of its own) is kvdesk's.
    expect(hideFolders('/home/ann/models/qwen', folders, sent)).toBe('<folder of model qwen>');
    // Quotes are read in pairs: text sent to span kvdesk's own words from one of its quotes to the next is no quote.
    const load = 'model "qwen" cannot load: /home/ann/models/qwen/config.json: "vocab_size" is missing';
    const spans = [
      'qwen',
      ' cannot load: /home/ann/models/qwen/config.json: ',
      'qwen" cannot load: /home/ann/models/qwen/config.json: ',
    ];
    expect(hideFolders(load, folders, spans)).toBe(
      'model "qwen" cannot load: <folder of model qwen>/config.json: "vocab_size" is missing',
    );
    // A sent text with a double quote in it is kept where JSON writes it (`\"`), and what follows is read on.
    const quoted = `role ${JSON.stringify('a"/home/ann/x')} and ${JSON.stringify('/home/ann/y')} in /home/ann/z`;
    expect(hideFolders(quoted, folders, ['a"/home/ann/x', '/home/ann/y'])).toBe(
      `role ${JSON.stringify('a"/home/ann/x')} and ${JSON.stringify('/home/ann/y')} in ~/z`,
    );
  });
});
