/** sha256 (lowercase hex) of a file's bytes, read as a stream: architecture.json's model_sha256 and runtime sha256. */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";

export async function sha256File(file: string): Promise<string> {
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    return hash.digest("hex");
}
