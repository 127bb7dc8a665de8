/**
 * What a gate needs only once its route table has a pool found by selector: the discovery itself and the Kubernetes
 * client configuration. The gate loads this module on first need (a dynamic import), so a gate with static pools
 * never loads `@kubernetes/client-node` (about 70 MiB of resident memory on Node 20).
 */
import { KubeConfig } from '@kubernetes/client-node';

export { createDiscovery } from './discovery.js';

/** From `discovery.kubeconfig` (local use) or the pod's service account (in a cluster). */
export function kubeConfigFrom(kubeconfigFile: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfigFile !== undefined) kc.loadFromFile(kubeconfigFile);
  else kc.loadFromCluster();
  return kc;
}
