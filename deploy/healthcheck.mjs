#!/usr/bin/env node
/**
 * The image's HEALTHCHECK (there is no grpc_health_probe binary in it). Exit 0 healthy, 1 unhealthy, 2 usage error.
 *
 * Default: the gate. grpc.health.v1 Check of the service Envoy's own health check asks for
 * (`envoy.service.ext_proc.v3.ExternalProcessor`) on 127.0.0.1:9002; SERVING is healthy, NOT_SERVING (draining),
 * UNKNOWN, an RPC error or no answer within the timeout are not.
 *
 * Environment (all optional):
 *   KVGATE_HEALTH_ADDR        host:port of the gRPC health service       (default 127.0.0.1:9002)
 *   KVGATE_HEALTH_SERVICE     service name to ask about; '' = the server  (default envoy.service.ext_proc.v3.ExternalProcessor)
 *   KVGATE_HEALTH_URL         check this HTTP URL instead (200 healthy): the sidecar's http://127.0.0.1:9090/healthz,
 *                             the simulator's http://127.0.0.1:<port>/health
 *   KVGATE_HEALTH_TIMEOUT_MS  give up after this long                    (default 2000)
 *
 * Plain ESM with the image's production dependencies (@grpc/grpc-js, grpc-health-check); no build step.
 */
import * as grpc from '@grpc/grpc-js';
import health from 'grpc-health-check';

const env = process.env;
const timeoutMs = Number(env.KVGATE_HEALTH_TIMEOUT_MS ?? '2000');
const url = env.KVGATE_HEALTH_URL ?? '';
const addr = env.KVGATE_HEALTH_ADDR ?? '127.0.0.1:9002';
const service = env.KVGATE_HEALTH_SERVICE ?? 'envoy.service.ext_proc.v3.ExternalProcessor';

/** @param {number} code @param {string} line */
function done(code, line) {
  (code === 0 ? process.stdout : process.stderr).write(`kvgate healthcheck: ${line}\n`);
  process.exit(code);
}

async function checkHttp() {
  let res;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    done(1, `${url}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const body = (await res.text().catch(() => '')).trim().slice(0, 200);
  done(res.status === 200 ? 0 : 1, `${url}: HTTP ${res.status}${body ? ` ${body}` : ''}`);
}

function checkGrpc() {
  const Health = grpc.makeGenericClientConstructor(health.service, 'Health');
  const client = new Health(addr, grpc.credentials.createInsecure());
  client.Check({ service }, { deadline: Date.now() + timeoutMs }, (err, res) => {
    client.close();
    const what = `${addr} ${service === '' ? '(server)' : service}`;
    if (err) done(1, `${what}: ${err.details || err.message}`);
    done(res?.status === 'SERVING' ? 0 : 1, `${what}: ${res?.status ?? 'no status'}`);
  });
}

if (!Number.isFinite(timeoutMs) || timeoutMs <= 0)
  done(2, `KVGATE_HEALTH_TIMEOUT_MS must be a positive number of milliseconds, got ${JSON.stringify(env.KVGATE_HEALTH_TIMEOUT_MS)}`);
if (url !== '') await checkHttp();
else checkGrpc();
