/**
 * sha256 (lowercase hex) of a file's bytes, read as a stream: held-out data against the manifest beside it (validate),
 * architecture.json's model_sha256 and the runtime's sha256 (pack).
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";

export async function sha256File(file: string): Promise<string> {
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    return hash.digest("hex");
}
