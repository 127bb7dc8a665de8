/**
 * The request the demo suggests trying by hand, as a curl line - sent through the running topology first, so the
 * demo never prints a curl that does not return text.
 *
 * Why this exists: the demo used to print `{"prompt":"Hello","max_tokens":8}` without ever sending it, and that
 * request returns an empty completion (`"text": ""`, `finish_reason: "stop"`, one completion token). Not a routing
 * fault: the simulated model (testbed/sim/generator.ts) ends a sequence with EOS at any position with odds 1/EOS_ODDS,
 * the first generated position included, as a real model may; for "Hello" on revision llama-a that draw happens at
 * the first position, and vLLM's completions API leaves the EOS token out of `text`. So the suggestion is now one of
 * the demo's own prompts, chosen by sending it and keeping the first that comes back with text.
 */
import { PROMPTS } from './scenarios.js';

export interface SuggestedRequest {
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Readonly<Record<string, unknown>>;
  /** What the topology answered to exactly this request when it was chosen. */
  readonly text: string;
  readonly revision: string | null;
}

/**
 * Send candidate requests for `model` through `publicUrl` with `headers` (tenant, session) and return the first that
 * answers 200 with non-empty text. Throws, with what came back, when none does.
 */
export async function suggestRequest(
  publicUrl: string,
  model: string,
  headers: Readonly<Record<string, string>>,
): Promise<SuggestedRequest> {
  const url = `${publicUrl}/v1/completions`;
  const seen: string[] = [];
  for (const prompt of PROMPTS) {
    const body = { model, prompt, max_tokens: 16 };
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    const raw = await res.text();
    let text = '';
    try {
      text = String((JSON.parse(raw) as { choices?: { text?: unknown }[] }).choices?.[0]?.text ?? '');
    } catch {
      // not JSON: recorded below
    }
    if (res.status === 200 && text.trim() !== '') return { url, headers, body, text, revision: res.headers.get('x-kvgate-revision') };
    seen.push(`${res.status} ${raw.slice(0, 200)}`);
  }
  throw new Error(`no sample request for model ${model} came back with text through ${url}:\n  ${seen.join('\n  ')}`);
}

/** The request as a shell command (`-i` shows kvgate's response headers: group, revision, binding). */
export function curlOf(s: SuggestedRequest): string {
  const q = (v: string) => `'${v.replace(/'/g, `'\\''`)}'`;
  const headers = Object.entries({ 'content-type': 'application/json', ...s.headers }).map(([k, v]) => `-H ${q(`${k}: ${v}`)}`);
  return `curl -s -i ${s.url} ${headers.join(' ')} -d ${q(JSON.stringify(s.body))}`;
}
