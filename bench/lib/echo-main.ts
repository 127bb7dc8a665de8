/**
 * Child-process entry for the echo upstreams: argv[2..] are loopback addresses (127.0.0.2 ...). Prints one JSON
 * line `{"port":N}` once every address listens on that port, then serves until SIGINT/SIGTERM.
 */
import { startEchoUpstreams } from './echo-upstream.js';

const echo = await startEchoUpstreams(process.argv.slice(2));
process.stdout.write(`${JSON.stringify({ port: echo.port })}\n`);
const stop = () => {
  void echo.close().finally(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
