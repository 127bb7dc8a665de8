/**
 * Child-process entry for the no-op ext_proc server, so the floor runs in its own process exactly like the gate
 * (own event loop, own RSS, pinnable to one core). Prints one JSON line `{"port":N}` on stdout, then serves
 * until SIGINT/SIGTERM.
 */
import { startNoopExtProcServer } from './noop-ext-proc.js';

const server = await startNoopExtProcServer(process.argv[2] ?? '127.0.0.1:0');
process.stdout.write(`${JSON.stringify({ port: server.port })}\n`);
const stop = () => {
  server.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
