/**
 * Math delimiters in model replies (src/renderer/lib/math.ts): LaTeX's \[…\] and \(…\), and $…$ where it reads as
 * math, become the $$ form the chat's Markdown typesets; money, code and unclosed delimiters stay as written.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { normalizeMath } from '../../../src/renderer/lib/math';

describe('normalizeMath', () => {
  it('turns \\[…\\] into a $$ block on its own lines, over several lines too', () => {
    expect(normalizeMath('So \\[ x^2 + 1 \\] holds.')).toBe('So \n$$\nx^2 + 1\n$$\n holds.');
    expect(normalizeMath('\\[\n\\frac{a}{b}\n\\]')).toBe('\n$$\n\\frac{a}{b}\n$$\n');
  });

  it('turns \\(…\\) into inline $$…$$, not across a blank line', () => {
    expect(normalizeMath('where \\( a \\) and \\(b_1\\) are')).toBe('where $$a$$ and $$b_1$$ are');
    expect(normalizeMath('\\( a\n\nb \\)')).toBe('\\( a\n\nb \\)');
  });

  it("takes $…$ as math by pandoc's rule, and leaves money and lone dollars alone", () => {
    expect(normalizeMath('the area $\\pi r^2$ of it')).toBe('the area $$\\pi r^2$$ of it');
    expect(normalizeMath('$x$')).toBe('$$x$$');
    expect(normalizeMath('it costs $5 and $10')).toBe('it costs $5 and $10');
    expect(normalizeMath('from $5,$6 on')).toBe('from $5,$6 on');
    expect(normalizeMath('$ x $ is spaced')).toBe('$ x $ is spaced');
    expect(normalizeMath('an escaped \\$x$ stays')).toBe('an escaped \\$x$ stays');
    // $$ already there is kept as it is.
    expect(normalizeMath('$$E = mc^2$$ and $$\na\n$$')).toBe('$$E = mc^2$$ and $$\na\n$$');
  });

  it("leaves a shell's variables in a path as written, and a long stretch between two dollars, and still reads math", () => {
    expect(normalizeMath('set PATH=$HOME/bin:$PATH first')).toBe('set PATH=$HOME/bin:$PATH first');
    expect(normalizeMath('export PATH="$JAVA_HOME/bin:$PATH"')).toBe('export PATH="$JAVA_HOME/bin:$PATH"');
    const long = `costs $${'x'.repeat(400)}$ here`;
    expect(normalizeMath(long)).toBe(long);
    // Capitals in math are still math (a segment, a matrix), and so is an identifier in the body.
    expect(normalizeMath('the segment $AB = CD$ here')).toBe('the segment $$AB = CD$$ here');
    // Ratios and quotients of capitals too (a slash or a colon before another capital).
    expect(normalizeMath('so $AB/BC = 2$ and $AC:CB = 2:1$')).toBe('so $$AB/BC = 2$$ and $$AC:CB = 2:1$$');
    expect(normalizeMath('the group $GL_2/SL_2$ here')).toBe('the group $$GL_2/SL_2$$ here');
    expect(normalizeMath('with $A^T$ and $x_{HOME}$')).toBe('with $$A^T$$ and $$x_{HOME}$$');
    expect(normalizeMath(`a body of 300: $${'y'.repeat(300)}$`)).toBe(`a body of 300: $$${'y'.repeat(300)}$$`);
  });

  it('keeps display math in the list item or quote it was written in', () => {
    expect(normalizeMath('1. Solve: \\[ x^2 = 1 \\] then\n2. Next')).toBe(
      '1. Solve: \n   $$\n   x^2 = 1\n   $$\n    then\n2. Next',
    );
    expect(normalizeMath('1. Compute:\n   \\[\n   f(x)\n   \\]\n2. Next')).toBe(
      '1. Compute:\n   \n   $$\n   f(x)\n   $$\n   \n2. Next',
    );
    expect(normalizeMath('- a\n  - b \\[ y \\]')).toBe('- a\n  - b \n    $$\n    y\n    $$\n    ');
    expect(normalizeMath('> Quote \\[ x \\] end')).toBe('> Quote \n> $$\n> x\n> $$\n>  end');
  });

  it("reads LaTeX's escaped brackets as LaTeX does: \\\\[2pt] opens nothing, $$ blocks stay as written", () => {
    expect(normalizeMath('a \\\\[2pt] b \\\\] c')).toBe('a \\\\[2pt] b \\\\] c');
    const aligned = '$$\n\\begin{aligned} a &= b \\\\[2pt] c &= d \\end{aligned}\n$$';
    expect(normalizeMath(`${aligned}\nand \\[ y \\]`)).toBe(`${aligned}\nand \n$$\ny\n$$\n`);
    expect(normalizeMath('$$ \\(x\\) $$ and \\(y\\)')).toBe('$$ \\(x\\) $$ and $$y$$');
  });

  it('takes a line that is only $$…$$ as display math (a block), in its quote too; $$ in a sentence stays inline', () => {
    expect(normalizeMath('Energy:\n$$E = mc^2$$\nso.')).toBe('Energy:\n$$\nE = mc^2\n$$\nso.');
    expect(normalizeMath('> $$ x^2 $$')).toBe('> $$\n> x^2\n> $$');
    expect(normalizeMath('see $$x$$ here')).toBe('see $$x$$ here');
    expect(normalizeMath('$$ $$')).toBe('$$ $$');
    expect(normalizeMath('```\n$$x$$\n```')).toBe('```\n$$x$$\n```');
    // Indented 4 or more, the line is code (an indented block): as written.
    expect(normalizeMath('text\n\n    $$x$$')).toBe('text\n\n    $$x$$');
    // A reply being written: its last line may go on, so it waits; lines before it do not.
    expect(normalizeMath('$$a$$', { streaming: true })).toBe('$$a$$');
    expect(normalizeMath('$$a$$\nand', { streaming: true })).toBe('$$\na\n$$\nand');
    expect(normalizeMath('$$a$$')).toBe('$$\na\n$$');
  });

  it('leaves code as written: fenced blocks (``` and ~~~) and inline spans', () => {
    const code = '```bash\necho $HOME $x$ \\(y\\)\n```';
    expect(normalizeMath(`${code}\nthen $a$`)).toBe(`${code}\nthen $$a$$`);
    const tilde = '~~~\nprice: $1$\n~~~';
    expect(normalizeMath(tilde)).toBe(tilde);
    expect(normalizeMath('run `echo $x$` for $y$')).toBe('run `echo $x$` for $$y$$');
    expect(normalizeMath('``a `$b$` c`` and $d$')).toBe('``a `$b$` c`` and $$d$$');
    // Fences in list items and quotes.
    const listed = '- item\n\n    ~~~\n    echo "$a" "$b"\n    ~~~\n- $c$';
    expect(normalizeMath(listed)).toBe('- item\n\n    ~~~\n    echo "$a" "$b"\n    ~~~\n- $$c$$');
    expect(normalizeMath('> ```\n> $x$\n> ```')).toBe('> ```\n> $x$\n> ```');
    // A code span is a run of backticks no backtick touches, within a paragraph.
    expect(normalizeMath('``a` $x$ `b`` and $y$')).toBe('``a` $x$ `b`` and $$y$$');
    expect(normalizeMath('Press ` to open.\n\nArea $r^2$ and `foo`')).toBe(
      'Press ` to open.\n\nArea $$r^2$$ and `foo`',
    );
    // A longer closing fence closes; a shorter one does not; nor does one indented 4 or more past the opening.
    expect(normalizeMath('```\n$a$\n    ```\n$b$\n```\n$c$')).toBe('```\n$a$\n    ```\n$b$\n```\n$$c$$');
    expect(normalizeMath('   ```\n$a$\n      ```\n$b$\n```\n$c$')).toBe('   ```\n$a$\n      ```\n$b$\n```\n$$c$$');
    expect(normalizeMath('- x\n\n  ```\n  $a$\n      ```\n  $b$\n  ```\n$c$')).toBe(
      '- x\n\n  ```\n  $a$\n      ```\n  $b$\n  ```\n$$c$$',
    );
    // Nested deeper (a list in a list): its close may sit up to 3 past its opening.
    expect(normalizeMath('- a\n  - b\n\n    ```\n    $a$\n       ```\n$c$')).toBe(
      '- a\n  - b\n\n    ```\n    $a$\n       ```\n$$c$$',
    );
    expect(normalizeMath('````\n$a$\n```\n$b$\n````\n$c$')).toBe('````\n$a$\n```\n$b$\n````\n$$c$$');
  });

  // (An unclosed code span is a literal backtick, as CommonMark reads it: what follows it is prose until it closes.)
  it('leaves an unclosed delimiter (a reply still streaming) as text', () => {
    for (const s of ['see \\[ x + ', 'see \\( x', 'see $x', '```\n$a$']) {
      expect(normalizeMath(s)).toBe(s);
    }
  });

  it('changes nothing in text without $, \\( or \\[ (any text)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (s) => {
        fc.pre(!s.includes('$') && !s.includes('\\(') && !s.includes('\\['));
        expect(normalizeMath(s)).toBe(s);
      }),
    );
  });

  it('never touches the inside of a fenced code block (any text around and in it)', () => {
    // Lines of the block may be fences indented 4 or more: code, not a close.
    const inner = fc
      .array(fc.oneof(fc.string(), fc.constantFrom('    ```', '     ```', '\t```', '    $x$')))
      .map((lines) => lines.join('\n'))
      .filter((s) => !/^ {0,3}(`{3,}|~{3,})/m.test(s));
    fc.assert(
      fc.property(fc.string(), inner, fc.string(), (before, body, after) => {
        const b = before.replace(/`|~/g, '');
        const block = `\`\`\`\n${body}\n\`\`\``;
        const out = normalizeMath(`${b}\n${block}\n${after.replace(/`|~/g, '')}`);
        expect(out).toContain(`\n${block}\n`);
      }),
    );
  });
});
