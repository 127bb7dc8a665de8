import { describe, expect, it } from 'vitest';
import { type MediaPolicy, mediaOriginProblem, mediaUrlRefusal, NO_MEDIA_ORIGINS } from './media-url.js';

const ALLOWED: MediaPolicy = { allowedOrigins: ['https://media.example.com', 'https://cdn.example.com:8443', 'http://cache.media.svc'] };

describe('mediaUrlRefusal', () => {
  it('allows data: URLs (vLLM decodes them from the request, fetching nothing) and empty ones, with no origin allowed', () => {
    for (const url of ['data:image/png;base64,iVBORw0KGgo=', 'DATA:image/png;base64,AAAA', 'Data:audio/wav;base64,', 'data:', '']) {
      expect(mediaUrlRefusal(url, NO_MEDIA_ORIGINS), url).toBeUndefined();
    }
  });

  it('refuses every fetched URL by default, naming why and what to do', () => {
    const why = mediaUrlRefusal('https://media.example.com/cat.png', NO_MEDIA_ORIGINS);
    expect(why).toBe(
      `is on "https://media.example.com", which is not one of this gateway's media.allowedOrigins (none: the worker fetches no media for a client)`,
    );
  });

  it('allows exactly the listed origins, as the WHATWG parser reads them too', () => {
    const cases: [string, string][] = [
      ['https://media.example.com/cat.png', 'https://media.example.com'],
      ['https://media.example.com', 'https://media.example.com'],
      ['https://media.example.com?x=1', 'https://media.example.com'],
      ['https://MEDIA.Example.COM/a/b.png?sig=abc#frag', 'https://media.example.com'],
      ['https://media.example.com/@evil.example/x.png', 'https://media.example.com'],
      ['https://cdn.example.com:8443/v.mp4', 'https://cdn.example.com:8443'],
      ['http://cache.media.svc/a.wav', 'http://cache.media.svc'],
    ];
    for (const [url, origin] of cases) {
      expect(mediaUrlRefusal(url, ALLOWED), url).toBeUndefined();
      // What the check allowed is the origin every parser fetches from: WHATWG's reading agrees.
      expect(new URL(url).origin, url).toBe(origin);
    }
  });

  it('refuses other origins: another host, a subdomain, another port, another scheme', () => {
    for (const url of [
      'https://evil.example/x.png',
      'https://sub.media.example.com/x.png',
      'https://media.example.com.evil.example/x.png',
      'https://media.example.com:8443/x.png',
      'https://cdn.example.com/v.mp4',
      'http://media.example.com/x.png',
      'https://cache.media.svc/x.png',
      // The fragment hides nothing: every parser ends the host at '#'.
      'https://evil.example#@media.example.com/x.png',
      'https://evil.example?@media.example.com/x.png',
    ]) {
      expect(mediaUrlRefusal(url, ALLOWED), url).toMatch(
        /^is on ".*", which is not one of this gateway's media\.allowedOrigins \(https:\/\/media/,
      );
    }
  });

  it('refuses parser differentials between Python (urllib.parse, urllib3) and WHATWG as ambiguous, even on an allowed origin', () => {
    const ambiguous: [string, RegExp][] = [
      // urlsplit's netloc runs to the first '/', '?' or '#': host evil.example to Python, media.example.com to WHATWG.
      ['https://media.example.com\\@evil.example/x.png', /backslash/],
      ['https://evil.example\\.media.example.com/x.png', /backslash/],
      // WHATWG drops tab and newline anywhere and trims spaces and controls at both ends; Python versions differ.
      [' https://media.example.com/x.png', /whitespace/],
      ['https://media.example.com/x.png ', /whitespace/],
      ['https://media.exam\nple.com/x.png', /whitespace/],
      ['https://media.exam\tple.com/x.png', /whitespace/],
      ['\u0000https://media.example.com/x.png', /control/],
      // Non-ASCII hosts: IDNA 2003 (Python's codec) and UTS 46 (WHATWG) map some names differently.
      ['https://media.exämple.com/x.png', /non-ASCII/],
      ['https://media.example.com/ä.png', /non-ASCII/],
      ['https://media.example.com\uff0eevil.example/x.png', /non-ASCII/],
      // Userinfo: the host is after the last '@' to one parser, and a user name can hide the real host from a reader.
      ['https://media.example.com@evil.example/x.png', /user name or password/],
      ['https://user:pw@media.example.com/x.png', /user name or password/],
      // WHATWG decodes percent-escapes in a host (media%2eexample.com is media.example.com); Python does not.
      ['https://media%2eexample.com/x.png', /percent-encodes its host/],
      // Scheme spellings WHATWG repairs and Python reads as a path or an empty host.
      ['HTTPS://media.example.com/x.png', /must start with "https:\/\/" exactly/],
      ['https:media.example.com/x.png', /must start with "https:\/\/" exactly/],
      ['https:/media.example.com/x.png', /must start with "https:\/\/" exactly/],
      ['https:///media.example.com/x.png', /names no host/],
      // Ports: the default one written out, an empty one, leading zeros, out of range.
      ['https://media.example.com:443/x.png', /default port \(:443\)/],
      ['https://media.example.com:/x.png', /port that is not a number/],
      ['https://cdn.example.com:08443/v.mp4', /port that is not a number/],
      ['https://cdn.example.com:99999/v.mp4', /above 65535/],
      ['https://media.example.com:443:443/x.png', /port that is not a number/],
      // A trailing dot resolves the same but compares differently in every allowlist (vLLM's --allowed-media-domains too).
      ['https://media.example.com./x.png', /ending in "\."/],
      ['https://media_example.com/x.png', /letters, digits/],
    ];
    for (const [url, why] of ambiguous) expect(mediaUrlRefusal(url, ALLOWED), JSON.stringify(url)).toMatch(why);
  });

  it('refuses IP literals in every spelling WHATWG reads as one, and localhost, whatever the list says', () => {
    for (const url of [
      'https://169.254.169.254/latest/meta-data/',
      'http://127.0.0.1:8000/metrics',
      'https://10.0.0.7:5600/',
      'https://2130706433/',
      'https://0x7f.1/',
      'https://0x7f000001/',
      'https://0177.0.0.1/',
      'https://127.1/',
      'https://media.example.com.1/',
      'https://[::1]/',
      'https://[::ffff:169.254.169.254]/',
    ]) {
      expect(mediaUrlRefusal(url, ALLOWED), url).toMatch(/names an IP address/);
    }
    expect(mediaUrlRefusal('https://localhost/x.png', ALLOWED)).toBe('names localhost');
    expect(mediaUrlRefusal('http://api.localhost:8001/', ALLOWED)).toBe('names localhost');
  });

  it('refuses file: URLs (the worker reads its own filesystem) and every scheme that is not https, http or data', () => {
    for (const url of ['file:///etc/passwd', 'FILE:///models/weights.bin', 'file://host/share/x.png']) {
      expect(mediaUrlRefusal(url, ALLOWED), url).toMatch(/^is a file: URL, which the worker would read from its own filesystem/);
    }
    for (const url of [
      'ftp://media.example.com/x.png',
      'gopher://media.example.com/',
      'media.example.com/x.png',
      '//media.example.com/x.png',
    ]) {
      expect(mediaUrlRefusal(url, ALLOWED), url).toBe('is neither a data: URL nor an https:// URL');
    }
    // Leading whitespace before data: is not data: to vLLM's `url[:5].lower()`: it would be parsed as another URL.
    expect(mediaUrlRefusal(' data:image/png;base64,AAAA', ALLOWED)).toMatch(/whitespace/);
  });
});

