/**
 * `kvgate fingerprint`: what kvgate sees of a worker. With `--worker URL` it probes the live worker (the same probes
 * the sidecar runs) and measures the canary digests; with `--descriptor FILE` it prints the declared descriptor's
 * fingerprint and vLLM's predicted NIXL handshake hash, and - when both are given - whether the worker matches.
 */
import { parseArgs } from 'node:util';
import { CompatDescriptorSchema, type CompatDescriptor } from '../compat/descriptor.js';
import { tryFingerprintOf } from '../compat/fingerprint.js';
import { predictNixlHash } from '../compat/nixl-hash.js';
import { fromZodIssues } from '../config/from-zod.js';
import { formatIssues } from '../config/issues.js';
import { readConfigText, readErrorReason } from '../config/read-text.js';
import { formatOf, parseStructuredText } from '../config/text.js';
import { compareObservation } from '../sidecar/compare.js';
import { measureCanaries, observeWorker } from '../sidecar/probe.js';
import { workerApiKeyFlags } from '../sidecar/command.js';
import { isWorkerBaseUrl } from '../sidecar/config.js';
import { loadWorkerAuth, WorkerApiKeySchema } from '../sidecar/worker-auth.js';

const HELP = `usage: kvgate fingerprint [--worker URL] [--descriptor FILE] [--model NAME] [--json]

  --worker URL        probe a live vLLM worker: /version, /v1/models, /metrics cache_config_info, and the
                      tokenizer, chat-template and generation canaries (records the digests to declare)
  --descriptor FILE   a compatibility descriptor (YAML/JSON): prints its fingerprint and the predicted NIXL hash;
                      with --worker, also compares the live worker against it (exit 1 on any disagreement)
  --model NAME        the served model to probe (default: the descriptor's adapter card when it names an adapter,
                      else the worker's first base model)
  --worker-api-key-file FILE | --worker-api-key-env NAME
                      the worker's --api-key (sent as Authorization: Bearer on every probe; never printed)
  --json              machine-readable output
`;

async function readDescriptor(file: string): Promise<{ ok: true; d: CompatDescriptor } | { ok: false; message: string }> {
  // Read and parsed exactly as the route table's `descriptorFile` is (src/policy/load.ts), so this command never prints
  // a fingerprint for a file the gate would refuse or read otherwise (a %YAML 1.1 directive, tags, duplicate keys).
  let text: string;
  try {
    text = await readConfigText(file);
  } catch (e) {
    return { ok: false, message: `${file}: cannot be read: ${readErrorReason(e)}` };
  }
  const read = parseStructuredText(text, file, formatOf(file));
  if (!read.ok) return { ok: false, message: formatIssues(read.error) };
  const raw = read.value.value;
  const parsed = CompatDescriptorSchema.safeParse(raw);
  if (!parsed.success) {
    const ctx = { file, root: CompatDescriptorSchema, data: raw, locate: read.value.locate };
    return { ok: false, message: formatIssues(fromZodIssues(parsed.error.issues, ctx)) };
  }
  return { ok: true, d: parsed.data };
}

