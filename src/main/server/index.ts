/** The headless server's public surface: the CLI's `serve` and tests import from here only. */
export { API_KEY_FILE, createApiServerControl, lanAddresses, serveControl } from './api-server-control';
export { isWildcard } from './security';
export {
  allowedHostsOf,
  allowedOriginsOf,
  assertBindable,
  DEFAULT_MAX_JSON_BYTES,
  DEFAULT_STATIC_DIR,
  type RunningServer,
  type ServerOptions,
  startServer,
} from './server';
export { uiBuildOf } from './static-files';
