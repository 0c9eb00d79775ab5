import type * as ort from 'onnxruntime-node';

/**
 * Sets onnxruntime's process-wide log level (`ort.env.logLevel`, which the process's first session fixes) to errors.
 * At its default, warnings, it prints what nobody running kvdesk can act on, in colour whatever NO_COLOR says:
 * `Failed to persist telemetry device ID` wherever $HOME cannot be written (a service account, a container). Each
 * session sets its own level (what fails reaches the person as kvdesk's error, with onnxruntime's message); an
 * error outside a session still prints.
 */
export function quietOrtLog(env: Pick<typeof ort.env, 'logLevel'>): void {
  env.logLevel = 'error';
}
