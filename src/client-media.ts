/**
 * Client media checks, refused wherever a body is read, whatever the request's path: part of the client-field check
 * the gate and both sidecars call (src/client-request-fields.ts `refusedRequestField`). Client-chosen media ids, and
 * media URLs a worker would fetch for the client (src/media-url.ts). Pure.
 */
import { type MediaPolicy, mediaUrlRefusal } from './media-url.js';

/**
 * The keys of a content part that carry a media URL in vLLM's chat parser (vllm-project/vllm
 * vllm/entrypoints/chat_utils.py @001eadcf `MM_PARSER_MAP` and `_parse_chat_message_content_mm_part`): typed parts
 * `image_url`, `audio_url` and `video_url` read `<key>.url`, `input_image` reads `image_url` as a string, and a part
 * without a `type` (or with a `uuid`) takes the first of these keys it has, as a string or as `{url}`. Every one of
 * them is checked whatever the part's `type` says, so no choice of type or key order gets a URL past the check.
 * `input_audio` is not among them: vLLM builds a `data:` URL from its base64 `data` itself.
 */
const URL_KEYS = ['image_url', 'audio_url', 'video_url'] as const;

/** The URL a content part's `key` names, as vLLM reads it (a string, or an object's string `url`), or undefined. */
function urlOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const url = (value as Record<string, unknown>)['url'];
  return typeof url === 'string' ? url : undefined;
}

/**
 * Why the body's `messages` name a media item by a client-chosen `uuid` or by a URL a worker would fetch for the client
 * (`mediaUrlRefusal`: anything but `data:` and the origins `media` allows), or undefined when they do not (or are not a
 * list). One walk over the content parts that exist: a body without media parts parses no URL.
 *
 * Client media ids: vLLM takes that id as the item's identity in its multimodal caches instead of hashing the media, and accepts
 * the media itself as null when an id is given, so the item comes from the cache alone (vllm-project/vllm
 * vllm/entrypoints/chat_utils.py `_parse_chat_message_content_part` and `_parse_chat_message_content_mm_part`
 * @001eadcf: "User must guarantee that it is properly generated and unique for different medias"). The cache key is
 * the id, not the tenant's `cache_salt`: a tenant that sends another tenant's id would be answered about that tenant's
 * image. A null `uuid` is no id (vLLM reads it as absent).
 *
 * Media URLs: the worker renders the prompt, so it fetches them, from inside the mesh where a client cannot reach
 * (other workers' NIXL side channels, sidecars' ports, the kube API, cloud metadata at 169.254.169.254, the pod's own
 * loopback); in a disaggregated route both workers fetch, and what one URL serves can change between the fetches, so
 * the prefill worker's KV could be computed from other media than the decode worker renders (docs/security.md).
 *
 * Checked on every path, not only chat: the transfer contract binds the body's prompt fields, `messages` among them,
 * but not the path, so a completions body carrying `messages` (which vLLM's completions path ignores) would be rendered
 * if its contract's holder sent it to `/v1/chat/completions`.
 */
export function clientMediaRefusal(messages: unknown, media: MediaPolicy): string | undefined {
  if (!Array.isArray(messages)) return undefined;
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i] as unknown;
    if (message === null || typeof message !== 'object') continue;
    const content = (message as Record<string, unknown>)['content'];
    if (!Array.isArray(content)) continue;
    for (let j = 0; j < content.length; j++) {
      const part = content[j] as unknown;
      if (part === null || typeof part !== 'object' || Array.isArray(part)) continue;
      const fields = part as Record<string, unknown>;
      const uuid = fields['uuid'];
      if (Object.hasOwn(part, 'uuid') && uuid !== null) {
        return `messages[${i}].content[${j}] names its media by "uuid"; vLLM caches media by that id across tenants (cache_salt does not scope it), so kvgate refuses client-chosen media ids: remove "uuid" and the worker identifies the media by its content`;
      }
      for (const key of URL_KEYS) {
        if (!Object.hasOwn(part, key)) continue;
        const url = urlOf(fields[key]);
        const why = url === undefined ? undefined : mediaUrlRefusal(url, media);
        if (why !== undefined) {
          return `messages[${i}].content[${j}].${key}: its URL ${why}. The worker would fetch it from inside the mesh (both the prefill and the decode worker, each on its own), so kvgate lets workers fetch only from the origins the operator allows; send the media inline as a data: URL (base64), or ask the operator to allow its origin`;
        }
      }
    }
  }
  return undefined;
}
