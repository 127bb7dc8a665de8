/**
 * An upstream cluster's `transport_socket: envoy.transport_sockets.tls` (UpstreamTlsContext), as Envoy applies it
 * to the connections it opens (envoyproxy/envoy, api/envoy/extensions/transport_sockets/tls/v3/tls.proto and
 * common.proto; behaviour in source/common/tls/cert_validator/default_validator.cc and
 * source/common/tls/client_context_impl.cc, main 2026):
 * - `common_tls_context.tls_certificates[0]`: the client certificate Envoy presents (Envoy supports one per context
 *   for a client; the harness reads the first).
 * - `validation_context.trusted_ca`: the server's chain must verify against it. Without a validation context Envoy
 *   does not verify the server certificate at all; the harness does the same.
 * - `validation_context.match_typed_subject_alt_names`: when present, the server certificate must carry one SAN of
 *   the given type (DNS, URI) equal to an `exact` matcher. Envoy checks no hostname otherwise.
 * - `sni`: sent as the TLS server name; without it Envoy sends none (auto_sni is not modelled).
 * Only `filename` data sources are read (no inline_string), from the file system, through the loader's file roots.
 */
import type { ConfigReader } from './config-reader.js';

export const TLS_SOCKET = 'envoy.transport_sockets.tls';
const UPSTREAM_TLS_TYPE = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';

export interface SanMatcher {
  readonly type: 'DNS' | 'URI';
  readonly exact: string;
}

export interface UpstreamTlsConfig {
  readonly sni: string | undefined;
  readonly certFile: string | undefined;
  readonly keyFile: string | undefined;
  readonly caFile: string | undefined;
  readonly sanMatchers: readonly SanMatcher[];
}

function filename(r: ConfigReader, value: unknown, path: string): string | undefined {
  if (value === undefined) return undefined;
  const o = r.obj(value, path, ['filename']);
  return r.requiredStr(o['filename'], `${path}.filename`);
}

export function readTransportSocket(r: ConfigReader, value: unknown, path: string): UpstreamTlsConfig | undefined {
  if (value === undefined) return undefined;
  const o = r.obj(value, path, ['name', 'typed_config']);
  const name = r.requiredStr(o['name'], `${path}.name`);
  if (name !== undefined && name !== TLS_SOCKET) {
    r.issue(`${path}.name`, `"${name}" is unsupported by the kvgate harness (only ${TLS_SOCKET})`);
    return undefined;
  }
  const tp = `${path}.typed_config`;
  const tc = r.typed(o['typed_config'] ?? {}, tp, UPSTREAM_TLS_TYPE, ['sni', 'common_tls_context']);
  const cp = `${tp}.common_tls_context`;
  const ctx = r.obj(tc['common_tls_context'] ?? {}, cp, ['alpn_protocols', 'tls_certificates', 'validation_context']);
  const certs = r.arr(ctx['tls_certificates'] ?? [], `${cp}.tls_certificates`);
  const first = certs[0] === undefined ? {} : r.obj(certs[0], `${cp}.tls_certificates[0]`, ['certificate_chain', 'private_key']);
  const vp = `${cp}.validation_context`;
  const vc =
    ctx['validation_context'] === undefined
      ? undefined
      : r.obj(ctx['validation_context'], vp, ['trusted_ca', 'match_typed_subject_alt_names']);
  const sanMatchers: SanMatcher[] = [];
  r.arr(vc?.['match_typed_subject_alt_names'] ?? [], `${vp}.match_typed_subject_alt_names`).forEach((m, i) => {
    const mp = `${vp}.match_typed_subject_alt_names[${i}]`;
    const mo = r.obj(m, mp, ['san_type', 'matcher']);
    const type = r.enumOf<'DNS' | 'URI'>(mo['san_type'], `${mp}.san_type`, ['DNS', 'URI'], 'DNS');
    const exact = r.requiredStr(r.obj(mo['matcher'] ?? {}, `${mp}.matcher`, ['exact'])['exact'], `${mp}.matcher.exact`);
    if (exact !== undefined) sanMatchers.push({ type, exact });
  });
  return {
    sni: r.str(tc['sni'], `${tp}.sni`),
    certFile: filename(r, first['certificate_chain'], `${cp}.tls_certificates[0].certificate_chain`),
    keyFile: filename(r, first['private_key'], `${cp}.tls_certificates[0].private_key`),
    caFile: vc === undefined ? undefined : filename(r, vc['trusted_ca'], `${vp}.trusted_ca`),
    sanMatchers,
  };
}

/** Map a path through the loader's file roots (`/etc/kvgate/tls` -> a test's folder), longest prefix first. */
export function mapFile(file: string, roots: Readonly<Record<string, string>>): string {
  const prefix = Object.keys(roots)
    .filter((p) => file === p || file.startsWith(p.endsWith('/') ? p : `${p}/`))
    .sort((a, b) => b.length - a.length)[0];
  return prefix === undefined ? file : `${roots[prefix]}${file.slice(prefix.length)}`;
}

/**
 * Node's `subjectaltname` entries of one type (`DNS`, `URI`), JSON-quoted values decoded.
 */
export function sansOf(subjectaltname: string | undefined, type: 'DNS' | 'URI'): string[] {
  const out: string[] = [];
  const re = /(?:^|, )([A-Za-z ]+):("(?:[^"\\]|\\.)*"|[^,]*)/g;
  for (const m of (subjectaltname ?? '').matchAll(re)) {
    if (m[1] !== type) continue;
    const raw = m[2] ?? '';
    out.push(raw.startsWith('"') ? (JSON.parse(raw) as string) : raw);
  }
  return out;
}
