/**
 * The gate's admin port closes connections that never send a request (src/silent-connections.ts): the monitoring
 * namespace reaches it, and Node would keep a silent socket open for ever.
 */
import net from 'node:net';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { startAdminServer } from './admin-http.js';
import { rawGet } from '../../test/support/raw-http.js';

describe('gate admin port', () => {
  it('closes a connection that sends no request, and serves one that does', async () => {
    const admin = await startAdminServer({
      listen: '127.0.0.1:0',
      registry: new Registry(),
      status: () => ({}),
      serving: () => true,
      firstRequestTimeoutMs: 100,
    });
    try {
      const silent = net.connect(admin.port, '127.0.0.1');
      silent.on('error', () => undefined);
      await new Promise<void>((resolve) => silent.on('close', () => resolve()));
      expect(silent.destroyed).toBe(true);
      const answer = await rawGet(admin.port, '/healthz');
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      await admin.close();
    }
  });
});
