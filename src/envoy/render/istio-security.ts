/**
 * Who may talk to whom on Istio (docs/security.md, "Trust boundaries"): STRICT mesh mTLS, AuthorizationPolicies for
 * the gate and the workers, and a NetworkPolicy for the internal gateway. Nothing here depends on the route table;
 * it is rendered so that every file in envoy/istio/ comes from one command and one namespace.
 */
import type { RenderInput } from './input.js';
import { type RenderSettings, renderFlags } from './settings.js';
import { header } from './text.js';

export function renderIstioSecurity(_input: RenderInput, s: RenderSettings): string {
  const ns = s.namespace;
  const head = header(renderFlags('istio-security', s), [
    `kvgate on Istio: who may talk to whom (docs/security.md, "Trust boundaries"). EXAMPLE: adjust the namespaces and`,
    `service accounts to yours. Service accounts: the gateways' are their helm release names (kvgate-public,`,
    `kvgate-internal); the gate's and the workers' are in deploy/kubernetes/ (kvgate-gate, kvgate-prefill, kvgate-decode).`,
    '',
    `These kinds have no Envoy proto; the static check lists them as not checked.`,
    '',
    `mTLS between every workload of the namespace (gateways -> gate, gateways -> workers), with one exception: the`,
    `gate's status polls go to each worker's pod IP, which Istio sends without mTLS (see kvgate-workers below).`,
    `vLLM's NIXL side channel (5600) and UCX's TCP transfer ports (UCX_TCP_PORT_RANGE, 5700-5731 in`,
    `deploy/kubernetes/workers.yaml) are excluded from the proxies by the worker pods' annotations and stay outside.`,
  ]);
  return `${head.join('\n')}\napiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: ${ns}
spec:
  mtls: { mode: STRICT }
---
# The gate's admin port (/metrics, /status) also in plaintext, for a Prometheus outside the mesh (scope it with
# deploy/kubernetes/network-policies.yaml). Port-level settings need a workload selector.
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: kvgate-gate-admin
  namespace: ${ns}
spec:
  selector:
    matchLabels: { app.kubernetes.io/name: kvgate-gate }
  mtls: { mode: STRICT }
  portLevelMtls:
    9003: { mode: PERMISSIVE }
---
# The workers: STRICT, except the sidecar port 9090, PERMISSIVE. The gate finds workers by pod and polls each
# sidecar's status at its pod IP. An Istio sidecar sends traffic to a pod IP through its PassthroughCluster, without
# mTLS: a Service's virtual host matches the Service's names and ClusterIP, not its pods' IPs (istio/istio
# pilot/pkg/networking/core/httproute.go @86c9f01f; the known limitation istio/istio#37431). STRICT on 9090 would
# refuse every poll and leave every worker unverified. Requests on 9090 stay mTLS-only all the same: the
# AuthorizationPolicy below admits POSTs only from the gateways' principals, which a plaintext connection lacks.
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: kvgate-workers
  namespace: ${ns}
spec:
  selector:
    matchLabels: { app.kubernetes.io/name: vllm }
  mtls: { mode: STRICT }
  portLevelMtls:
    9090: { mode: PERMISSIVE }
---
# The gate: ext_proc only from the two kvgate gateways, each for its own listener role. Behind Istio the gate runs
# with insecure: true (its proxy terminates mTLS) and reads the role from the stream's x-kvgate-listener metadata,
# an HTTP/2 header to this policy: so the public gateway's principal may send only "public", the internal
# gateway's only "internal", and nobody else may open a stream (docs/security.md, "On Istio").
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: kvgate-gate
  namespace: ${ns}
spec:
  selector:
    matchLabels: { app.kubernetes.io/name: kvgate-gate }
  action: ALLOW
  rules:
  - from:
    - source: { principals: [cluster.local/ns/${ns}/sa/kvgate-public] }
    to:
    - operation: { ports: ["9002"], paths: [/envoy.service.ext_proc.v3.ExternalProcessor/Process] }
    when:
    - { key: "request.headers[x-kvgate-listener]", values: [public] }
  - from:
    - source: { principals: [cluster.local/ns/${ns}/sa/kvgate-internal] }
    to:
    - operation: { ports: ["9002"], paths: [/envoy.service.ext_proc.v3.ExternalProcessor/Process] }
    when:
    - { key: "request.headers[x-kvgate-listener]", values: [internal] }
  - from:
    - source: { principals: [cluster.local/ns/${ns}/sa/kvgate-public, cluster.local/ns/${ns}/sa/kvgate-internal] }
    to:
    - operation: { ports: ["9002"], paths: [/grpc.health.v1.Health/Check, /grpc.health.v1.Health/Watch] }
  - to:
    - operation: { ports: ["9003"], methods: [GET] }
---
# The workers' sidecars: requests from the gateways, status polls from the gate. Nothing else reaches a worker,
# and vLLM itself listens on loopback only. The status read carries no principal (plaintext, see kvgate-workers
# above): who may connect to 9090 at all is deploy/kubernetes/network-policies.yaml's rule (the gate and the
# gateways), and the gate checks each answer's pod UID against the pod it discovered.
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: kvgate-workers
  namespace: ${ns}
spec:
  selector:
    matchLabels: { app.kubernetes.io/name: vllm }
  action: ALLOW
  rules:
  - from:
    - source: { principals: [cluster.local/ns/${ns}/sa/kvgate-public, cluster.local/ns/${ns}/sa/kvgate-internal] }
    to:
    - operation: { ports: ["9090"], methods: [POST], paths: [/v1/completions, /v1/chat/completions] }
  - to:
    - operation: { ports: ["9090"], methods: [GET], paths: [/kvgate/v1/status] }
  # Metrics for a Prometheus inside the mesh, on the sidecar's metrics-only port (under STRICT mTLS only mesh
  # workloads can connect at all). Drain and undrain listen on loopback (9092) and never reach the proxy.
  - to:
    - operation: { ports: ["9091"], methods: [GET], paths: [/metrics] }
---
# The internal gateway's own listener is plain HTTP inside the cluster (the Gateway server above terminates no
# Istio mTLS), so an AuthorizationPolicy there would see no caller identity. The network decides instead: only
# decode worker pods reach it.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: kvgate-internal-gateway
  namespace: ${ns}
spec:
  podSelector:
    matchLabels: { istio: kvgate-internal }
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: { matchLabels: { app.kubernetes.io/name: vllm, kvgate.io/role: decode } }
  - ports: [{ port: 15021 }]     # the gateway's own readiness port, for the kubelet\n`;
}