export async function fingerprintCommand(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      worker: { type: 'string' },
      descriptor: { type: 'string' },
      model: { type: 'string' },
      'worker-api-key-file': { type: 'string' },
      'worker-api-key-env': { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean' },
    },
  });
  if (values.help || (values.worker === undefined && values.descriptor === undefined)) {
    process.stdout.write(HELP);
    return values.help ? 0 : 2;
  }
  if (values.worker !== undefined && !isWorkerBaseUrl(values.worker)) {
    process.stderr.write(
      `kvgate fingerprint: --worker must be the worker's base URL, e.g. http://127.0.0.1:8000, got ${JSON.stringify(values.worker.slice(0, 200))}\n`,
    );
    return 2;
  }
  const out: Record<string, unknown> = {};
  let exit = 0;
  let declared: CompatDescriptor | undefined;
  if (values.descriptor !== undefined) {
    const r = await readDescriptor(values.descriptor);
    if (!r.ok) {
      process.stderr.write(`kvgate fingerprint: ${r.message}\n`);
      return 2;
    }
    declared = r.d;
    const fp = tryFingerprintOf(declared);
    if (!fp.ok) {
      process.stderr.write(`kvgate fingerprint: ${values.descriptor}: ${fp.error.reason}\n`);
      return 2;
    }
    const nixl = predictNixlHash(declared);
    out['fingerprint'] = fp.value;
    out['nixlHash'] = { hash: nixl.hash, status: nixl.status, ...(nixl.reason ? { note: nixl.reason } : {}), factors: nixl.factors };
  }
  if (values.worker !== undefined) {
    const model = values.model;
    const key = workerApiKeyFlags(values['worker-api-key-file'], values['worker-api-key-env']).workerApiKey;
    const parsedKey = key === undefined ? undefined : WorkerApiKeySchema.safeParse(key);
    if (parsedKey !== undefined && !parsedKey.success) {
      process.stderr.write('kvgate fingerprint: give one of --worker-api-key-file or --worker-api-key-env\n');
      return 2;
    }
    const auth = await loadWorkerAuth(parsedKey?.data, process.env);
    if (!auth.ok) {
      process.stderr.write(`kvgate fingerprint: ${auth.error}\n`);
      return 2;
    }
    const headers = auth.value;
    // The model the sidecar would probe: the adapter's card when the descriptor names an adapter (probe.ts).
    const canaries = await measureCanaries(values.worker, {
      headers,
      ...(model === undefined ? {} : { model }),
      ...(declared === undefined ? {} : { descriptor: declared }),
    });
    out['worker'] = values.worker;
    out['canaries'] = {
      model: canaries.model,
      digests: canaries.digests,
      ...(Object.keys(canaries.errors).length ? { errors: canaries.errors } : {}),
    };
    if (declared !== undefined) {
      const verdict = compareObservation(
        declared,
        await observeWorker(values.worker, declared, { generation: true, headers, ...(model ? { servedModelName: model } : {}) }),
      );
      out['verified'] = verdict.verified;
      out['reasons'] = verdict.reasons;
      out['measured'] = verdict.measured;
      out['declaredOnly'] = verdict.declaredOnly;
      if (!verdict.verified) exit = 1;
    }
  }
  process.stdout.write(values.json ? `${JSON.stringify(out, null, 2)}\n` : render(out));
  return exit;
}

function render(out: Record<string, unknown>): string {
  const lines: string[] = [];
  if (out['fingerprint']) lines.push(`fingerprint      ${String(out['fingerprint'])}`);
  const nixl = out['nixlHash'] as { hash: string; status: string; note?: string } | undefined;
  if (nixl) lines.push(`NIXL hash        ${nixl.hash} (${nixl.status}${nixl.note ? `: ${nixl.note}` : ''})`);
  const c = out['canaries'] as { model: string; digests: Record<string, string>; errors?: Record<string, string> } | undefined;
  if (c) {
    lines.push(`worker           ${String(out['worker'])} (model ${c.model})`);
    lines.push('canaries (paste into the descriptor to let sidecars verify these by behaviour):');
    lines.push('  canaries:');
    for (const [k, v] of Object.entries(c.digests)) lines.push(`    ${k}: ${v}`);
    for (const [k, v] of Object.entries(c.errors ?? {})) lines.push(`  ${k}: not measured: ${v}`);
  }
  if (out['verified'] !== undefined) {
    lines.push(out['verified'] ? 'live worker matches the descriptor' : 'live worker does NOT match the descriptor:');
    for (const r of out['reasons'] as string[]) lines.push(`  - ${r}`);
    const only = out['declaredOnly'] as string[];
    if (only.length) lines.push(`declared, not verified by any probe: ${only.join(', ')}`);
  }
  return `${lines.join('\n')}\n`;
}
