/**
 * `kvgate verify`: proof, in token ids, that the disaggregated path serves exactly what a non-disaggregated worker
 * of the same revision serves. Grammatical text is never evidence: a prompt passes only when both sides returned
 * token ids and the ids are equal, and the run passes only when every prompt passed and every via response was
 * bound to one revision.
 *
 * Exit codes: 0 every prompt matched; 1 a divergence (or mixed or unexpected revisions); 2 usage or config error; 3 an endpoint
 * failed or returned no token ids.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { formatIssues } from '../config/issues.js';
import { loadPromptsFile } from '../verify/prompts.js';
import { createProgress, type ProgressSink } from '../verify/progress.js';
import { renderText, toJsonReport } from '../verify/report.js';
import { canariesYaml, recordCanaries } from '../verify/record.js';
import { discoverModel, runVerify } from '../verify/run.js';
import { measureCanaries } from '../sidecar/probe.js';

const HELP = `usage: kvgate verify --via URL --baseline URL --prompts FILE [options]

Sends each fixed prefix, greedily, to the disaggregated path and to a non-disaggregated baseline of the same
revision, and compares the generated token ids. Reports the first divergent position and the two ids there.

  --via URL              the disaggregated path, e.g. Envoy's public listener in front of kvgate
  --baseline URL         a plain vLLM worker of the revision under test, serving prefill and decode itself
  --prompts FILE         YAML/JSON list: each item a string (completion) or { prompt } / { messages } (chat),
                         with optional id and max_tokens
  --model NAME           served model name (default: the first base model the baseline lists)
  --header K=V           header on via requests, repeatable (e.g. x-tenant-id=acme, x-session-id=s1)
  --baseline-header K=V  header on baseline requests, repeatable
  --expect-revision R    fail unless every via response was bound to revision R (x-kvgate-revision)
  --max-tokens N         tokens to generate per prompt unless the prompt says (default 32)
  --concurrency N        prompts in flight at once (default 4)
  --timeout-ms N         per request (default 60000)
  --baseline-salt S      cache_salt for baseline requests (default: a fresh one per run, so the baseline never
                         reads prefix-cache blocks a disaggregated request pulled in); "none" sends no salt
  --record REVISION      on a pass, record REVISION's behaviour: measure the canary digests (tokenizer, chat
                         template, generation) on the baseline, under --model (an adapter's name for an
                         adapter revision), and write them into --policy, or print the YAML to paste
  --policy FILE          the route table to write recorded canaries into (its descriptorFile, when it names one)
  --json                 machine-readable report on stdout

exit: 0 every prompt matched; 1 divergence, mixed or unexpected revisions; 2 usage/config error; 3 endpoint failure
`;

/** Where the command writes, and what it may not decide itself (tests inject these). */
export interface VerifyIo {
  readonly stdout: { write(chunk: string): unknown };
  readonly stderr: ProgressSink;
  readonly fetch?: typeof fetch;
  readonly newSalt?: () => string;
}

/** The registered entry point (`kvgate verify ...`). */
export function verifyCommand(argv: readonly string[]): Promise<number> {
  return runVerifyCommand(argv, { stdout: process.stdout, stderr: process.stderr });
}

interface ParsedArgs {
  readonly via: string;
  readonly baseline: string;
  readonly prompts: string;
  readonly model: string | undefined;
  readonly expectRevision: string | undefined;
  readonly viaHeaders: Record<string, string>;
  readonly baselineHeaders: Record<string, string>;
  readonly maxTokens: number;
  readonly concurrency: number;
  readonly timeoutMs: number;
  readonly salt: string | undefined | null;
  readonly json: boolean;
  readonly record: string | undefined;
  readonly policy: string | undefined;
}

export async function runVerifyCommand(argv: readonly string[], io: VerifyIo): Promise<number> {
  const args = parseVerifyArgs(argv);
  if (args === 'help') {
    io.stdout.write(HELP);
    return 0;
  }
  if (Array.isArray(args)) {
    io.stderr.write(`${args.map((e) => `kvgate verify: ${e}`).join('\n')}\n\n${HELP}`);
    return 2;
  }
  const prompts = await loadPromptsFile(args.prompts);
  if (!prompts.ok) {
    io.stderr.write(`kvgate verify: the prompts file is invalid:\n${formatIssues(prompts.error)}\n`);
    return 2;
  }
  const doFetch = io.fetch ?? fetch;
  let model = args.model;
  if (model === undefined) {
    const found = await discoverModel(args.baseline, args.baselineHeaders, args.timeoutMs, doFetch);
    if (!found.ok) {
      io.stderr.write(`kvgate verify: cannot tell which model to verify: ${found.error}; pass --model NAME\n`);
      return 3;
    }
    model = found.value;
  }
  const progress = createProgress(io.stderr);
  const report = await runVerify(
    {
      via: args.via,
      baseline: args.baseline,
      prompts: prompts.value,
      model,
      viaHeaders: args.viaHeaders,
      baselineHeaders: args.baselineHeaders,
      maxTokens: args.maxTokens,
      concurrency: args.concurrency,
      timeoutMs: args.timeoutMs,
      ...(args.expectRevision === undefined ? {} : { expectRevision: args.expectRevision }),
      baselineSalt: args.salt === undefined ? `kvgate-verify-${(io.newSalt ?? randomUUID)()}` : args.salt,
    },
    { fetch: doFetch, onOutcome: (o, done, total) => progress.update(o, done, total) },
  );
  progress.finish();
  io.stdout.write(args.json ? `${JSON.stringify(toJsonReport(report), null, 2)}\n` : renderText(report));
  if (args.record === undefined) return report.verdict.exitCode;
  if (report.verdict.exitCode !== 0) {
    io.stderr.write(`kvgate verify: the run did not pass, so nothing is recorded for revision ${args.record}\n`);
    return report.verdict.exitCode;
  }
  return recordAfterPass(args, model, doFetch, io);
}

