/**
 * The canary digests a simulated worker of a descriptor answers, measured the way an operator records them
 * (`measureCanaries`, the code behind `kvgate fingerprint --worker` and `kvgate verify --record`): a simulator is
 * started on loopback, probed under the model name the sidecar would use (the adapter's, when the descriptor names
 * one), and closed. Test fixtures carry digests computed here, so "recorded" means recorded from the simulator.
 */
import type { CompatDescriptorInput } from '../../src/compat/descriptor.js';
import type { CanaryDigests } from '../../src/sidecar/canaries.js';
import { measureCanaries } from '../../src/sidecar/probe.js';
import { parseSimConfig } from './config.js';
import { createSimServer } from './server.js';

/** Start a simulator of `descriptor`, measure its three canary digests, stop it. Throws when one cannot be measured. */
export async function simCanaryDigests(descriptor: CompatDescriptorInput, servedModelName?: string): Promise<Required<CanaryDigests>> {
  const cfg = parseSimConfig({
    descriptor,
    sim: { maxModelLen: 2048, numGpuBlocks: 512, ...(servedModelName ? { servedModelName } : {}) },
  });
  if (!cfg.ok) throw cfg.error;
  const sim = await createSimServer(cfg.value, {});
  try {
    const adapter = cfg.value.descriptor.adapter;
    const m = await measureCanaries(sim.url, adapter === null ? {} : { model: adapter.id });
    const { tokenizer, chatTemplate, generation } = m.digests;
    if (tokenizer === undefined || chatTemplate === undefined || generation === undefined) {
      throw new Error(`the simulator answered no digest for ${Object.keys(m.errors).join(', ')}: ${JSON.stringify(m.errors)}`);
    }
    return { tokenizer, chatTemplate, generation };
  } finally {
    await sim.close();
  }
}
