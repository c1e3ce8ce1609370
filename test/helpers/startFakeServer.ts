/** A plain node:http server on a free loopback port for validator tests; `close()` also drops open connections. */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface FakeServer {
    url: string;
    port: number;
    /** Bodies of the requests received, parsed as JSON where possible. */
    requests: { path: string; body: unknown }[];
    close(): Promise<void>;
}

export type FakeHandler = (
    path: string,
    body: unknown,
    response: ServerResponse,
    request: IncomingMessage,
) => void | Promise<void>;

export async function startFakeServer(handler: FakeHandler): Promise<FakeServer> {
    const requests: FakeServer["requests"] = [];
    const server = createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on("data", (chunk: Buffer) => chunks.push(chunk));
        request.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            let body: unknown = text;
            try {
                body = text.length > 0 ? JSON.parse(text) : undefined;
            } catch {
                // keep the raw text
            }
            const path = request.url ?? "/";
            requests.push({ path, body });
            Promise.resolve(handler(path, body, response, request)).catch((error: unknown) => {
                response.statusCode = 500;
                response.end(String(error));
            });
        });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    return {
        url: `http://127.0.0.1:${port}`,
        port,
        requests,
        close: () =>
            new Promise<void>((resolve, reject) => {
                server.closeAllConnections();
                server.close((error) => (error ? reject(error) : resolve()));
            }),
    };
}

export function sendJson(response: ServerResponse, status: number, value: unknown): void {
    response.statusCode = status;
    response.setHeader("content-type", "application/json");
    response.end(JSON.stringify(value));
}
