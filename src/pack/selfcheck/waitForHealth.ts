/** Polls `GET {url}/health` until it answers 200, the process ends, or time runs out. */
import type { ServeProcess } from "./startServeScript.js";

/** Time between /health polls. Defaults to `250` ms. */
export const healthPollMs = 250;

export type HealthWait = { healthy: true; seconds: number } | { healthy: false; seconds: number; reason: string };

export async function waitForHealth(baseUrl: string, timeoutSeconds: number, server?: ServeProcess): Promise<HealthWait> {
    const started = performance.now();
    const seconds = (): number => (performance.now() - started) / 1000;
    let last = "no answer yet";
    while (seconds() < timeoutSeconds) {
        if (server?.hasExited()) return { healthy: false, seconds: seconds(), reason: `serve.sh exited (${await server.exited}) before /health answered 200` };
        const status = await healthStatus(baseUrl, Math.ceil(Math.min(5_000, Math.max(100, (timeoutSeconds - seconds()) * 1000))));
        if (status === 200) return { healthy: true, seconds: seconds() };
        last = typeof status === "number" ? `HTTP ${status}` : status;
        await new Promise((resolve) => setTimeout(resolve, healthPollMs));
    }
    return { healthy: false, seconds: seconds(), reason: `/health did not answer 200 within ${timeoutSeconds} s (last: ${last})` };
}

/** The status of one GET /health, or why there was none. */
export async function healthStatus(baseUrl: string, timeoutMs: number): Promise<number | string> {
    try {
        const response = await fetch(new URL("health", baseUrl.endsWith("/") ? baseUrl : `${baseUrl}/`), { signal: AbortSignal.timeout(timeoutMs) });
        await response.arrayBuffer();
        return response.status;
    } catch (error) {
        const cause = (error as { cause?: { code?: string } }).cause;
        return cause?.code ?? (error as Error).name;
    }
}