describe('mediaOriginProblem', () => {
  it('accepts canonical origins', () => {
    for (const o of ['https://media.example.com', 'https://cdn.example.com:8443', 'http://cache.media.svc', 'https://a-b.c0.example']) {
      expect(mediaOriginProblem(o), o).toBeUndefined();
    }
  });

  it('refuses anything but scheme://host[:port] in canonical spelling, IP literals and localhost, saying what to write', () => {
    expect(mediaOriginProblem('https://media.example.com/')).toMatch(/is not an origin: .*\(e\.g\. https:\/\/media\.example\.com\)$/);
    expect(mediaOriginProblem('https://media.example.com/images')).toMatch(/is not an origin/);
    expect(mediaOriginProblem('https://Media.Example.com')).toMatch(/in lower case.*e\.g\. https:\/\/media\.example\.com/);
    expect(mediaOriginProblem('https://media.example.com:443')).toBe(
      '"https://media.example.com:443" names its scheme\'s default port; write https://media.example.com',
    );
    expect(mediaOriginProblem('http://media.example.com:80')).toMatch(/default port; write http:\/\/media\.example\.com$/);
    expect(mediaOriginProblem('media.example.com')).toMatch(/is neither a data: URL nor an https:\/\/ URL/);
    expect(mediaOriginProblem('https://*.example.com')).toMatch(/letters, digits/);
    expect(mediaOriginProblem('https://169.254.169.254')).toMatch(/names an IP address/);
    expect(mediaOriginProblem('https://[fd00::1]:8443')).toMatch(/names an IP address/);
    expect(mediaOriginProblem('http://localhost:8080')).toMatch(/names localhost/);
    expect(mediaOriginProblem('https://user@media.example.com')).toMatch(/user name/);
    expect(mediaOriginProblem('file:///srv/media')).toMatch(/file: URL/);
  });
});
