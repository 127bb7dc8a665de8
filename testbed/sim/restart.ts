import { parseSimConfig, type SimSettingsInput } from './config.js';
import { createSimServer, type SimServer, type SimServerOptions } from './server.js';

/**
 * Stop `old` and start another simulated vLLM on the same ports with `sim` overrides (e.g. `behaveAs`): an in-place
 * upgrade or restart behind a sidecar that has not probed it yet. Earlier `behaveAs` overrides do not carry over
 * unless repeated, and the new process gets a new engine id, as a real vLLM restart does. `descriptor` replaces the
 * old one when given.
 */
export async function restartSimOnSamePorts(
  old: SimServer,
  sim: SimSettingsInput = {},
  opts: SimServerOptions & { descriptor?: unknown } = {},
): Promise<SimServer> {
  await old.close();
  const cfg = parseSimConfig({
    descriptor: opts.descriptor ?? old.config.descriptor,
    sim: {
      ...old.config.sim,
      engineId: undefined,
      behaveAs: undefined,
      port: old.port,
      sideChannelPort: old.sideChannelPort,
      nixlSideChannelPort: old.nixlSideChannelPort,
      ...sim,
    },
  });
  if (!cfg.ok) throw cfg.error;
  // The same ports are bound again at once, and a closed port is not always free at once: zmq releases the side
  // channel's port on its own I/O thread, and under load the HTTP listener's close can trail too. Retry for a bounded
  // while (up to ~3 s), as a supervisor restarting a worker would.
  let started: SimServer | undefined;
  for (let attempt = 0; started === undefined; attempt++) {
    try {
      started = await createSimServer(cfg.value, opts);
    } catch (e) {
      if (attempt >= 60 || !/address already in use|EADDRINUSE/i.test(String((e as Error).message ?? e))) throw e;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  // Let the event loop turn a few times, so keep-alive sockets to the old worker in this process's fetch pool see
  // their close (the fd closes in one turn, the peer reads the FIN in a later one) before anything is sent on them:
  // otherwise the next POST fails with "other side closed". A real restart takes long enough for that.
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setTimeout(resolve, 20));
  return started;
}
