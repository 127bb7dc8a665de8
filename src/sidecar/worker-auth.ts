/**
 * The worker's API key: vLLM started with `--api-key` (or `VLLM_API_KEY`) answers 401 `{"error": "Unauthorized"}` to
 * a guarded path without `Authorization: Bearer <key>` (the authentication middleware, vllm-project/vllm
 * `vllm/entrypoints/openai/api_server.py` and `server_utils.py` @029329a8: paths starting with `/v1`; current main,
 * `vllm/entrypoints/serve/middleware/authenticate.py` @baaf6e9c: `/v1`, `/v2`, `/inference`, `/cohere`; always after
 * stripping the root path; docs/vllm-disaggregation.md §9). The sidecar sends the key on EVERY call to its worker,
 * guarded or not (probes, canaries, prefill, decode, `/tokenize`, `/version`, `/metrics`): harmless where vLLM does not
 * check, right for deployments that put an authenticating proxy in front of the whole worker, and right if vLLM ever
 * guards every route (PR #58028, open).
 *
 * The key is read once at start from a file (a mounted Secret) or an environment variable. The config only names
 * where it is; the value never enters the config object, the status document or a log line.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { err, ok, type Result } from '../errors.js';

export const WorkerApiKeySchema = z
  .object({
    /** A file holding the key (surrounding whitespace is trimmed), relative to the sidecar's config file. */
    file: z.string().min(1).optional(),
    /** An environment variable holding the key. */
    env: z.string().min(1).optional(),
  })
  .strict()
  .refine((k) => (k.file === undefined) !== (k.env === undefined), { message: 'set exactly one of workerApiKey.file or workerApiKey.env' });

export type WorkerApiKeySource = z.infer<typeof WorkerApiKeySchema>;

/** Headers that authenticate a call to the worker: `{ authorization: 'Bearer <key>' }`, or nothing without a key. */
export type WorkerAuth = Readonly<Record<string, string>>;

export const NO_WORKER_AUTH: WorkerAuth = Object.freeze({});

/**
 * Read the key a source names. `baseDir` resolves a relative file (the config file's folder). Errors say where the
 * key was looked for, never what it is.
 */
export async function loadWorkerAuth(
  source: WorkerApiKeySource | undefined,
  env: Readonly<Record<string, string | undefined>>,
  baseDir = process.cwd(),
): Promise<Result<WorkerAuth, string>> {
  if (source === undefined) return ok(NO_WORKER_AUTH);
  let key: string;
  if (source.env !== undefined) {
    key = (env[source.env] ?? '').trim();
    if (key === '')
      return err(`workerApiKey.env names ${source.env}, which is not set or empty; export the worker's --api-key value in it`);
  } else {
    const file = path.isAbsolute(source.file!) ? source.file! : path.join(baseDir, source.file!);
    try {
      key = (await readFile(file, 'utf8')).trim();
    } catch (e) {
      return err(
        `workerApiKey.file ${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'}); mount the worker's API key there`,
      );
    }
    if (key === '') return err(`workerApiKey.file ${file} is empty; it must hold the worker's --api-key value`);
  }
  if (/[\r\n]/.test(key)) return err('the worker API key contains a line break; store the key alone, on one line');
  return ok(Object.freeze({ authorization: `Bearer ${key}` }));
}
