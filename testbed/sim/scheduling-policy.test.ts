/** `schedulingPolicy`: the request check vLLM makes for `--scheduling-policy` (config.ts), on both paths. */
import { afterEach, describe, expect, it } from 'vitest';
import { postJson, simsForTests } from './testing.js';

const sims = simsForTests();
afterEach(sims.closeAll);
const MODEL = '/models/acme-llama-3-8b';

describe('simulated --scheduling-policy', () => {
  it('fcfs (the default) refuses a priority other than 0 with 400; 0 and null pass', async () => {
    const sim = await sims.sim();
    const refused = await postJson(`${sim.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 2, priority: -10 });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body)).toContain('Got priority -10 but Priority scheduling is not enabled.');
    for (const priority of [0, null]) {
      const ok = await postJson(`${sim.url}/v1/chat/completions`, {
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 2,
        priority,
      });
      expect(ok.status).toBe(200);
    }
  });

  it('priority accepts any priority', async () => {
    const sim = await sims.sim({}, { schedulingPolicy: 'priority' });
    const r = await postJson(`${sim.url}/v1/completions`, { model: MODEL, prompt: 'hi', max_tokens: 2, priority: -10 });
    expect(r.status).toBe(200);
  });
});
