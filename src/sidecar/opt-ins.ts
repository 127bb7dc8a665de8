/**
 * The sidecar settings that leave an unverified worker, an unchecked KV transfer or a forged contract possible, each
 * an explicit opt-in (the defaults are the safe values). One list, so the start warnings, `/status`'s `optIns` and
 * test/safe-defaults.test.ts can never disagree about which settings are loud.
 */
import type { SidecarConfig } from './config.js';
import { NIXL_UNCHECKED } from './config.js';

export interface OptIn {
  /** The setting as written in the config file, with its unsafe value, e.g. `compatMode: lenient`. */
  readonly setting: string;
  /** The `event` field of the start warning. */
  readonly event: string;
  /** More fields for the start warning's log line. */
  readonly fields?: Readonly<Record<string, unknown>>;
  readonly message: string;
}

export function sidecarOptIns(
  config: Pick<SidecarConfig, 'keys' | 'trust' | 'compatMode' | 'nixlSideChannel' | 'onTransferFailure' | 'probe' | 'media'>,
): OptIn[] {
  const out: OptIn[] = [];
  if (config.keys?.devSeed !== undefined)
    out.push({
      setting: 'keys.devSeed',
      event: 'insecure_keys',
      message: 'INSECURE dev keys: anyone who knows the seed can mint contracts; never use --dev-keys in production',
    });
  if (config.trust === 'declared-only')
    out.push({
      setting: 'trust: declared-only',
      event: 'trust_declared_only',
      fields: { probe_generation: config.probe.generation },
      message:
        "trust: declared-only - what no probe can see (the worker's weights, unless a generation canary is recorded and run) is taken from the declaration; /status and every audit line say so",
    });
  if (config.compatMode === 'lenient')
    out.push({
      setting: 'compatMode: lenient',
      event: 'compat_lenient',
      message: 'compatMode: lenient - a transfer whose connector version has no kvgate rules is allowed with a warning instead of refused',
    });
  if (config.nixlSideChannel === NIXL_UNCHECKED)
    out.push({
      setting: 'nixlSideChannel: unchecked',
      event: 'nixl_hash_unchecked',
      message:
        "nixlSideChannel: unchecked - the worker's live NIXL compatibility hash is NOT read; runtime flags that change it " +
        '(hybrid KV cache manager, cross-layer blocks, speculative config, transfer mode) are taken on trust',
    });
  // Recompute serves the request from the decode worker's own prefill when the KV transfer failed: the answer is
  // right, but the prefill leg's attestation no longer vouches for the KV that produced it, and a broken transfer path
  // hides behind slower answers instead of failing.
  if (config.onTransferFailure === 'recompute')
    out.push({
      setting: 'onTransferFailure: recompute',
      event: 'transfer_failure_recompute',
      message:
        'onTransferFailure: recompute - a request whose KV transfer failed is recomputed on the decode worker and served, instead of refused; ' +
        'a broken transfer path shows only in kvgate_sidecar_transfer_failures_total{action="recompute"} and slower answers',
    });
  // The worker fetches client media from these origins from inside the mesh, and in a disaggregated route the prefill
  // and decode workers each fetch it: changing bytes at one URL give the decode worker KV of other media.
  if (config.media.allowedOrigins.length > 0)
    out.push({
      setting: 'media.allowedOrigins',
      event: 'media_origins_allowed',
      fields: { origins: config.media.allowedOrigins },
      message:
        `media.allowedOrigins - the worker fetches client media from ${config.media.allowedOrigins.join(', ')}; ` +
        "pair it with vLLM's --allowed-media-domains and VLLM_MEDIA_URL_ALLOW_REDIRECTS=0, and list only origins whose media never changes at one URL",
    });
  return out;
}
