/**
 * Child-process entry: one simulated vLLM worker (its own process, as each vLLM worker is) with the bench's
 * descriptor and the latency model in argv[2] (JSON `PdLatency`, partial). Prints one JSON line
 * `{"port":N,"url":URL}`, then serves until SIGINT/SIGTERM.
 */
import { parseSimConfig } from '../../testbed/sim/config.js';
import { createSimServer } from '../../testbed/sim/server.js';
import { DEFAULT_PD_LATENCY, PD_MODEL, pdDescriptor, type PdLatency } from './pd-stack.js';

const latency = { ...DEFAULT_PD_LATENCY, ...(JSON.parse(process.argv[2] ?? '{}') as Partial<PdLatency>) };
const config = parseSimConfig({
  descriptor: pdDescriptor(),
  sim: { servedModelName: PD_MODEL, maxModelLen: 4096, numGpuBlocks: 8192, maxNumSeqs: 256, latency },
});
if (!config.ok) throw config.error;
const sim = await createSimServer(config.value);
process.stdout.write(`${JSON.stringify({ port: sim.port, url: sim.url })}\n`);
const stop = () => {
  void sim.close().finally(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
