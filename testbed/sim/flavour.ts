/**
 * vLLM versions the simulator can be, and what differs between them where kvgate can see it. Each trait names the
 * vLLM source it follows (vllm-project/vllm; `testbed/sim/README.md` "Flavours" has the table).
 *
 * No flavour (the default) keeps the simulator's composite behaviour from before flavours existed (hash-checked
 * handshake, flat block ids, `reasoning_content`, `kv_cache_layout` labelled as declared), which older tests rely on.
 */
export const SIM_FLAVOURS = ['0.11', '0.13', 'main'] as const;
export type SimFlavour = (typeof SIM_FLAVOURS)[number];

export interface FlavourTraits {
  /** D compares P's NIXL compatibility hash in the handshake (PR #29503, first released in v0.13.0). */
  readonly hashCheck: boolean;
  /** P answers `remote_request_id` and D reads by it (connector v2); before, P and D shared the request id. */
  readonly remoteRequestId: boolean;
  /** Engine request ids get a random suffix (so P and D ids differ and `remote_request_id` is needed). */
  readonly uniqueRequestIds: boolean;
  /** `remote_block_ids` per KV cache group (`[[...]]`, main) instead of one flat list. */
  readonly perGroupBlockIds: boolean;
  /** P also answers `remote_num_tokens`, `remote_blocks_expiry_time` (None on P), `pp_size`, `dcp_size` and `transfer_mode` (main). */
  readonly newParams: boolean;
  /** `vllm:cache_config_info` carries `kv_cache_layout` as a `KVCacheLayout` name (main) or not at all (0.11, 0.13). */
  readonly layoutLabel: 'declared' | 'absent' | 'kv-cache-layout';
  /** Which delta/message fields carry reasoning text (PR #27752 added `reasoning`, PR #33402 removed `reasoning_content`). */
  readonly reasoningFields: readonly ('reasoning' | 'reasoning_content')[];
  /** `kv_load_failure_policy` default: `recompute` until PR #34896 (2026-02-19), then `fail`. */
  readonly defaultKvLoadFailurePolicy: 'fail' | 'recompute';
  /** The request's `truncation_side` is honoured (newer protocol field); older versions ignore it and cut on the left. */
  readonly truncationSide: boolean;
  /**
   * `GET /metrics?name[]=...`: `ignored` where prometheus-fastapi-instrumentator's `expose()` route answers /metrics
   * (vllm `vllm/v1/metrics/prometheus.py` `mount_metrics` at 0fa7aac; `vllm/entrypoints/serve/instrumentator/metrics.py`
   * at 02a69ad; the route calls `generate_latest(registry)`, trallnag/prometheus-fastapi-instrumentator
   * `instrumentation.py` at 069ffff), `honoured` where prometheus_client's `make_asgi_app` alone does (later copies of
   * that file; prometheus/client_python `exposition.py` `_bake_output` at 021ef04).
   */
  readonly metricsNameFilter: 'ignored' | 'honoured';
  /**
   * How a request error names the offending field. `none`: `param` is always null (vLLM before PR #30134, "[OpenAI]
   * Add parameter metadata to validation errors", opened 2025-12-05, so after v0.11.0). `param`: `param` set, message
   * unchanged (the composite, and 0.13, whose side of PR #30134 was not established). `param-and-value`:
   * `VLLMValidationError` also appends ` (parameter=<p>, value=<v>)` to the message (vllm-project/vllm
   * `vllm/exceptions.py` `__str__`, read in main; PR #31870 extended it to `logprobs`).
   */
  readonly errorParam: 'none' | 'param' | 'param-and-value';
  /**
   * `type` of a 400 for a body that fails request validation (pydantic / malformed JSON): `Bad Request`, the
   * `HTTPStatus` phrase `validation_exception_handler` writes (vllm-project/vllm
   * `vllm/entrypoints/openai/server_utils.py` @029329a8), or the simulator's older `BadRequestError` where the handler
   * of that version was not read (0.11, 0.13).
   */
  readonly validationErrorType: 'Bad Request' | 'BadRequestError';
  /**
   * What a stream shows when the request fails before any output (a KV load failure under `kv_load_failure_policy:
   * fail`: an output with `finish_reason: "error"`, no text and no token ids). `event`: the 500 error event (after the
   * role chunk in chat), then `[DONE]`. `dropped`: the OpenAI layer's "chunked prefill case, don't return empty chunks"
   * filter runs before its error check and skips the output, so the stream ends normally with no finish chunk (chat:
   * the role chunk; a usage chunk when asked; `[DONE]`). vllm-project/vllm main: chat checks first
   * (`vllm/entrypoints/openai/chat_completion/serving.py` @006c49d4, `_raise_if_error` before the filter), completions
   * filter first (`vllm/entrypoints/openai/completion/serving.py` @030ea52e). 0.13: PR #26813 put its check in the
   * finish branch, after the filter, in both (PR #40986, open, describes the drop). 0.11 has no
   * `kv_load_failure_policy` (PR #26813 came after v0.11.0), so `fail` there is a simulator-only setting, shown like 0.13.
   */
  readonly errorBeforeOutput: { readonly chat: 'event' | 'dropped'; readonly completion: 'event' | 'dropped' };
  /**
   * The `vllm:nixl_*` series on /metrics (`NixlPromMetrics`, labels `model_name`, `engine`): `none` before PR #26811
   * (Prometheus export of the NIXL stats, opened 2025-10-14, after v0.11.0); `no-expiry` before PR #32340 added
   * `vllm:nixl_num_kv_expired_reqs` (2026-01-14, after v0.13.0); `all` since. Whether `vllm:nixl_num_failed_transfers`
   * came with #26811 itself or in a later PR before v0.13.0 was not established; 0.13 is given it.
   */
  readonly nixlMetrics: 'none' | 'no-expiry' | 'all';
  /**
   * Whether CacheConfig (so `vllm:cache_config_info`) has `calculate_kv_scales`: a field through 0.13 (PR #11906),
   * deprecated by PR #37201, removed by PR #49389 (merged 2026-07-22; absent from `vllm/config/cache.py` @002f10e0).
   */
  readonly calculateKvScalesLabel: boolean;
  /**
   * How a chat completion's template kwargs are built. `request-fields-win` (main): `build_chat_params` merges the
   * request's `documents`, `reasoning_effort` and (when `reasoning_effort` is set and the client's kwargs do not name
   * it) `enable_thinking` OVER `chat_template_kwargs` (vllm-project/vllm
   * vllm/entrypoints/openai/chat_completion/protocol.py @002032ee; PR #43401 added `enable_thinking`, 2026-05-22).
   * `client-wins` (0.11, 0.13): `documents` under the client's kwargs, `reasoning_effort` not rendered
   * (`_preprocess_chat`, vllm/entrypoints/openai/serving_engine.py). `/tokenize` renders the client's kwargs alone in both.
   */
  readonly chatKwargs: 'request-fields-win' | 'client-wins';
  /**
   * Path prefixes `--api-key` guards (`AuthenticationMiddleware`, a `startswith` on the path after the root path).
   * `/v1` alone through 0.13 (the inline middleware of `vllm/entrypoints/openai/api_server.py`, later
   * `vllm/entrypoints/openai/server_utils.py` @029329a8). Main guards `GUARDED_PREFIX = ("/v1", "/v2", "/inference",
   * "/cohere")` (vllm-project/vllm `vllm/entrypoints/serve/middleware/authenticate.py` @baaf6e9c; issue #42591 reported
   * `/v2/embed` open in 0.20.2, PR #42064 `/inference/v1/generate`, PR #56269 documents the four). `/tokenize`,
   * `/metrics`, `/version` and `/health` stay open in every version.
   */
  readonly apiKeyPrefixes: readonly string[];
  /**
   * A chat request whose `kv_transfer_params` hold a non-empty `prompt_token_ids` runs on those ids: the renderer pops
   * the key and skips the chat template and tokenizer (decode-side reuse of the prefill's ids; PR #48145, merged
   * 2026-07; `_reused_prompt_token_ids` in vllm-project/vllm `vllm/renderers/online_renderer.py` @01063cd0). Chat
   * only (`preprocess_chat`); completions take their ids from `prompt`. Absent before (0.11, 0.13, no flavour).
   */
  readonly reusesPromptTokenIds: boolean;
  /**
   * SIGTERM with `--shutdown-timeout N` (N > 0) drains: the API server answers every new request with 503
   * `{"error": "Server is unavailable. Please try again later."}` except `/live` and `/metrics`, and lets the requests
   * in flight finish for up to N seconds before it exits; N = 0 (the default) exits at once, aborting them. PR #34730
   * (opened 2026-02-17, reverted by #36628) and PR #36666 (re-applied it, opened 2026-03-10), so after 0.13; the middleware is
   * vllm-project/vllm `vllm/entrypoints/serve/middleware.py` @43e1530d (`_EXEMPT_PATHS = {"/live", "/metrics"}`).
   * KV transfers are outside its scope (PR #36666: a prefill instance does not wait for the blocks it holds to be
   * read), so a prefill worker that drains exits with its leases outstanding. Before: SIGTERM is immediate.
   */
  readonly drainsOnShutdown: boolean;
  /**
   * A decode request carrying `do_remote_prefill` that the OpenAI layer refuses before the engine admits it (unknown
   * model, a prompt too long, a bad field: any `ErrorResponse` from `create_*`) still frees the prefill worker's
   * blocks: `_with_kv_transfer_rejection_cleanup` calls `notify_kv_transfer_request_rejected`, which submits a
   * pre-aborted engine request (`abort_immediately`) whose `request_finished` queues an empty read, so D's worker
   * notifies P without reading anything. vllm-project/vllm PR #41269 (opened 2026-04-29, merged in May 2026: from 0.21 on);
   * `vllm/entrypoints/generate/base/serving.py` @015d1c9b, `nixl/pull_scheduler.py` @73ee90a0. A refusal of the body
   * itself (pydantic, malformed JSON) happens before the handler and notifies nothing. Before: nothing is notified,
   * and P holds the blocks until its timeout or lease.
   */
  readonly rejectionNotifies: boolean;
}

