/**
 * The requests benches send: OpenAI completions with a realistic prompt size, spread over tenants, sessions and
 * models so rollout cohorts, tenant scopes and picks all vary as they would in traffic (a bench that sends one
 * identical request measures a cache, not a gate).
 */
import { BENCH_TENANTS, benchModelName } from './tables.js';

/** About 1 KiB of prompt: typical of a chat turn, small enough not to turn the bench into a JSON-parse bench. */
const PROMPT = 'Summarise the following incident report for an on-call engineer in three bullet points. '.repeat(12);

export interface BenchRequest {
  readonly requestId: string;
  /** Lower-case request headers as Envoy sends them (pseudo-headers included). */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
}

/** Request `i` of a run; `models` is how many served models the table has (requests spread over all of them). */
export function benchRequest(i: number, models = 1, prefix = 'bench'): BenchRequest {
  const model = benchModelName(i % models);
  const requestId = `${prefix}-${i}`;
  const body = Buffer.from(JSON.stringify({ model, prompt: PROMPT, max_tokens: 128, temperature: 0 }));
  return {
    requestId,
    headers: {
      ':method': 'POST',
      ':path': '/v1/completions',
      ':authority': 'llm.example.com',
      ':scheme': 'http',
      'content-type': 'application/json',
      'content-length': String(body.length),
      'user-agent': 'kvgate-bench/1',
      'x-request-id': requestId,
      'x-tenant-id': BENCH_TENANTS[i % BENCH_TENANTS.length]!,
      'x-session-id': `session-${i % 997}`,
    },
    body,
  };
}
