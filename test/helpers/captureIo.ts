/** Collects what a command writes to its out and err streams. */
import { PassThrough } from "node:stream";

export interface CapturedIo {
    out: PassThrough;
    err: PassThrough;
    text(): { out: string; err: string };
}

export function captureIo(): CapturedIo {
    const out = new PassThrough();
    const err = new PassThrough();
    const chunks = { out: [] as Buffer[], err: [] as Buffer[] };
    out.on("data", (chunk: Buffer) => chunks.out.push(chunk));
    err.on("data", (chunk: Buffer) => chunks.err.push(chunk));
    return {
        out,
        err,
        text: () => ({
            out: Buffer.concat(chunks.out).toString("utf8"),
            err: Buffer.concat(chunks.err).toString("utf8"),
        }),
    };
}
