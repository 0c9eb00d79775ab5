/**
 * The model a request names, on every API: the id itself, or a name as Ollama's listings give it (`default:latest`)
 * or as a client pulled it from the hub (`hf.co/owner/Name:q4`). Clients list models with /api/tags and then chat
 * on /v1 (VS Code's Ollama provider, Open WebUI), as Ollama's own OpenAI-compatible routes allow.
 */
import type { ModelInfo } from '../../shared/api';
import { KvdeskError, toErrorInfo } from '../../shared/errors';
import type { ModelSpec } from '../../shared/model-spec';
import type { HostApi } from '../host/host-api';
import { pulledEntry, pullNameOf } from '../host/hub-download';
import { errorFromInfo } from './http-util';
import { resolveModel } from './ollama-adapter';

/** The loaded models. */
export async function loadedModels(hostApi: HostApi): Promise<ModelInfo[]> {
  const models = await hostApi.call('listModels', {});
  if (!models.ok) throw errorFromInfo(models.error);
  return models.value;
}

/**
 * What a request may name, as Ollama's "installed" models: the loaded ones, then the library's packages that
 * load on first use (described by their last check; no backend until they load).
 */
export async function installedModels(hostApi: HostApi): Promise<ModelInfo[]> {
  // The library as another process (`kvdesk pull`) may have left it: read again when the file changed.
  await hostApi.library.sync();
  const library = hostApi
    .loadable()
    .map((e): ModelInfo => ({ id: e.id, spec: e.spec as ModelSpec, loadMs: 0, backend: '', isDefault: false }));
  return [...(await loadedModels(hostApi)), ...library];
}

/**
 * The library id of a package pulled from the hub under the name a client pulled it by (`hf.co/owner/Name:q4`,
 * `owner/name`, `owner/name:q4@main`: any name /api/pull takes), so it can chat with it by that name as with
 * Ollama's; the name itself otherwise. A name of a revision other than the one pulled is refused (404) saying so
 * and how to pull it; one of two revisions as /api/pull refuses it (400).
 */
export function pulledName(hostApi: HostApi, name: string): string {
  try {
    // Most recently loaded first, as a name of several packages resolves; the library read where each came from.
    const entry = pulledEntry(
      hostApi.library.list(),
      name,
      (e, named) =>
        `DELETE /api/delete ${JSON.stringify({ model: e.id })}, then POST /api/pull ${JSON.stringify({ model: pullNameOf(named) })}`,
    );
    return entry?.id ?? name;
  } catch (err) {
    // The request's `model` is at fault, in every API's answer; at another revision, not found (404).
    const info = toErrorInfo(err);
    throw new KvdeskError(info.detail?.root !== undefined ? 'MODEL_NOT_LOADED' : info.code, info.message, {
      ...info.detail,
      field: 'model',
    });
  }
}

/**
 * The id a request's `model` means on any API: itself when a model has it, else what Ollama's names resolve to
 * (above). A name that means nothing goes on as it is: the host's refusal names the models there are. `installed`:
 * the ids of installedModels when the caller has listed them already (not listed again).
 */
export async function apiModelName(
  hostApi: HostApi,
  name: string | undefined,
  installed?: readonly string[],
): Promise<string | undefined> {
  if (name === undefined || hostApi.runner.listModels().some((m) => m.id === name)) return name;
  const ids = installed ?? (await installedModels(hostApi)).map((m) => m.id);
  if (ids.includes(name)) return name;
  // A hub name at a revision that is not the one pulled is refused here, saying so.
  const pulled = pulledName(hostApi, name);
  try {
    return resolveModel(pulled, ids);
  } catch {
    return name;
  }
}
