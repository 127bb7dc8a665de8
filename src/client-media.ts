/**
 * Client-chosen media ids, refused wherever a body is read, whatever the request's path: part of the client-field check
 * the gate and both sidecars call (src/client-request-fields.ts `refusedRequestField`). Pure.
 */

/**
 * Why the body's `messages` name a media item by a client-chosen `uuid`, or undefined when they do not (or are not a
 * list). vLLM takes that id as the item's identity in its multimodal caches instead of hashing the media, and accepts
 * the media itself as null when an id is given, so the item comes from the cache alone (vllm-project/vllm
 * vllm/entrypoints/chat_utils.py `_parse_chat_message_content_part` and `_parse_chat_message_content_mm_part`
 * @001eadcf: "User must guarantee that it is properly generated and unique for different medias"). The cache key is
 * the id, not the tenant's `cache_salt`: a tenant that sends another tenant's id would be answered about that tenant's
 * image. A null `uuid` is no id (vLLM reads it as absent).
 *
 * Checked on every path, not only chat: the transfer contract binds the body's prompt fields, `messages` among them,
 * but not the path, so a completions body carrying `messages` (which vLLM's completions path ignores) would be rendered
 * if its contract's holder sent it to `/v1/chat/completions`.
 */
export function clientMediaUuid(messages: unknown): string | undefined {
  if (!Array.isArray(messages)) return undefined;
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i] as unknown;
    if (message === null || typeof message !== 'object') continue;
    const content = (message as Record<string, unknown>)['content'];
    if (!Array.isArray(content)) continue;
    for (let j = 0; j < content.length; j++) {
      const part = content[j] as unknown;
      if (part === null || typeof part !== 'object' || Array.isArray(part)) continue;
      const uuid = (part as Record<string, unknown>)['uuid'];
      if (Object.hasOwn(part, 'uuid') && uuid !== null) {
        return `messages[${i}].content[${j}] names its media by "uuid"; vLLM caches media by that id across tenants (cache_salt does not scope it), so kvgate refuses client-chosen media ids: remove "uuid" and the worker identifies the media by its content`;
      }
    }
  }
  return undefined;
}
