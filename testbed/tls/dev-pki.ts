/**
 * A throwaway PKI for the local topology and the tests: a CA, the gate's server certificate, and one client
 * certificate per Envoy listener role, each with a SPIFFE URI SAN (as Istio issues them) and a DNS SAN. EC P-256
 * keeps generation fast. Written as PEM files to a folder, laid out like the Secret `deploy/kubernetes` mounts at
 * /etc/kvgate/tls, so the shipped envoy.yaml and gate config resolve against it. Never for production.
 */
import { webcrypto } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import './reflect-shim.js';
import * as x509 from '@peculiar/x509';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** The folder the shipped configs name; a dev PKI maps it to its own folder. */
export const TLS_DIR = '/etc/kvgate/tls';

/** Identities of the dev certificates (what the gate's `tls.roles` lists). */
export const DEV_IDENTITIES = {
  gate: { dns: 'kvgate-gate.kvgate.svc', spiffe: 'spiffe://cluster.local/ns/kvgate/sa/kvgate-gate' },
  public: { dns: 'envoy-public.kvgate.svc', spiffe: 'spiffe://cluster.local/ns/kvgate/sa/kvgate-envoy-public' },
  internal: { dns: 'envoy-internal.kvgate.svc', spiffe: 'spiffe://cluster.local/ns/kvgate/sa/kvgate-envoy-internal' },
} as const;

export interface DevPki {
  readonly dir: string;
  /** File paths in `dir`. */
  readonly files: {
    readonly ca: string;
    readonly gateCert: string;
    readonly gateKey: string;
    readonly publicCert: string;
    readonly publicKey: string;
    readonly internalCert: string;
    readonly internalKey: string;
  };
  /** Issue another client certificate from the same CA (e.g. an in-mesh workload that is in no allowlist). */
  issueClient(name: string, sans: { dns?: string; spiffe?: string }): Promise<{ cert: Buffer; key: Buffer }>;
  /** The CA certificate (PEM). */
  readonly caPem: string;
}

async function pemKey(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  return `-----BEGIN PRIVATE KEY-----\n${der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '')}\n-----END PRIVATE KEY-----\n`;
}

async function keys(): Promise<CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
}

interface Issuer {
  readonly cert: x509.X509Certificate;
  readonly keys: CryptoKeyPair;
}

/** A self-signed CA. */
export async function createCa(name = 'kvgate dev CA'): Promise<Issuer> {
  const k = await keys();
  const notBefore = new Date(Date.now() - 60_000);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: `CN=${name}`,
    keys: k,
    notBefore,
    notAfter: new Date(notBefore.getTime() + 7 * 86_400_000),
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
    ],
  });
  return { cert, keys: k };
}

/** A leaf certificate signed by `ca`, for a server or a client, with the given SANs. */
export async function issueLeaf(
  ca: Issuer,
  cn: string,
  usage: 'server' | 'client',
  sans: { dns?: string; spiffe?: string; ip?: string },
): Promise<{ cert: string; key: string }> {
  const k = await keys();
  const names: x509.JsonGeneralNames = [];
  if (sans.dns !== undefined) names.push({ type: 'dns', value: sans.dns });
  if (sans.spiffe !== undefined) names.push({ type: 'url', value: sans.spiffe });
  if (sans.ip !== undefined) names.push({ type: 'ip', value: sans.ip });
  const notBefore = new Date(Date.now() - 60_000);
  const cert = await x509.X509CertificateGenerator.create({
    subject: `CN=${cn}`,
    issuer: ca.cert.subject,
    publicKey: k.publicKey,
    signingKey: ca.keys.privateKey,
    notBefore,
    notAfter: new Date(notBefore.getTime() + 7 * 86_400_000),
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth]),
      new x509.SubjectAlternativeNameExtension(names),
      await x509.AuthorityKeyIdentifierExtension.create(ca.keys.publicKey),
    ],
  });
  return { cert: cert.toString('pem'), key: await pemKey(k.privateKey) };
}

/** Create the dev PKI in `dir`: ca.crt, gate.crt/key, envoy-public.crt/key, envoy-internal.crt/key. */
export async function createDevPki(dir: string): Promise<DevPki> {
  await mkdir(dir, { recursive: true });
  const ca = await createCa();
  const gate = await issueLeaf(ca, 'kvgate-gate', 'server', { ...DEV_IDENTITIES.gate, ip: '127.0.0.1' });
  const pub = await issueLeaf(ca, 'envoy-public', 'client', DEV_IDENTITIES.public);
  const int = await issueLeaf(ca, 'envoy-internal', 'client', DEV_IDENTITIES.internal);
  const files = {
    ca: path.join(dir, 'ca.crt'),
    gateCert: path.join(dir, 'gate.crt'),
    gateKey: path.join(dir, 'gate.key'),
    publicCert: path.join(dir, 'envoy-public.crt'),
    publicKey: path.join(dir, 'envoy-public.key'),
    internalCert: path.join(dir, 'envoy-internal.crt'),
    internalKey: path.join(dir, 'envoy-internal.key'),
  };
  const caPem = ca.cert.toString('pem');
  await Promise.all([
    writeFile(files.ca, caPem),
    writeFile(files.gateCert, gate.cert),
    writeFile(files.gateKey, gate.key, { mode: 0o600 }),
    writeFile(files.publicCert, pub.cert),
    writeFile(files.publicKey, pub.key, { mode: 0o600 }),
    writeFile(files.internalCert, int.cert),
    writeFile(files.internalKey, int.key, { mode: 0o600 }),
  ]);
  return {
    dir,
    files,
    caPem,
    issueClient: async (name, sans) => {
      const leaf = await issueLeaf(ca, name, 'client', sans);
      return { cert: Buffer.from(leaf.cert), key: Buffer.from(leaf.key) };
    },
  };
}

/** The gate's `tls` block for this PKI: the public role is Envoy's public listener, internal its internal one. */
export function devGateTls(pki: DevPki): { cert: string; key: string; clientCa: string; roles: { public: string[]; internal: string[] } } {
  return {
    cert: pki.files.gateCert,
    key: pki.files.gateKey,
    clientCa: pki.files.ca,
    roles: { public: [DEV_IDENTITIES.public.spiffe], internal: [DEV_IDENTITIES.internal.spiffe] },
  };
}

/**
 * Harness overrides for the shipped envoy/envoy.yaml against the gate(s) at `gateAddress` using this PKI: its
 * /etc/kvgate/tls files resolve to the PKI's folder, and both gate clusters (the public listener's and the
 * internal listener's, each presenting its own client certificate) point at the gate.
 */
export function shippedEnvoyTls(
  pki: DevPki,
  gateAddress: string | readonly string[],
): { fileRoots: Record<string, string>; clusterEndpoints: Record<string, string[]> } {
  const gates = typeof gateAddress === 'string' ? [gateAddress] : [...gateAddress];
  return { fileRoots: { [TLS_DIR]: pki.dir }, clusterEndpoints: { kvgate_gate: gates, kvgate_gate_internal: gates } };
}

/** The gate server's `transport` (src/gate/server.ts) for this PKI, for tests that start the gRPC server alone. */
export async function devGateTransport(
  pki: DevPki,
): Promise<{ kind: 'mtls'; cert: Buffer; key: Buffer; clientCa: Buffer; roles: { public: string[]; internal: string[] } }> {
  const t = devGateTls(pki);
  return { kind: 'mtls', cert: await readFile(t.cert), key: await readFile(t.key), clientCa: await readFile(t.clientCa), roles: t.roles };
}
