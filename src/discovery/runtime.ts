/**
 * What a gate needs only once its route table has a pool found by selector: the discovery itself and the Kubernetes
 * client configuration. The gate loads this module on first need (a dynamic import), so a gate with static pools
 * never loads `@kubernetes/client-node` (about 70 MiB of resident memory on Node 20).
 */
import { KubeConfig } from '@kubernetes/client-node';

export { createDiscovery } from './discovery.js';

/**
 * From `discovery.kubeconfig` (local use) or the pod's service account (in a cluster). Outside a pod the in-cluster
 * config has no API server to name: client-node 1.4's `KubeConfig.loadFromCluster` (dist/config.js) builds the
 * server URL from KUBERNETES_SERVICE_HOST/PORT unchecked, so every pod watch would fail with a bare "Invalid URL".
 * Say so at start instead, with the setting that fixes it.
 */
export function kubeConfigFrom(kubeconfigFile: string | undefined, env: NodeJS.ProcessEnv = process.env): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfigFile !== undefined) kc.loadFromFile(kubeconfigFile);
  else if (!env['KUBERNETES_SERVICE_HOST'] || !env['KUBERNETES_SERVICE_PORT'])
    throw new Error(
      'pools found by selector (discovery.kubernetes) need the Kubernetes API, but this gate runs outside a pod (KUBERNETES_SERVICE_HOST/PORT are unset) and its config sets no discovery.kubeconfig. Fix: set discovery: { kubeconfig: FILE } in the gate config, or run the gate in the cluster with its service account (deploy/kubernetes/rbac.yaml)',
    );
  else kc.loadFromCluster();
  return kc;
}