const LEGACY: FlavourTraits = {
  hashCheck: true,
  remoteRequestId: true,
  uniqueRequestIds: true,
  perGroupBlockIds: false,
  newParams: false,
  layoutLabel: 'declared',
  reasoningFields: ['reasoning_content'],
  defaultKvLoadFailurePolicy: 'fail',
  truncationSide: true,
  metricsNameFilter: 'honoured',
  errorParam: 'param',
  validationErrorType: 'Bad Request',
  errorBeforeOutput: { chat: 'event', completion: 'event' },
  nixlMetrics: 'all',
  calculateKvScalesLabel: true,
  chatKwargs: 'client-wins',
  apiKeyPrefixes: ['/v1'],
  reusesPromptTokenIds: false,
  drainsOnShutdown: true,
  rejectionNotifies: true,
};

const TRAITS: Readonly<Record<SimFlavour, FlavourTraits>> = {
  '0.11': {
    hashCheck: false,
    remoteRequestId: false,
    uniqueRequestIds: false,
    perGroupBlockIds: false,
    newParams: false,
    layoutLabel: 'absent',
    reasoningFields: ['reasoning_content'],
    defaultKvLoadFailurePolicy: 'recompute',
    truncationSide: false,
    metricsNameFilter: 'ignored',
    errorParam: 'none',
    validationErrorType: 'BadRequestError',
    errorBeforeOutput: { chat: 'dropped', completion: 'dropped' },
    nixlMetrics: 'none',
    calculateKvScalesLabel: true,
    chatKwargs: 'client-wins',
    apiKeyPrefixes: ['/v1'],
    reusesPromptTokenIds: false,
    drainsOnShutdown: false,
    rejectionNotifies: false,
  },
  '0.13': {
    hashCheck: true,
    remoteRequestId: true,
    uniqueRequestIds: true,
    perGroupBlockIds: false,
    newParams: false,
    layoutLabel: 'absent',
    reasoningFields: ['reasoning', 'reasoning_content'],
    defaultKvLoadFailurePolicy: 'recompute',
    truncationSide: false,
    metricsNameFilter: 'ignored',
    errorParam: 'param',
    validationErrorType: 'BadRequestError',
    errorBeforeOutput: { chat: 'dropped', completion: 'dropped' },
    nixlMetrics: 'no-expiry',
    calculateKvScalesLabel: true,
    chatKwargs: 'client-wins',
    apiKeyPrefixes: ['/v1'],
    reusesPromptTokenIds: false,
    drainsOnShutdown: false,
    rejectionNotifies: false,
  },
  main: {
    hashCheck: true,
    remoteRequestId: true,
    uniqueRequestIds: true,
    perGroupBlockIds: true,
    newParams: true,
    layoutLabel: 'kv-cache-layout',
    reasoningFields: ['reasoning'],
    defaultKvLoadFailurePolicy: 'fail',
    truncationSide: true,
    metricsNameFilter: 'honoured',
    errorParam: 'param-and-value',
    validationErrorType: 'Bad Request',
    errorBeforeOutput: { chat: 'event', completion: 'dropped' },
    nixlMetrics: 'all',
    calculateKvScalesLabel: false,
    chatKwargs: 'request-fields-win',
    apiKeyPrefixes: ['/v1', '/v2', '/inference', '/cohere'],
    reusesPromptTokenIds: true,
    drainsOnShutdown: true,
    rejectionNotifies: true,
  },
};

/** The traits of a flavour (undefined: the composite legacy behaviour). */
export function traitsOf(flavour: SimFlavour | undefined): FlavourTraits {
  return flavour === undefined ? LEGACY : TRAITS[flavour];
}
