/** Spawns a serve process (the CLI or the fake-engine fixture) and reads its lines, for process-level tests. */

import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
export const cliPath = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));
export const fakeServerPath = fileURLToPath(new URL("./fixtures/serveFakeEngine.ts", import.meta.url));

export interface ServeProcess {
    child: ChildProcess;
    stdout: () => string;
    stderr: () => string;
    /** Resolves with the first stdout line matching `pattern`; rejects if the process exits first. */
    waitForLine(pattern: RegExp): Promise<RegExpMatchArray>;
    /** Resolves once stderr matches `pattern`. */
    waitForStderr(pattern: RegExp): Promise<void>;
    /** Resolves with the exit code (signal-killed: -1). */
    exited: Promise<number>;
}

export function spawnServe(script: string, args: string[], options: { cwd?: string } = {}): ServeProcess {
    // tsx resolved from this checkout, so the child can run from any working directory
    const tsx = import.meta.resolve("tsx");
    const child = spawn(process.execPath, ["--import", tsx, script, ...args], {
        cwd: options.cwd ?? repoRoot,
        stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    const lineWaiters: { pattern: RegExp; resolve: (m: RegExpMatchArray) => void }[] = [];
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        for (const waiter of [...lineWaiters]) {
            const match = out.match(waiter.pattern);
            if (match !== null) {
                lineWaiters.splice(lineWaiters.indexOf(waiter), 1);
                waiter.resolve(match);
            }
        }
    });
    const stderrWaiters: { pattern: RegExp; resolve: () => void }[] = [];
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
        err += chunk;
        for (const waiter of [...stderrWaiters]) {
            if (waiter.pattern.test(err)) {
                stderrWaiters.splice(stderrWaiters.indexOf(waiter), 1);
                waiter.resolve();
            }
        }
    });
    const exited = new Promise<number>((resolve) => child.on("exit", (code) => resolve(code ?? -1)));
    return {
        child,
        stdout: () => out,
        stderr: () => err,
        exited,
        waitForStderr(pattern) {
            if (pattern.test(err)) return Promise.resolve();
            return new Promise((resolve) => stderrWaiters.push({ pattern, resolve }));
        },
        waitForLine(pattern) {
            const match = out.match(pattern);
            if (match !== null) return Promise.resolve(match);
            return new Promise((resolve, reject) => {
                lineWaiters.push({ pattern, resolve });
                exited.then((code) => reject(new Error(`serve exited (${code}) before ${pattern}: ${err}`)));
            });
        },
    };
}
