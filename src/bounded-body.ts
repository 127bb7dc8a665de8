/**
 * Reading an HTTP answer whole, but never more than a limit: whatever answers at an address (a worker that lies, a
 * pod IP reused by something else) could otherwise send without end and fill the reader's memory. Used by the
 * sidecar for its worker's answers and by the gate for sidecar status answers.
 */

/** A Response's body bytes, or undefined once it passes `limit` bytes: the body is then cancelled, not read to its end. */
export async function boundedBytes(res: Response, limit: number): Promise<Buffer | undefined> {
  if (res.body === null) return Buffer.alloc(0);
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      void reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return chunks.length === 1 ? Buffer.from(chunks[0]!.buffer, chunks[0]!.byteOffset, chunks[0]!.byteLength) : Buffer.concat(chunks);
}
