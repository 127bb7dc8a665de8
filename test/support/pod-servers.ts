/**
 * The simulated pods' HTTP servers and the gate's view of their deletion, for the rollout tests
 * (test/e2e/rolling-update.test.ts, test/e2e/gie-rolling-update.test.ts).
 */
import type { Server } from 'node:http';
import type { RunningGate } from '../../src/gate/gate.js';
import type { SimPod } from './deployment-controller.js';

/** One server per running pod, listening on the pod's IP. */
export class PodServers {
  readonly #servers = new Map<string, Server>();

  /** Start `server` on `pod.ip:port` (its containers run). */
  async listen(pod: SimPod, port: number, server: Server): Promise<void> {
    await new Promise<void>((r, j) => server.once('error', j).listen(port, pod.ip, () => r()));
    this.#servers.set(pod.name, server);
  }

  /** The kubelet killed the pod's containers: connections cut, the server closed. False if it had none. */
  async stop(pod: SimPod): Promise<boolean> {
    const s = this.#servers.get(pod.name);
    this.#servers.delete(pod.name);
    if (s === undefined) return false;
    s.closeAllConnections();
    await new Promise((r) => s.close(() => r(undefined)));
    return true;
  }

  async closeAll(): Promise<void> {
    const all = [...this.#servers.values()];
    this.#servers.clear();
    for (const s of all) s.closeAllConnections();
    await Promise.all(all.map((s) => new Promise((r) => s.close(() => r(undefined)))));
  }
}

/**
 * Records in `droppedAt` the moment the gate's discovery first lacks each pod whose deletion started (polled every
 * 5 ms). Returns the stop function.
 */
export function watchDropped(gate: RunningGate, pods: () => Iterable<SimPod>, droppedAt: Map<string, number>): () => void {
  const listed = () => {
    const d = (gate.status() as { discovery: Record<string, { endpoints: Array<{ pod: string }> }> }).discovery;
    return new Set(Object.values(d).flatMap((p) => p.endpoints.map((e) => e.pod)));
  };
  const watcher = setInterval(() => {
    const now = listed();
    for (const p of pods()) if (p.deletingAt !== undefined && !droppedAt.has(p.name) && !now.has(p.name)) droppedAt.set(p.name, Date.now());
  }, 5);
  return () => clearInterval(watcher);
}
