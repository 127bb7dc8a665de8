/**
 * Which Envoy message each YAML document under envoy/ holds. A plain document is a bootstrap; Kubernetes
 * manifests hold Envoy config in known places (an Istio EnvoyFilter's `patch.value`, typed by its `applyTo`; a
 * ConfigMap's embedded envoy.yaml); other kinds have no Envoy proto and are skipped with a reason, so a test can
 * say why a document was not checked instead of passing it silently.
 */
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Root } from 'protobufjs';
import { isPlainObject } from './json-forms.js';
import { BOOTSTRAP_TYPE } from './proto-root.js';
import { validateEnvoyValue, withLines } from './validate-envoy-yaml.js';
import { issueAt } from './report.js';
import type { EnvoyValidationReport } from './report.js';
import { parseYamlDocuments } from './yaml-source.js';
import type { PathSegment, YamlDocument, YamlSyntaxError } from './yaml-source.js';

/** Istio EnvoyFilter `applyTo` -> the Envoy message its `patch.value` is merged into or added as. */
export const ISTIO_APPLY_TO_TYPES: Readonly<Record<string, string>> = {
  LISTENER: 'envoy.config.listener.v3.Listener',
  FILTER_CHAIN: 'envoy.config.listener.v3.FilterChain',
  NETWORK_FILTER: 'envoy.config.listener.v3.Filter',
  HTTP_FILTER: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter',
  ROUTE_CONFIGURATION: 'envoy.config.route.v3.RouteConfiguration',
  VIRTUAL_HOST: 'envoy.config.route.v3.VirtualHost',
  HTTP_ROUTE: 'envoy.config.route.v3.Route',
  CLUSTER: 'envoy.config.cluster.v3.Cluster',
  EXTENSION_CONFIG: 'envoy.config.core.v3.TypedExtensionConfig',
  BOOTSTRAP: 'envoy.config.bootstrap.v3.Bootstrap',
  LISTENER_FILTER: 'envoy.config.listener.v3.ListenerFilter',
};

/** Kubernetes kinds that are Envoy-related but carry no Envoy proto message to check. */
const NO_PROTO_KINDS: Readonly<Record<string, string>> = {
  EnvoyExtensionPolicy: 'Envoy Gateway CRD, not an Envoy proto: Envoy Gateway translates it into ext_proc config itself',
  EnvoyPatchPolicy: 'Envoy Gateway JSON patches against generated xDS: the values are fragments, not whole messages',
};

export type EnvoyYamlTarget =
  | {
      readonly kind: 'message';
      readonly label: string;
      readonly typeName: string;
      readonly value: unknown;
      readonly basePath: readonly PathSegment[];
      readonly partial: boolean;
      readonly source: YamlDocument;
    }
  | { readonly kind: 'skip'; readonly label: string; readonly reason: string }
  | { readonly kind: 'invalid'; readonly label: string; readonly segments: readonly PathSegment[]; readonly message: string };

/** What to check in one parsed document. */
export function planEnvoyYamlDocument(source: YamlDocument): EnvoyYamlTarget[] {
  const v = source.value;
  const doc = `document ${String(source.index + 1)}`;
  if (!isPlainObject(v) || typeof v['kind'] !== 'string' || typeof v['apiVersion'] !== 'string') {
    return [bootstrapTarget(`${doc}: Envoy bootstrap`, v, [], source)];
  }
  const kind = v['kind'];
  const apiVersion = v['apiVersion'];
  const label = `${doc}: ${kind} ${nameOf(v)}`;
  if (kind === 'EnvoyFilter' && apiVersion.startsWith('networking.istio.io/')) return planEnvoyFilter(v, label, source);
  if (kind === 'ConfigMap' && apiVersion === 'v1') return planConfigMap(v, label, source);
  const reason = NO_PROTO_KINDS[kind] ?? `Kubernetes ${kind} (${apiVersion}) is not Envoy configuration`;
  return [{ kind: 'skip', label, reason }];
}

function nameOf(v: Record<string, unknown>): string {
  const meta = v['metadata'];
  return isPlainObject(meta) && typeof meta['name'] === 'string' ? meta['name'] : '(unnamed)';
}