/** Measure the baseline's canaries and write them into the route table, or print the YAML to paste. */
async function recordAfterPass(args: ParsedArgs, model: string, doFetch: typeof fetch, io: VerifyIo): Promise<number> {
  const revision = args.record!;
  const m = await measureCanaries(args.baseline, { model, fetch: doFetch, timeoutMs: args.timeoutMs });
  const { tokenizer, chatTemplate, generation } = m.digests;
  if (tokenizer === undefined || chatTemplate === undefined || generation === undefined) {
    io.stderr.write(
      `kvgate verify: the baseline answered no canary digest for ${Object.entries(m.errors)
        .map(([k, e]) => `${k} (${e})`)
        .join(', ')}; nothing recorded\n`,
    );
    return 3;
  }
  const digests = { tokenizer, chatTemplate, generation };
  if (args.policy !== undefined) {
    const written = await recordCanaries(args.policy, revision, digests);
    if (written.ok) {
      io.stderr.write(`kvgate verify: recorded the canaries of revision ${revision} (model ${model}) in ${written.file}\n`);
      return 0;
    }
    io.stderr.write(`kvgate verify: could not write the canaries (${written.error}); paste them yourself:\n`);
  }
  (args.json ? io.stderr : io.stdout).write(canariesYaml(revision, digests, model));
  return 0;
}

/** argv -> options, `'help'`, or every usage problem at once. */
export function parseVerifyArgs(argv: readonly string[]): ParsedArgs | 'help' | string[] {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        via: { type: 'string' },
        baseline: { type: 'string' },
        prompts: { type: 'string' },
        model: { type: 'string' },
        'expect-revision': { type: 'string' },
        header: { type: 'string', multiple: true },
        'baseline-header': { type: 'string', multiple: true },
        'max-tokens': { type: 'string' },
        concurrency: { type: 'string' },
        'timeout-ms': { type: 'string' },
        'baseline-salt': { type: 'string' },
        json: { type: 'boolean' },
        record: { type: 'string' },
        policy: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    return [(e as Error).message];
  }
  if (values.help) return 'help';
  const errors: string[] = [];
  const via = url('--via', values.via, errors);
  const baseline = url('--baseline', values.baseline, errors);
  if (values.prompts === undefined) errors.push('--prompts FILE is required');
  const parsed = {
    via,
    baseline,
    prompts: values.prompts ?? '',
    model: values.model,
    expectRevision: values['expect-revision'],
    viaHeaders: headers('--header', values.header ?? [], errors),
    baselineHeaders: headers('--baseline-header', values['baseline-header'] ?? [], errors),
    maxTokens: positiveInt('--max-tokens', values['max-tokens'], 32, errors),
    concurrency: positiveInt('--concurrency', values.concurrency, 4, errors),
    timeoutMs: positiveInt('--timeout-ms', values['timeout-ms'], 60_000, errors),
    salt: values['baseline-salt'] === 'none' ? null : values['baseline-salt'],
    json: values.json === true,
    record: values.record,
    policy: values.policy,
  };
  if (parsed.policy !== undefined && parsed.record === undefined) errors.push('--policy FILE is only used with --record REVISION');
  if (parsed.salt === '') errors.push('--baseline-salt must not be empty (use "none" to send no salt)');
  return errors.length > 0 ? errors : parsed;
}

function url(flag: string, v: string | undefined, errors: string[]): string {
  if (v === undefined) {
    errors.push(`${flag} URL is required`);
    return '';
  }
  try {
    const u = new URL(v);
    if (u.protocol === 'http:' || u.protocol === 'https:') return v;
  } catch {
    // reported below
  }
  errors.push(`${flag} ${JSON.stringify(v)} is not an http(s) URL; write e.g. http://127.0.0.1:10000`);
  return '';
}

function headers(flag: string, items: readonly string[], errors: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const eq = item.indexOf('=');
    const name = eq > 0 ? item.slice(0, eq).trim() : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
      errors.push(`${flag} ${JSON.stringify(item)} must be NAME=VALUE with a valid header name, e.g. x-tenant-id=acme`);
      continue;
    }
    out[name.toLowerCase()] = item.slice(eq + 1);
  }
  return out;
}

function positiveInt(flag: string, v: string | undefined, fallback: number, errors: string[]): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (Number.isInteger(n) && n > 0) return n;
  errors.push(`${flag} must be a positive integer; got ${JSON.stringify(v)}`);
  return fallback;
}
