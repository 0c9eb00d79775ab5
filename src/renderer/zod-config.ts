/**
 * zod compiles its object parsers with Function() where it may; the page's Content-Security-Policy forbids that
 * (script-src 'self', no eval), and zod's probe for it is reported as a violation. Imported first by main.tsx, so
 * it holds before any schema is built.
 */
import { z } from 'zod';

z.config({ jitless: true });
