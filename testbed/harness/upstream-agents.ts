/**
 * The upstream connection pools: HTTP/1.1 keep-alive, one pool per cluster that sets `idle_timeout`, one shared pool
 * for the rest. Envoy closes an upstream connection that has been idle for the cluster's
 * `common_http_protocol_options.idle_timeout` (envoyproxy/envoy v1.36, source/common/http/conn_pool_base.cc: an
 * active client's idle timer starts when it has no stream and closes it when it fires); without one it keeps the
 * connection for an hour, which a test never reaches, so the shared pool keeps its connections until the upstream
 * closes them.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { ClusterConfig } from './envoy-config-types.js';

export interface UpstreamAgents {
  agentFor(cluster: ClusterConfig): http.Agent;
  destroy(): void;
}

export function createUpstreamAgents(): UpstreamAgents {
  const shared = new http.Agent({ keepAlive: true });
  const perCluster = new Map<string, http.Agent>();
  return {
    agentFor(cluster) {
      const idleMs = cluster.idleTimeoutMs;
      if (idleMs === undefined) return shared;
      let agent = perCluster.get(cluster.name);
      if (agent === undefined) {
        agent = idleClosingAgent(idleMs);
        perCluster.set(cluster.name, agent);
      }
      return agent;
    },
    destroy() {
      shared.destroy();
      for (const a of perCluster.values()) a.destroy();
    },
  };
}

/** A keep-alive agent that closes a connection once it has been free for `idleMs`. */
function idleClosingAgent(idleMs: number): http.Agent {
  const agent = new http.Agent({ keepAlive: true });
  const timers = new WeakMap<Socket, NodeJS.Timeout>();
  // Registered after the agent's own 'free' handler, which has just put the socket in the free list.
  agent.on('free', (socket: Socket) => {
    clearTimeout(timers.get(socket));
    const timer = setTimeout(() => {
      const free = Object.values(agent.freeSockets).some((list) => list?.includes(socket));
      if (free) socket.destroy(); // still idle: Envoy's idle timer fired
    }, idleMs);
    timer.unref();
    timers.set(socket, timer);
  });
  return agent;
}
