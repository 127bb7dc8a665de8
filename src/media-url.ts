/**
 * Media URLs a client names in chat content parts. The vLLM worker that renders the prompt fetches such a URL itself,
 * from inside the mesh, and in a disaggregated route both the prefill and the decode worker render it, so both fetch.
 * Pure: the gate (through the route table's `media`) and both sidecars (through their own config's `media`) call
 * `mediaUrlRefusal` with the origins they allow; by default none.
 *
 * What vLLM does with such a URL (vllm-project/vllm `vllm/multimodal/media/connector.py` @02ba96d7
 * `MediaConnector.load_from_url`; before it `vllm/multimodal/utils.py` @01ee07ab):
 * - a URL whose first five characters are `data:` in any case is decoded from the request itself (base64 only):
 *   nothing is fetched, so kvgate allows it (the contract digests its bytes with the prompt);
 * - a scheme starting with `http` is fetched over the network (`VLLM_IMAGE_FETCH_TIMEOUT` 5 s, `..._VIDEO_...` 30 s,
 *   `..._AUDIO_...` 10 s by default), following redirects unless `VLLM_MEDIA_URL_ALLOW_REDIRECTS=0`;
 *   `--allowed-media-domains` compares the parsed host name exactly, and is empty (everything allowed) by default;
 * - `file:` reads the worker's own filesystem under `--allowed-local-media-path` (refused there without it).
 * Its parsers differ by version: `urllib.parse.urlparse` @01ee07ab, urllib3's `parse_url` @02ba96d7, and then the
 * HTTP client's own (requests via urllib3, aiohttp via yarl). Where those and the WHATWG parser Node has disagree, a
 * check done with one parser says nothing about the host the other fetches: Python's urlsplit does not end the host at
 * a backslash, and neither does urllib3 1.x (urllib3/urllib3 `src/urllib3/util/url.py` @9167b581: `URI_RE` ends the
 * authority at `/?#` only), while WHATWG and later urllib3 copies read one as `/`; the parsers strip or drop whitespace
 * and control characters in different places; WHATWG and later urllib3 decode percent-escapes in a host, urlsplit does
 * not; WHATWG reads `0x7f.1` or `2130706433` as an IPv4 address; and non-ASCII hosts map by UTS 46 (WHATWG), IDNA 2003
 * (Python's `idna` codec) or IDNA 2008 (the `idna` package urllib3 calls). So the check does not parse leniently at all: it takes only the
 * narrow spelling every one of those parsers reads the same way (printable ASCII without a backslash; a lower-case
 * `https://` or `http://`; a host of letters, digits, `-` and `.`; an optional decimal port; no userinfo, no percent
 * sign, no brackets) and refuses everything else as ambiguous.
 */
import { quoteClientValue } from './json-limits.js';

/** The origins whose media a worker may fetch for a client. Empty (the default): no URL is fetched for a client. */
export interface MediaPolicy {
  /** `https://host` or `https://host:port` (`http://` only where an entry says so), compared exactly. */
  readonly allowedOrigins: readonly string[];
}

/** No origin: every media URL but `data:` is refused. */
export const NO_MEDIA_ORIGINS: MediaPolicy = Object.freeze({ allowedOrigins: Object.freeze([]) as readonly string[] });

/** A host name's labels (RFC 1123): letters, digits and inner hyphens, 1-63 characters, lower-cased before the test. */
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * WHATWG's "ends in a number" (its host parser then reads the whole host as IPv4, `0x7f.1` as 127.0.0.1): a last label
 * of digits, or of `0x` and hex digits.
 */
const NUMERIC_LABEL = /^(?:[0-9]+|0x[0-9a-f]*)$/;

