/**
 * The I/O half of `kvgate verify`: send each fixed prefix to the disaggregated path and to the non-disaggregated
 * baseline, read the token ids back, and pair them into outcomes. Comparison and verdict are pure (`compare.ts`,
 * `verdict.ts`); this file only talks HTTP, so a fake `fetch` or a fake server is all a test needs.
 */
import { H } from '../headers.js';
import { fromGenerationResponse, toGenerationRequest } from './token-ids.js';
import type { VerifyPrompt } from './prompts.js';
import { toOutcome, verdictOf, type PromptOutcome, type Reply, type Verdict } from './verdict.js';

export interface VerifyOptions {
  /** Base URL of the disaggregated path (e.g. Envoy's public listener in front of kvgate). */
  readonly via: string;
  /** Base URL of a non-disaggregated worker of the revision under test. */
  readonly baseline: string;
  readonly prompts: readonly VerifyPrompt[];
  readonly model: string;
  /** Headers on via requests (tenant, session pinning the revision...). */
  readonly viaHeaders: Readonly<Record<string, string>>;
  readonly baselineHeaders: Readonly<Record<string, string>>;
  /** Default `max_tokens` for prompts that do not set their own. */
  readonly maxTokens: number;
  /** Prompts in flight at once (each sends its via and baseline requests together). */
  readonly concurrency: number;
  readonly timeoutMs: number;
  /**
   * `cache_salt` for baseline requests, or null to send none. A fresh salt keeps the baseline from reading any
   * prefix-cache block that another request pulled in: a wrong P/D pairing leaves KV computed elsewhere in the
   * decode worker's prefix cache, and a baseline served from it would agree with the corruption.
   */
  readonly baselineSalt: string | null;
  /** The revision the via path must bind (`x-kvgate-revision`); any other fails the run. */
  readonly expectRevision?: string;
}

export interface VerifyDeps {
  readonly fetch?: typeof fetch;
  /** Called as each prompt finishes (progress display). */
  readonly onOutcome?: (outcome: PromptOutcome, done: number, total: number) => void;
}

export interface VerifyReport {
  readonly via: string;
  readonly baseline: string;
  readonly model: string;
  readonly outcomes: readonly PromptOutcome[];
  readonly verdict: Verdict;
}

/** Run every prompt against both endpoints, in prompt order in the report whatever the completion order. */
export async function runVerify(o: VerifyOptions, deps: VerifyDeps = {}): Promise<VerifyReport> {
  const doFetch = deps.fetch ?? fetch;
  const outcomes: PromptOutcome[] = new Array<PromptOutcome>(o.prompts.length);
  let next = 0;
  let done = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < o.prompts.length; i = next++) {
      const prompt = o.prompts[i]!;
      const viaReq = toGenerationRequest(prompt, { model: o.model, maxTokens: o.maxTokens });
      const baseExtra = o.baselineSalt === null ? {} : { cache_salt: o.baselineSalt };
      const baseReq = toGenerationRequest(prompt, { model: o.model, maxTokens: o.maxTokens, extra: baseExtra });
      const [via, baseline] = await Promise.all([
        requestIds(doFetch, endpointUrl(o.via, viaReq.path), viaReq.body, o.viaHeaders, prompt.kind, o.timeoutMs),
        requestIds(doFetch, endpointUrl(o.baseline, baseReq.path), baseReq.body, o.baselineHeaders, prompt.kind, o.timeoutMs),
      ]);
      const outcome = toOutcome(prompt.id, prompt.kind, via, baseline);
      outcomes[i] = outcome;
      deps.onOutcome?.(outcome, ++done, o.prompts.length);
    }
  };
  const lanes = Math.max(1, Math.min(o.concurrency, o.prompts.length));
  await Promise.all(Array.from({ length: lanes }, worker));
  return {
    via: o.via,
    baseline: o.baseline,
    model: o.model,
    outcomes,
    verdict: verdictOf(outcomes, o.expectRevision === undefined ? {} : { expectRevision: o.expectRevision }),
  };
}

/** `http://h:p` or `http://h:p/v1` (either spelling users paste) + the API path. */
export function endpointUrl(base: string, path: string): string {
  const trimmed = base.replace(/\/+$/, '');
  return trimmed.endsWith('/v1') ? `${trimmed}${path.slice(3)}` : `${trimmed}${path}`;
}

async function requestIds(
  doFetch: typeof fetch,
  url: string,
  body: Record<string, unknown>,
  headers: Readonly<Record<string, string>>,
  kind: VerifyPrompt['kind'],
  timeoutMs: number,
): Promise<Reply> {
  let res: Response;
  let text: string;
  try {
    res = await doFetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    text = await res.text();
  } catch (e) {
    return { ok: false, status: null, error: `${url}: ${describeFetchError(e, timeoutMs)}` };
  }
  const json = parseJson(text);
  if (!res.ok) return { ok: false, status: res.status, error: `${url}: HTTP ${res.status}: ${errorDetail(json, text, res.headers)}` };
  if (json === undefined) return { ok: false, status: res.status, error: `${url}: response is not JSON: ${clip(text)}` };
  const extracted = fromGenerationResponse(kind, json);
  if (!extracted.ok) return { ok: false, status: res.status, error: `${url}: ${extracted.error}` };
  return {
    ok: true,
    status: res.status,
    generated: extracted.value,
    revision: res.headers.get(H.revision),
    group: res.headers.get(H.group),
  };
}

/** The error an endpoint gave: a kvgate refusal code and message, vLLM's error message, or the raw body. */
function errorDetail(json: unknown, text: string, headers: Headers): string {
  const e = (json as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  const reason = headers.get(H.rejectReason);
  const message = typeof e?.message === 'string' ? e.message : clip(text);
  return reason === null ? message : `${reason}: ${message}`;
}

function describeFetchError(e: unknown, timeoutMs: number): string {
  if (e instanceof Error && (e.name === 'TimeoutError' || e.name === 'AbortError')) return `no answer within ${timeoutMs} ms`;
  const cause = e instanceof Error && e.cause instanceof Error ? `: ${e.cause.message}` : '';
  return `${e instanceof Error ? e.message : String(e)}${cause}`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function clip(s: string, n = 200): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length > n ? `${one.slice(0, n)}...` : one || '(empty body)';
}

/**
 * The served model, when the user did not name one: the first base model (no `parent`) the baseline lists.
 * Returns an error message for the CLI to print with the fix (`--model`).
 */
export async function discoverModel(
  baseline: string,
  headers: Readonly<Record<string, string>>,
  timeoutMs: number,
  doFetch: typeof fetch = fetch,
): Promise<{ ok: true; value: string } | { ok: false; error: string }> {
  const url = endpointUrl(baseline, '/v1/models');
  try {
    const res = await doFetch(url, { headers: { ...headers }, signal: AbortSignal.timeout(timeoutMs) });
    const json = parseJson(await res.text()) as { data?: Array<{ id?: unknown; parent?: unknown }> } | undefined;
    if (!res.ok) return { ok: false, error: `${url}: HTTP ${res.status}` };
    const card = json?.data?.find((c) => typeof c.id === 'string' && (c.parent === undefined || c.parent === null));
    if (card === undefined) return { ok: false, error: `${url} lists no base model` };
    return { ok: true, value: card.id as string };
  } catch (e) {
    return { ok: false, error: `${url}: ${describeFetchError(e, timeoutMs)}` };
  }
}
