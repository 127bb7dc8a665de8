import { describe, expect, it } from 'vitest';
import { tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import type { Tenancy } from '../policy/schema.js';
import { parseOpenAiBody, sessionOf, tenantOf, tenantScopeOf, userOf } from './request-facts.js';

const limits = { maxBodyBytes: 1024 };
const bytes = (v: unknown) => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));
const chat = { model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] };

function refusal(path: string, body: Uint8Array, max = 1024) {
  const r = parseOpenAiBody(path, body, { maxBodyBytes: max });
  if (r.ok) throw new Error('expected a refusal');
  return r.error;
}

describe('parseOpenAiBody', () => {
  it('reads a chat request, tolerating a query string', () => {
    const r = parseOpenAiBody('/v1/chat/completions?api-version=1', bytes({ ...chat, stream: true, user: 'u1', cache_salt: 's' }), limits);
    expect(r.ok && { ...r.value, json: undefined }).toEqual({
      endpoint: 'chat',
      model: 'llama-3-8b',
      stream: true,
      user: 'u1',
      cacheSalt: 's',
      json: undefined,
    });
  });

  it('reads completions with every prompt form, and null optional fields', () => {
    for (const prompt of ['hi', ['a', 'b'], [1, 2, 3], [[1, 2], [3]]]) {
      const r = parseOpenAiBody('/v1/completions', bytes({ model: 'm', prompt, stream: null, user: null }), limits);
      expect(r.ok && r.value.endpoint, JSON.stringify(prompt)).toBe('completions');
    }
  });

  it('refuses other paths', () => {
    const e = refusal('/v1/embeddings', bytes(chat));
    expect(e.code).toBe('bad_request');
    expect(e.reason).toBe(
      'kvgate routes only POST /v1/completions and /v1/chat/completions, not "/v1/embeddings"; send the request to one of those',
    );
  });

  it('refuses a path the sidecars do not serve exactly (a trailing slash), and keeps reading a query string as the path before it', () => {
    // The sidecars (src/sidecar/openai-body.ts ENDPOINT_PATHS) and vLLM serve the exact paths: a routed
    // `/v1/completions/` would be minted a contract and answered 404 by the sidecar, with no code and no audit line.
    for (const p of ['/v1/completions/', '/v1/chat/completions//']) {
      const e = refusal(p, bytes(chat));
      expect([e.code, e.reason]).toEqual([
        'bad_request',
        `kvgate routes only POST /v1/completions and /v1/chat/completions, not ${JSON.stringify(p)}; send the request to one of those`,
      ]);
    }
    const q = parseOpenAiBody('/v1/chat/completions?x=1', bytes(chat), limits);
    expect(q.ok && q.value.endpoint).toBe('chat');
  });

  it('refuses a body over the limit with body_too_large', () => {
    const e = refusal('/v1/chat/completions', bytes({ ...chat, pad: 'x'.repeat(200) }), 100);
    expect(e.code).toBe('body_too_large');
    expect(e.reason).toMatch(
      /^the request body is \d+ bytes, over this gateway's limit of 100 bytes; shorten the prompt or ask the operator to raise limits.maxBodyBytes$/,
    );
  });

  it('refuses malformed JSON, non-objects and bad UTF-8 with bad_request', () => {
    expect(refusal('/v1/chat/completions', bytes('{"model": "m",')).reason).toMatch(
      /^the request body is not valid JSON \(.+\); send a JSON object/,
    );
    expect(refusal('/v1/chat/completions', bytes('[1,2]')).reason).toBe(
      'the request body must be a JSON object, e.g. {"model": "...", "messages": [...]}',
    );
    expect(refusal('/v1/chat/completions', bytes('')).reason).toMatch(/body is empty/);
    expect(refusal('/v1/chat/completions', new Uint8Array([0x7b, 0xff, 0x7d])).reason).toMatch(/not valid UTF-8/);
    // One decoder serves every request: a body cut inside a character leaves nothing behind for the next one.
    expect(refusal('/v1/chat/completions', new Uint8Array([...bytes('{"model":"m","messages":"caf'), 0xc3])).reason).toMatch(
      /not valid UTF-8/,
    );
    const next = parseOpenAiBody('/v1/chat/completions', bytes({ ...chat, user: 'é' }), limits);
    expect(next.ok && next.value.json['user']).toBe('é');
  });

  it('refuses a missing or non-string model', () => {
    expect(refusal('/v1/chat/completions', bytes({ messages: chat.messages })).reason).toBe(
      'the request has no "model"; add "model": "<served model name>"',
    );
    expect(refusal('/v1/chat/completions', bytes({ ...chat, model: 7 })).reason).toMatch(/"model" must be a non-empty string/);
  });

  it('refuses wrong types for stream, user, cache_salt, prompt and messages, saying what is wrong', () => {
    const cases: [string, unknown, RegExp][] = [
      ['/v1/chat/completions', { ...chat, stream: 'yes' }, /^"stream" must be true or false; got string "yes"$/],
      ['/v1/chat/completions', { ...chat, user: 42 }, /^"user" must be a string; got number 42$/],
      ['/v1/chat/completions', { ...chat, cache_salt: { a: 1 } }, /^"cache_salt" must be a string; got an object$/],
      ['/v1/chat/completions', { ...chat, cache_salt: '' }, /must not be empty/],
      ['/v1/chat/completions', { model: 'm', messages: 'hi' }, /"messages" must be a non-empty array/],
      ['/v1/chat/completions', { model: 'm', messages: [{ content: 'x' }] }, /^messages\[0\] must be an object with a string "role"$/],
      ['/v1/chat/completions', { model: 'm' }, /a chat completion needs "messages"/],
      ['/v1/completions', { model: 'm', prompt: { text: 'x' } }, /"prompt" must be a string/],
      ['/v1/completions', { model: 'm', prompt: [1, 'a'] }, /"prompt" must be a string/],
      ['/v1/completions', { model: 'm' }, /a completion needs "prompt"/],
    ];
    for (const [path, body, message] of cases) {
      const e = refusal(path, bytes(body));
      expect(e.code, JSON.stringify(body)).toBe('bad_request');
      expect(e.reason).toMatch(message);
    }
  });

  it('forbids kv_transfer_params wherever vLLM would read them: under vllm_xargs, nested, in any case or spelling', () => {
    const bodies = [
      { ...chat, vllm_xargs: { kv_transfer_params: '{"do_remote_prefill": true}' } },
      { ...chat, extra: [{ deeper: { kv_transfer_params: {} } }] },
      { ...chat, KV_Transfer_Params: { remote_host: '10.0.0.1' } },
      { ...chat, 'kv-transfer-params': {} },
      { ...chat, kvtransferparams: {} },
    ];
    for (const body of bodies) {
      const e = refusal('/v1/chat/completions', bytes(body));
      expect(e.code, JSON.stringify(body)).toBe('kv_params_forbidden');
    }
    expect(refusal('/v1/chat/completions', bytes(bodies[0])).reason).toContain('found at "vllm_xargs.kv_transfer_params"');
    // The name inside a prompt's text is only text.
    expect(
      parseOpenAiBody(
        '/v1/chat/completions',
        bytes({ ...chat, messages: [{ role: 'user', content: 'what is kv_transfer_params?' }] }),
        limits,
      ).ok,
    ).toBe(true);
  });

  it('forbids ec_transfer_params (encoder-cache transfer) wherever vLLM would read them, in any spelling', () => {
    // vLLM hands a body's ec_transfer_params to its EC connector as it hands kv_transfer_params to the KV connector:
    // the worker would load encoder outputs from wherever they point.
    const bodies = [
      { ...chat, ec_transfer_params: { h: { do_remote_encode: true, remote_host: '10.0.0.9', remote_port: 1 } } },
      { ...chat, ec_transfer_params: null },
      { ...chat, vllm_xargs: { ec_transfer_params: 'x' } },
      { ...chat, extra: [{ 'EC-Transfer-Params': {} }] },
      { model: 'm', prompt: 'hi', ectransferparams: {} },
    ];
    for (const body of bodies) {
      const path = 'prompt' in body ? '/v1/completions' : '/v1/chat/completions';
      const e = refusal(path, bytes(body));
      expect(e.code, JSON.stringify(body)).toBe('kv_params_forbidden');
      expect(e.reason).toMatch(/^ec_transfer_params /);
    }
    expect(refusal('/v1/chat/completions', bytes(bodies[0])).reason).toContain('(found at "ec_transfer_params")');
    expect(refusal('/v1/chat/completions', bytes(bodies[2])).reason).toContain('(found at "vllm_xargs.ec_transfer_params")');
  });

  it('refuses a chat content part naming its media by a client-chosen uuid: vLLM caches media by that id, unsalted', () => {
    const part = (extra: Record<string, unknown>) => ({
      ...chat,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'describe it' }, extra] }],
    });
    const bodies = [
      // Another tenant's image, read back by its id alone: vLLM takes the media from its caches when the data is null.
      part({ type: 'image_url', image_url: null, uuid: 'sku-1234' }),
      part({ type: 'image_url', image_url: { url: 'https://example.com/mine.png' }, uuid: 'sku-1234' }),
      part({ image_url: 'https://example.com/mine.png', uuid: 7 }),
      part({ type: 'image_embeds', image_embeds: null, uuid: '' }),
      part({ type: 'video_url', video_url: { url: 'https://example.com/v.mp4' }, uuid: 'v' }),
      part({ type: 'audio_embeds', audio_embeds: null, uuid: 'a' }),
    ];
    for (const body of bodies) {
      const e = refusal('/v1/chat/completions', bytes(body));
      expect([e.code, e.reason], JSON.stringify(body)).toEqual([
        'bad_request',
        expect.stringContaining('messages[0].content[1] names its media by "uuid"'),
      ]);
    }
    // Without an id (or with a null one, which vLLM reads as none) the media is hashed by content: routed.
    for (const extra of [
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' }, uuid: null },
    ]) {
      expect(parseOpenAiBody('/v1/chat/completions', bytes(part(extra)), limits).ok, JSON.stringify(extra)).toBe(true);
    }
    // The word in text is only text.
    expect(parseOpenAiBody('/v1/chat/completions', bytes(part({ type: 'text', text: 'uuid' })), limits).ok).toBe(true);
  });

  it('refuses a media URL the worker would fetch from inside the mesh, in every part shape vLLM reads, unless the table allows its origin', () => {
    const part = (extra: unknown) => ({
      ...chat,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'describe it' }, extra] },
      ],
    });
    const metadata = 'https://169.254.169.254/latest/meta-data/iam/security-credentials/';
    const shapes = [
      ['image_url', { type: 'image_url', image_url: { url: metadata } }],
      ['audio_url', { type: 'audio_url', audio_url: { url: metadata } }],
      ['video_url', { type: 'video_url', video_url: { url: metadata } }],
      // The Responses-style part vLLM's chat parser also takes, and parts without a type, the URL as a string or {url}.
      ['image_url', { type: 'input_image', image_url: metadata }],
      ['image_url', { image_url: metadata }],
      ['audio_url', { audio_url: { url: metadata } }],
      ['video_url', { video_url: metadata }],
      // Whatever the type says: a key vLLM would read under another type is checked all the same.
      ['video_url', { type: 'text', text: 'hi', video_url: { url: metadata } }],
    ] as const;
    for (const [key, extra] of shapes) {
      const e = refusal('/v1/chat/completions', bytes(part(extra)), 4096);
      expect([e.code, e.reason], JSON.stringify(extra)).toEqual([
        'bad_request',
        expect.stringMatching(
          new RegExp(
            `^messages\\[1\\]\\.content\\[1\\]\\.${key}: its URL names an IP address, not a host name .*send the media inline as a data: URL \\(base64\\), or ask the operator to allow its origin$`,
          ),
        ),
      ]);
      // The reason never quotes the URL's path or query (signed URLs carry credentials there).
      expect(e.reason).not.toContain('security-credentials');
    }
    const cat = part({ type: 'image_url', image_url: { url: 'https://media.example.com/cat.png?sig=s3cr3t' } });
    const byDefault = refusal('/v1/chat/completions', bytes(cat), 4096);
    expect(byDefault.reason).toContain(
      `its URL is on "https://media.example.com", which is not one of this gateway's media.allowedOrigins (none`,
    );
    expect(byDefault.reason).not.toContain('s3cr3t');
    // Allowed by the table: routed. Inline media and input_audio (vLLM builds a data: URL from it) fetch nothing: routed.
    const media = { allowedOrigins: ['https://media.example.com'] };
    expect(parseOpenAiBody('/v1/chat/completions', bytes(cat), { maxBodyBytes: 4096 }, media).ok).toBe(true);
    for (const extra of [
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
      { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'auto' } },
    ]) {
      expect(parseOpenAiBody('/v1/chat/completions', bytes(part(extra)), { maxBodyBytes: 4096 }).ok, JSON.stringify(extra)).toBe(true);
    }
    // Allowing one origin allows no other, and no ambiguous spelling of it.
    for (const url of ['https://media.example.com\\@evil.example/x.png', 'https://media.example.com@evil.example/', 'file:///etc/passwd']) {
      const body = bytes(part({ type: 'image_url', image_url: { url } }));
      expect(parseOpenAiBody('/v1/chat/completions', body, { maxBodyBytes: 4096 }, media).ok, url).toBe(false);
    }
  });

  it('refuses media URLs in the messages of a completions body too, before anything else about them', () => {
    const body = {
      model: 'm',
      prompt: 'hi',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://10.0.0.7:5600/' } }] }],
    };
    expect(refusal('/v1/completions', bytes(body)).reason).toMatch(/^messages\[0\]\.content\[0\]\.image_url: its URL names an IP address/);
  });

  it('refuses media uuids in the messages of a completions body too: the contract does not name its path', () => {
    // vLLM's completions path ignores `messages`, but the prompt digest covers them: a holder of this request's contract
    // could send the same body to /v1/chat/completions, where vLLM renders them (and takes the id).
    const body = {
      model: 'm',
      prompt: 'hi',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: null, uuid: 'sku-1234' }] }],
    };
    const e = refusal('/v1/completions', bytes(body));
    expect([e.code, e.reason]).toEqual(['bad_request', expect.stringContaining('messages[0].content[0] names its media by "uuid"')]);
    // Any other `messages` on the completions path is refused too: a body carries the prompt of its own path only.
    expect(refusal('/v1/completions', bytes({ ...body, messages: 'not a list' })).reason).toContain(
      '"messages" is a prompt field of the other path',
    );
  });

  it('refuses a prompt field of the other path: a contract binds the prompt but not the path, so one body must not prompt both', () => {
    const withMessages = { model: 'm', prompt: 'hi', messages: [{ role: 'user', content: 'another prompt' }] };
    expect([refusal('/v1/completions', bytes(withMessages)).code, refusal('/v1/completions', bytes(withMessages)).reason]).toEqual([
      'bad_request',
      expect.stringMatching(/^"messages" is a prompt field of the other path, not of \/v1\/completions/),
    ]);
    for (const extra of [{ prompt: 'another prompt' }, { prompt: [1, 2, 3] }, { prompt_embeds: 'AAAA' }]) {
      const e = refusal('/v1/chat/completions', bytes({ ...chat, ...extra }));
      expect([e.code, e.reason], JSON.stringify(extra)).toEqual([
        'bad_request',
        expect.stringMatching(/is a prompt field of the other path, not of \/v1\/chat\/completions/),
      ]);
    }
    // A null is no value (vLLM reads it as absent): routed.
    expect(parseOpenAiBody('/v1/completions', bytes({ model: 'm', prompt: 'hi', messages: null }), limits).ok).toBe(true);
    expect(parseOpenAiBody('/v1/chat/completions', bytes({ ...chat, prompt: null, prompt_embeds: null }), limits).ok).toBe(true);
  });

  it('refuses a priority other than 0: with priority scheduling it would put one tenant before the others on shared workers', () => {
    for (const value of [-1000, 1, '-5', 0.5]) {
      const e = refusal('/v1/chat/completions', bytes({ ...chat, priority: value }));
      expect([e.code, e.reason], JSON.stringify(value)).toEqual([
        'bad_request',
        expect.stringMatching(/^priority .* is not taken from a client/),
      ]);
    }
    for (const value of [0, null])
      expect(parseOpenAiBody('/v1/completions', bytes({ model: 'm', prompt: 'hi', priority: value }), limits).ok).toBe(true);
  });

  it('refuses use_beam_search on either path: vLLM runs it as requests of its own, without the bound KV transfer', () => {
    for (const value of [true, 'true', 1, 'yes']) {
      for (const [path, body] of [
        ['/v1/completions', { model: 'm', prompt: 'hi' }],
        ['/v1/chat/completions', chat],
      ] as const) {
        const e = refusal(path, bytes({ ...body, use_beam_search: value }));
        expect([e.code, e.reason], `${path} ${JSON.stringify(value)}`).toEqual([
          'bad_request',
          expect.stringMatching(/^use_beam_search is not served through kvgate/),
        ]);
      }
    }
    for (const value of [false, null])
      expect(parseOpenAiBody('/v1/chat/completions', bytes({ ...chat, use_beam_search: value }), limits).ok).toBe(true);
  });

  it('refuses what vLLM would refuse in a field a prefill leg rewrites, before any prefill (llm-d runs its own leg first)', () => {
    const completion = { model: 'm', prompt: 'hi' };
    const refused: [string, Record<string, unknown>, RegExp][] = [
      ['/v1/completions', { ...completion, min_tokens: null }, /^min_tokens must be a non-negative integer, or absent/],
      ['/v1/chat/completions', { ...chat, min_tokens: null }, /^min_tokens must be a non-negative integer, or absent/],
      ['/v1/completions', { ...completion, n: null }, /^n must be 1 or absent on \/v1\/completions/],
      ['/v1/completions', { ...completion, min_tokens: 17 }, /^min_tokens \(17\) is above the completion's maximum \(16\)/],
      ['/v1/completions', { ...completion, max_tokens: 0 }, /^max_tokens must be a positive integer$/],
      ['/v1/chat/completions', { ...chat, max_completion_tokens: 0 }, /^max_completion_tokens must be a positive integer$/],
      ['/v1/chat/completions', { ...chat, stream_options: { include_usage: true } }, /^stream_options are taken only with stream: true/],
      ['/v1/chat/completions', { ...chat, stream_options: [] }, /^stream_options must be an object/],
      [
        '/v1/completions',
        { ...completion, stream: true, stream_options: { include_usage: 'maybe' } },
        /^stream_options.include_usage must be/,
      ],
    ];
    for (const [path, body, reason] of refused) {
      const e = refusal(path, bytes(body));
      expect([e.code, e.reason], JSON.stringify(body)).toEqual(['bad_request', expect.stringMatching(reason)]);
    }
    for (const body of [
      { ...chat, n: null, min_tokens: 3, max_tokens: 5, stream: true, stream_options: { include_usage: true } },
      { ...completion, min_tokens: 16, max_tokens: null, stream_options: null },
      // vLLM's echo-only completion (the prompt back, no generation), served by a route without a prefill leg.
      { ...completion, echo: true, max_tokens: 0, logprobs: 1 },
    ])
      expect(
        parseOpenAiBody('messages' in body ? '/v1/chat/completions' : '/v1/completions', bytes(body), limits).ok,
        JSON.stringify(body),
      ).toBe(true);
  });

  it('refuses a body nested deeper than 64 levels with 400 before parsing it (20,000 levels: no stack overflow)', () => {
    const deep = `{"model":"m","messages":[{"role":"user","content":"x"}],"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
    const e = refusal('/v1/chat/completions', new TextEncoder().encode(deep), 100_000);
    expect([e.code, e.reason]).toEqual(['bad_request', expect.stringContaining('more than 64 levels deep')]);
    // Brackets inside strings are text, not nesting.
    expect(
      parseOpenAiBody('/v1/chat/completions', bytes({ ...chat, messages: [{ role: 'user', content: '['.repeat(500) }] }), limits).ok,
    ).toBe(true);
  });

  it('quotes client-supplied values in its messages at most 128 characters', () => {
    const long = 'x'.repeat(3000);
    for (const [path, body] of [
      [`/v1/${long}`, chat],
      ['/v1/chat/completions', { ...chat, stream: long }],
    ] as const) {
      const e = refusal(path, bytes(body), 100_000);
      expect(e.reason.length, e.reason).toBeLessThan(400);
    }
  });

  it('forbids client-sent kv_transfer_params, even null', () => {
    for (const kv of [null, {}, { do_remote_prefill: true }]) {
      const e = refusal('/v1/chat/completions', bytes({ ...chat, kv_transfer_params: kv }));
      expect(e.code).toBe('kv_params_forbidden');
      expect(e.reason).toBe(
        'kv_transfer_params is set by kvgate\'s sidecars, never by a client (found at "kv_transfer_params"); remove it from the request',
      );
    }
  });
});

describe('tenant, user and session', () => {
  const table = tableFromValue(twoRevisionTableValue());
  const metaTenancy: Tenancy = {
    source: { metadata: { namespace: 'envoy.filters.http.jwt_authn', path: ['jwt_payload', 'org'] } },
    required: true,
    prefixScope: 'tenant-user',
    userHeader: 'x-user-id',
  };
  const facts = (headers: Record<string, string>, metadata: Record<string, Record<string, unknown>> = {}) => ({ headers, metadata });

  it('reads the tenant from the configured header', () => {
    expect(tenantOf(facts({ 'x-tenant-id': ' acme ' }), table.tenancy)).toEqual({
      kind: 'found',
      tenant: 'acme',
      from: 'header x-tenant-id',
    });
    expect(tenantOf(facts({}), table.tenancy)).toEqual({ kind: 'missing', from: 'header x-tenant-id' });
    expect(tenantOf(facts({ 'x-tenant-id': 'globex,acme' }), table.tenancy).kind).toBe('ambiguous');
  });

  it('trims only the whitespace HTTP strips (space, tab): an id ending in another Unicode space is another identity', () => {
    // JavaScript's trim() also strips U+00A0, U+FEFF, U+2028, U+3000...: "acme\u00a0" (two UTF-8 bytes Envoy passes
    // as they are) would have become tenant acme, with acme's prefix cache and acme's model access.
    for (const space of ['\u00a0', '\ufeff', '\u2028', '\u3000', '\u2003', '\v', '\f']) {
      const id = `acme${space}`;
      const found = tenantOf(facts({ 'x-tenant-id': id }), table.tenancy);
      expect(found, JSON.stringify(id)).toEqual({ kind: 'found', tenant: id, from: 'header x-tenant-id' });
      expect(userOf({ headers: { 'x-user-id': `${space}u7` } }, metaTenancy)).toBe(`${space}u7`);
      expect(sessionOf({ headers: { 'x-session-id': `s-1${space}` } }, table.session)).toBe(`s-1${space}`);
    }
    expect(tenantOf(facts({ 'x-tenant-id': '\t acme \t' }), table.tenancy)).toMatchObject({ kind: 'found', tenant: 'acme' });
    expect(tenantOf(facts({ 'x-tenant-id': ' \t ' }), table.tenancy).kind).toBe('missing');
    expect(userOf({ headers: { 'x-user-id': ' u7\t' } }, metaTenancy)).toBe('u7');
    expect(sessionOf({ headers: { 'x-session-id': '\ts-1 ' } }, table.session)).toBe('s-1');
  });

  it('reads the tenant from Envoy metadata (a jwt_authn claim)', () => {
    const md = { 'envoy.filters.http.jwt_authn': { jwt_payload: { org: 'acme', n: 7 } } };
    expect(tenantOf(facts({ 'x-tenant-id': 'forged' }, md), metaTenancy)).toMatchObject({ kind: 'found', tenant: 'acme' });
    expect(tenantOf(facts({}, {}), metaTenancy).kind).toBe('missing');
    expect(tenantOf(facts({}, { 'envoy.filters.http.jwt_authn': { jwt_payload: { org: ['a'] } } }), metaTenancy)).toMatchObject({
      kind: 'ambiguous',
      detail: 'it is a list, not a string',
    });
  });

  it('takes the user from the trusted header when configured, else from the body', () => {
    const body = { endpoint: 'chat' as const, model: 'm', stream: false, user: 'body-user', json: {} };
    expect(userOf({ headers: { 'x-user-id': 'u7' }, body }, metaTenancy)).toBe('u7');
    expect(userOf({ headers: {}, body }, metaTenancy)).toBeNull();
    expect(userOf({ headers: {}, body }, table.tenancy)).toBe('body-user');
  });

  it('reads the session header', () => {
    expect(sessionOf({ headers: { 'x-session-id': 's-1' } }, table.session)).toBe('s-1');
    expect(sessionOf({ headers: {} }, table.session)).toBeNull();
  });

  it('builds prefix scopes that no tenant or user id can forge', () => {
    expect(tenantScopeOf('tenant', 'acme', 'u')).toBe('tenant:acme');
    expect(tenantScopeOf('tenant-user', 'acme', 'u1')).toBe('tenant-user:acme/u1');
    expect(tenantScopeOf('shared', 'acme', 'u1')).toBe('shared');
    expect(tenantScopeOf('tenant', null, null)).toBe('anonymous');
    expect(tenantScopeOf('tenant-user', 'acme/x', 'y')).not.toBe(tenantScopeOf('tenant-user', 'acme', 'x/y'));
    expect(tenantScopeOf('tenant', 'a\nb', null)).not.toContain('\n');
  });
});
