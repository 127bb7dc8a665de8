/**
 * The processes of the sidecar bench, started and stopped together: two simulated vLLM workers (prefill, decode)
 * and a kvgate sidecar in front of each, every one its own process as in a deployment.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { asShipped, jsonLine, spawnNodeServer, type ChildServer } from './child-server.js';
import type { ProfileDir } from './profile-dir.js';

const LIB = path.dirname(fileURLToPath(import.meta.url));

export type Sim = ChildServer<{ port: number; url: string }>;
export type SidecarChild = ChildServer<{ port: number; url: string; endpoint: string; fingerprint: string }>;

/** Four processes, as in a deployment: each worker and each sidecar on its own. */
export interface Stack {
  readonly prefillSim: Sim;
  readonly decodeSim: Sim;
  readonly prefillSidecar: SidecarChild;
  readonly decodeSidecar: SidecarChild;
}

const simReady = jsonLine((v) =>
  typeof v['port'] === 'number' && typeof v['url'] === 'string' ? { port: v['port'], url: v['url'] } : undefined,
);
const sidecarReady = jsonLine((v) =>
  typeof v['port'] === 'number' && typeof v['url'] === 'string' && typeof v['endpoint'] === 'string' && typeof v['fingerprint'] === 'string'
    ? { port: v['port'], url: v['url'], endpoint: v['endpoint'], fingerprint: v['fingerprint'] }
    : undefined,
);

export async function startStack(
  decodeMs: number,
  onTransferFailure: 'fail' | 'recompute' = 'fail',
  profiles?: { prefill: ProfileDir; decode: ProfileDir },
): Promise<Stack> {
  const started: ChildServer<any>[] = [];
  const track = <T extends ChildServer<any>>(c: T): T => {
    started.push(c);
    return c;
  };
  try {
    const latency = JSON.stringify({ decodeMsPerToken: decodeMs });
    const prefillSim = track(await spawnNodeServer('prefill worker (sim)', [path.join(LIB, 'pd-sim-main.js'), latency], {}, simReady));
    const decodeSim = track(await spawnNodeServer('decode worker (sim)', [path.join(LIB, 'pd-sim-main.js'), latency], {}, simReady));
    const sidecar = (role: 'prefill' | 'decode', worker: string) =>
      spawnNodeServer(
        `${role} sidecar`,
        [path.join(LIB, 'pd-sidecar-main.js'), JSON.stringify({ role, worker, onTransferFailure })],
        // The sidecars run as shipped (runtime-flags.ts); the simulated workers stand in for vLLM and keep Node's defaults.
        asShipped(profiles === undefined ? {} : { nodeFlags: profiles[role].nodeFlags }),
        sidecarReady,
      );
    const prefillSidecar = track(await sidecar('prefill', prefillSim.info.url));
    const decodeSidecar = track(await sidecar('decode', decodeSim.info.url));
    return { prefillSim, decodeSim, prefillSidecar, decodeSidecar };
  } catch (e) {
    await Promise.all(started.map((c) => c.stop()));
    throw e;
  }
}

export async function stopStack(stack: Stack): Promise<void> {
  await Promise.all([stack.decodeSidecar.stop(), stack.prefillSidecar.stop()]);
  await Promise.all([stack.decodeSim.stop(), stack.prefillSim.stop()]);
}