/** Where the authority ends in every parser kvgate has to agree with, once backslashes are refused. */
const AUTHORITY_END = /[/?#]/;

/** Why `host` (lower-cased, no port) is no host name kvgate would let a worker fetch from, or undefined. */
function hostProblem(host: string): string | undefined {
  if (host === '') return 'names no host';
  if (host.length > 253) return 'names a host longer than 253 characters';
  const labels = host.split('.');
  if (labels.at(-1) === '') return 'names a host ending in "." (a spelling allowlists compare differently)';
  if (NUMERIC_LABEL.test(labels.at(-1)!)) {
    return 'names an IP address, not a host name (an IP literal can reach loopback, link-local or cluster-internal addresses, and URL parsers read its spellings differently)';
  }
  if (!labels.every((l) => LABEL.test(l))) return 'names a host that is not letters, digits, "-" and "." only';
  if (host === 'localhost' || host.endsWith('.localhost')) return 'names localhost';
  return undefined;
}

/** The parts of a URL in the one spelling kvgate accepts, or why it is not in it. */
type Parsed = { ok: true; scheme: 'https' | 'http'; host: string; port: string } | { ok: false; why: string };

function parseStrict(url: string): Parsed {
  for (let i = 0; i < url.length; i++) {
    const c = url.charCodeAt(i);
    // Whitespace and control characters (stripped by WHATWG at the ends and removed as tab/newline anywhere; stripped
    // at the start by Python's urlsplit, kept by urllib3), DEL, non-ASCII (IDNA 2003 vs UTS 46, or percent-encoded by
    // one parser and not the other) and the backslash (a path separator to WHATWG, part of the host to urlsplit).
    if (c <= 0x20 || c >= 0x7f || c === 0x5c) {
      return {
        ok: false,
        why: 'holds whitespace, a control or non-ASCII character or a backslash, which URL parsers read differently (percent-encode them in the path, or send the media inline as a data: URL)',
      };
    }
  }
  const scheme = url.startsWith('https://') ? 'https' : url.startsWith('http://') ? 'http' : undefined;
  if (scheme === undefined) {
    const named = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase();
    if (named === 'file') {
      return {
        ok: false,
        why: 'is a file: URL, which the worker would read from its own filesystem (and the prefill and decode workers each from theirs); send the media inline as a data: URL',
      };
    }
    if (named === 'http' || named === 'https') {
      return {
        ok: false,
        why: `must start with "${named}://" exactly (lower case, two slashes): other spellings are read differently by URL parsers`,
      };
    }
    return { ok: false, why: 'is neither a data: URL nor an https:// URL' };
  }
  const rest = url.slice(scheme.length + 3);
  const end = rest.search(AUTHORITY_END);
  const authority = end === -1 ? rest : rest.slice(0, end);
  if (authority.includes('@')) return { ok: false, why: 'carries a user name or password ("@" before the host); remove it' };
  if (authority.includes('%'))
    return { ok: false, why: 'percent-encodes its host, which URL parsers decode differently; write the host as it is' };
  if (authority.includes('[') || authority.includes(']')) {
    return { ok: false, why: 'names an IP address, not a host name (an IPv6 literal can reach loopback or link-local addresses)' };
  }
  const colon = authority.indexOf(':');
  const host = (colon === -1 ? authority : authority.slice(0, colon)).toLowerCase();
  const port = colon === -1 ? '' : authority.slice(colon + 1);
  if (colon !== -1 && !/^[1-9][0-9]{0,4}$/.test(port)) {
    return { ok: false, why: 'has a port that is not a number from 1 to 65535 without leading zeros' };
  }
  if (port !== '' && Number(port) > 65535) return { ok: false, why: 'has a port above 65535' };
  const bad = hostProblem(host);
  return bad === undefined ? { ok: true, scheme, host, port } : { ok: false, why: bad };
}

/** True when vLLM decodes `url` from the request itself instead of fetching it (`url[:5].lower() == "data:"`). */
function isDataUrl(url: string): boolean {
  return url.length >= 5 && url.slice(0, 5).toLowerCase() === 'data:';
}

/**
 * Why a worker must not fetch `url` for a client, or undefined when it may (a `data:` URL, an empty one, which vLLM
 * fetches nothing for, or one whose origin `policy` lists). The reason is a phrase after "its URL": it quotes the
 * origin at most, never the path or query (signed URLs carry credentials there).
 */
export function mediaUrlRefusal(url: string, policy: MediaPolicy): string | undefined {
  if (url === '' || isDataUrl(url)) return undefined;
  const parsed = parseStrict(url);
  if (!parsed.ok) return parsed.why;
  if ((parsed.scheme === 'https' && parsed.port === '443') || (parsed.scheme === 'http' && parsed.port === '80')) {
    return `names its scheme's default port (:${parsed.port}), a spelling allowlists compare differently; remove the port`;
  }
  const origin = `${parsed.scheme}://${parsed.host}${parsed.port === '' ? '' : `:${parsed.port}`}`;
  if (policy.allowedOrigins.includes(origin)) return undefined;
  return `is on ${quoteClientValue(origin)}, which is not one of this gateway's media.allowedOrigins (${
    policy.allowedOrigins.length === 0 ? 'none: the worker fetches no media for a client' : policy.allowedOrigins.join(', ')
  })`;
}

/**
 * Why `entry` is no origin a route table or sidecar config may allow, or undefined. Only the canonical spelling the
 * request check builds (`https://host` or `https://host:port`, lower case, no default port, no path), so an entry
 * matches exactly the URLs it reads as allowed; IP literals and localhost never.
 */
export function mediaOriginProblem(entry: string): string | undefined {
  const parsed = parseStrict(entry);
  if (!parsed.ok) return `"${entry}" ${parsed.why}`;
  const canonical = `${parsed.scheme}://${parsed.host}${parsed.port === '' ? '' : `:${parsed.port}`}`;
  if (entry !== canonical) {
    return `"${entry}" is not an origin: write scheme://host[:port] in lower case, without a path, query or trailing "/" (e.g. ${canonical})`;
  }
  if ((parsed.scheme === 'https' && parsed.port === '443') || (parsed.scheme === 'http' && parsed.port === '80')) {
    return `"${entry}" names its scheme's default port; write ${parsed.scheme}://${parsed.host}`;
  }
  return undefined;
}
