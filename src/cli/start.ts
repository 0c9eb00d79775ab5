/**
 * `npm start`. The desktop window arrives with the desktop issue; until then
 * this runs a short demo on the default model through the same RunnerService
 * the CLI uses, and says how to go further.
 */
import path from 'node:path';
import { main } from './main';

const root = path.resolve(__dirname, '../..');
const model = path.join(root, 'resources/models/default');

process.stdout.write(
  'kvdesk: the desktop window is not part of this build yet; running the CLI demo on the default model.\n' +
    `Try it yourself:  npx kvdesk generate ${path.relative(process.cwd(), model) || '.'} --chat --prompt "Hello"\n\n`,
);
main(['generate', model, '--chat', '--prompt', 'Hello! Who are you?', '--max-new-tokens', '48', '--seed', '7'], {
  out: (s) => process.stdout.write(s),
  err: (s) => process.stderr.write(s),
}).then((code) => {
  process.exitCode = code;
});
