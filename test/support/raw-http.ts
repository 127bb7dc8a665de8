/**
 * One HTTP/1.1 GET written on a bare socket, for tests about what a server does with connections themselves (a
 * silent one closed, a talking one served): the answer's status line and headers, once they have arrived.
 */
import net from 'node:net';

export function rawGet(port: number, path: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`));
    let text = '';
    socket.on('error', reject);
    socket.on('data', (d: Buffer) => {
      text += d.toString();
      if (text.includes('\r\n\r\n')) {
        resolve(text);
        socket.destroy();
      }
    });
  });
}
