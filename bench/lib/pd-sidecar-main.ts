/**
 * Child-process entry: one kvgate sidecar (its own process, as it runs beside its worker) in front of the
 * simulated worker in argv[2] (JSON `{"role":"prefill"|"decode","worker":URL,"onTransferFailure"?:"fail"|"recompute"}`,
 * the last left to the sidecar's default when absent); a decode sidecar runs its
 * prefill leg in direct mode (to the endpoint the contract names). It probes its worker at start and exits with
 * an error unless the worker matches the declared descriptor. Prints one JSON line
 * `{"port":N,"url":URL,"endpoint":"ip:port","fingerprint":HEX}`, then serves until SIGINT/SIGTERM. Logs (warn
 * and above) go to stderr.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { parseSidecarConfig } from '../../src/sidecar/config.js';
import { createSidecar } from '../../src/sidecar/server.js';
import { simCanaryDigests } from '../../testbed/sim/recorded-canaries.js';
import { PD_KEY_SEED, PD_MODEL, pdDescriptor } from './pd-stack.js';

const args = JSON.parse(process.argv[2] ?? '{}') as {
  role: 'prefill' | 'decode';
  worker: string;
  onTransferFailure?: 'fail' | 'recompute';
};
const parsed = parseSidecarConfig(
  {
    role: args.role,
    worker: args.worker,
    listen: '127.0.0.1:0',
    // The behaviour a known-good worker of this descriptor shows, recorded as an operator records it: the sidecar
    // verifies its worker only against recorded canaries.
    descriptor: { ...pdDescriptor(), canaries: await simCanaryDigests(pdDescriptor()) },
    servedModelName: PD_MODEL,
    keys: { devSeed: PD_KEY_SEED },
    probe: { intervalMs: 60_000, timeoutMs: 5_000 },
    prefill: { via: 'direct', maxAttempts: 1, timeoutMs: 30_000 },
    ...(args.onTransferFailure === undefined ? {} : { onTransferFailure: args.onTransferFailure }),
    maxInFlight: 4096,
    admin: '',
    metrics: '',
  },
  `bench ${args.role} sidecar`,
);
if (!parsed.ok) throw new Error(`bench sidecar config is invalid: ${JSON.stringify(parsed.error)}`);
const config = parsed.value;
const sidecar = await createSidecar(config, {
  logger: pino({ level: 'warn' }, pino.destination(2)),
  registry: new Registry(),
  keys: createDevKeyRing(PD_KEY_SEED),
});
const status = sidecar.status();
if (!status.verified) throw new Error(`the ${args.role} sidecar did not verify its worker: ${JSON.stringify(status.reasons)}`);
process.stdout.write(
  `${JSON.stringify({ port: sidecar.port, url: sidecar.url, endpoint: new URL(sidecar.url).host, fingerprint: config.fingerprint })}\n`,
);
const stop = () => {
  void sidecar.close().finally(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