function planEnvoyFilter(v: Record<string, unknown>, label: string, source: YamlDocument): EnvoyYamlTarget[] {
  const spec = v['spec'];
  const patches = isPlainObject(spec) ? spec['configPatches'] : undefined;
  if (!Array.isArray(patches)) {
    return [{ kind: 'invalid', label, segments: ['spec', 'configPatches'], message: 'an EnvoyFilter needs a list spec.configPatches' }];
  }
  return patches.map((p: unknown, i): EnvoyYamlTarget => {
    const at: PathSegment[] = ['spec', 'configPatches', i];
    const applyTo = isPlainObject(p) ? p['applyTo'] : undefined;
    const patch = isPlainObject(p) ? p['patch'] : undefined;
    const operation = isPlainObject(patch) ? patch['operation'] : undefined;
    const patchLabel = `${label} patch ${String(i)} (${String(applyTo)} ${String(operation)})`;
    const typeName = typeof applyTo === 'string' ? ISTIO_APPLY_TO_TYPES[applyTo] : undefined;
    if (!typeName) {
      const message = `applyTo must be one of ${Object.keys(ISTIO_APPLY_TO_TYPES).join(', ')}`;
      return { kind: 'invalid', label: patchLabel, segments: [...at, 'applyTo'], message };
    }
    if (operation === 'REMOVE') return { kind: 'skip', label: patchLabel, reason: 'a REMOVE patch carries no value' };
    if (!isPlainObject(patch) || !isPlainObject(patch['value'])) {
      const message = `a ${String(operation)} patch needs a mapping patch.value (a ${typeName})`;
      return { kind: 'invalid', label: patchLabel, segments: [...at, 'patch', 'value'], message };
    }
    // MERGE merges a partial message into one Istio generated: present fields are checked, none are required.
    const basePath = [...at, 'patch', 'value'];
    return { kind: 'message', label: patchLabel, typeName, value: patch['value'], basePath, partial: operation === 'MERGE', source };
  });
}

function planConfigMap(v: Record<string, unknown>, label: string, source: YamlDocument): EnvoyYamlTarget[] {
  const data = v['data'];
  const targets: EnvoyYamlTarget[] = [];
  if (isPlainObject(data)) {
    for (const [key, text] of Object.entries(data)) {
      if (!/\.(ya?ml|json)$/.test(key) || typeof text !== 'string') continue;
      const inner = parseYamlDocuments(text);
      const first = inner.docs[0];
      if (inner.syntaxErrors.length > 0 || !first) {
        const message = `embedded YAML does not parse: ${inner.syntaxErrors[0]?.message ?? 'empty'}`;
        targets.push({ kind: 'invalid', label: `${label} data.${key}`, segments: ['data', key], message });
      } else if (looksLikeBootstrap(first.value)) {
        targets.push(bootstrapTarget(`${label} data.${key}: Envoy bootstrap`, first.value, ['data', key], source));
      }
    }
  }
  return targets.length > 0 ? targets : [{ kind: 'skip', label, reason: 'ConfigMap without an embedded Envoy bootstrap' }];
}

function bootstrapTarget(label: string, value: unknown, basePath: PathSegment[], source: YamlDocument): EnvoyYamlTarget {
  return { kind: 'message', label, typeName: BOOTSTRAP_TYPE, value, basePath, partial: false, source };
}

/**
 * A mapping with the bootstrap's resource keys (a ConfigMap may hold other YAML too: kvgate's own gate.yaml has an
 * `admin:` key of its own, a string, so `admin` alone does not make a bootstrap).
 */
function looksLikeBootstrap(value: unknown): boolean {
  const keys = ['static_resources', 'staticResources', 'dynamic_resources', 'dynamicResources'];
  return isPlainObject(value) && keys.some((k) => k in value);
}

/** A checked target and its findings (skip and invalid targets carry no report). */
export interface EnvoyYamlFileResult {
  readonly syntaxErrors: readonly YamlSyntaxError[];
  readonly targets: readonly { readonly target: EnvoyYamlTarget; readonly report: EnvoyValidationReport }[];
}

/** Plans and validates every document of one YAML file. */
export function validateEnvoyYamlFile(root: Root, text: string): EnvoyYamlFileResult {
  const { docs, syntaxErrors } = parseYamlDocuments(text);
  const targets = docs.flatMap(planEnvoyYamlDocument).map((target) => ({ target, report: reportFor(root, target) }));
  return { syntaxErrors, targets };
}

function reportFor(root: Root, target: EnvoyYamlTarget): EnvoyValidationReport {
  if (target.kind === 'skip') return { errors: [], warnings: [] };
  if (target.kind === 'invalid') return { errors: [issueAt(target.segments, target.message)], warnings: [] };
  const report = validateEnvoyValue(root, target.typeName, target.value, { basePath: target.basePath, partial: target.partial });
  return withLines(report, target.source);
}

/** Every .yaml/.yml file under `dir`, recursively, as paths relative to `dir`, sorted. Empty if `dir` is absent. */
export function findYamlFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    let names: string[];
    try {
      names = readdirSync(path.join(dir, rel));
    } catch {
      return;
    }
    for (const name of names) {
      const relPath = rel === '' ? name : path.join(rel, name);
      if (statSync(path.join(dir, relPath)).isDirectory()) walk(relPath);
      else if (/\.ya?ml$/.test(name)) out.push(relPath);
    }
  };
  walk('');
  return out.sort();
}
