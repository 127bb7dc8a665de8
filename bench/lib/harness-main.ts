/**
 * Child-process entry for the end-to-end bench: two instances of the Envoy-faithful harness, both loaded from the
 * shipped `envoy/envoy.yaml` (the deployment's own bootstrap), one whose ext_proc cluster points at kvgate's gate
 * and one at the no-op ext_proc server. argv[2] is JSON `{"gatePort":N,"noopPort":N}`; prints one JSON line
 * `{"port":N,"gate":URL,"noop":URL}` (port = the gate harness's public listener), then serves until
 * SIGINT/SIGTERM.
 *
 * The harness is test support standing in for Envoy (testbed/harness/README.md); it is JavaScript, so its own cost
 * dominates these figures. What the bench compares is the same harness with and without kvgate behind it.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadEnvoyConfig, startEnvoyHarness, type EnvoyHarness } from '../../testbed/harness/index.js';

/** dist/bench/lib -> repository root */
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

async function harnessFor(extProcPort: number): Promise<EnvoyHarness> {
  const yaml = readFileSync(path.join(ROOT, 'envoy', 'envoy.yaml'), 'utf8');
  const loaded = loadEnvoyConfig(yaml, {
    listenerPorts: { public: 0, internal: 0 },
    clusterEndpoints: { kvgate_gate: [`127.0.0.1:${extProcPort}`] },
  });
  if (!loaded.ok) throw new Error(`envoy/envoy.yaml does not load in the harness:\n${loaded.error.message}`);
  return startEnvoyHarness(loaded.value);
}

const args = JSON.parse(process.argv[2] ?? '{}') as { gatePort: number; noopPort: number };
const gate = await harnessFor(args.gatePort);
const noop = await harnessFor(args.noopPort);
process.stdout.write(
  `${JSON.stringify({ port: gate.listeners['public']?.port, gate: gate.listeners['public']?.url, noop: noop.listeners['public']?.url })}\n`,
);
const stop = () => {
  void Promise.all([gate.close(), noop.close()]).finally(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
