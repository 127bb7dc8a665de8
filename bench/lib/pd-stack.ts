/**
 * The P/D serving stack the sidecar bench drives, as plain values shared by its child-process entries: the worker
 * descriptor (a Llama-3-8B on vLLM 0.11 with NixlConnector), the simulator's latency model, and the key seed the
 * bench uses to mint contracts the way the gate would.
 */
import type { CompatDescriptorInput } from '../../src/compat/descriptor.js';
import { testDescriptor } from '../../testbed/sim/testing.js';

export const PD_MODEL = 'llama-3-8b';
export const PD_KEY_SEED = 'kvgate-bench';

/** The declared (and real) descriptor of both workers: one group, so P -> D transfers are legitimate. */
export function pdDescriptor(): CompatDescriptorInput {
  return testDescriptor();
}

/**
 * Latency model, per simulated worker. 10 ms per generated token (~100 tokens/s per sequence, an 8B model on one
 * H100-class GPU at moderate batch); prefill 0.05 ms per prompt token; KV pull 0.05 ms per 16-token block.
 */
export interface PdLatency {
  readonly prefillMsPerToken: number;
  readonly decodeMsPerToken: number;
  readonly transferMsPerBlock: number;
  readonly handshakeMs: number;
}

export const DEFAULT_PD_LATENCY: PdLatency = { prefillMsPerToken: 0.05, decodeMsPerToken: 10, transferMsPerBlock: 0.05, handshakeMs: 2 };
