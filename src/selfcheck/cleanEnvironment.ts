/**
 * A bare host for `selfcheck --clean-env`: the drafter folder copied to a fresh place, a PATH holding only the tools a
 * bundled serve.sh needs (types.ts: cleanEnvTools, linked from this machine; no node, no npx, no specdraft), an empty
 * HOME and a fresh TMPDIR (so a bundled runtime is unpacked anew, as on first start elsewhere), and no other variable
 * of this process's environment. What the folder needs beyond that, it must carry.
 */
import { constants, existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { cleanEnvTools } from "./types.js";

/** A prepared clean environment; `remove` deletes the copy, HOME, TMPDIR and the tools folder. */
export interface CleanEnvironment {
    /** The folder's copy, to run serve.sh in. */
    dir: string;
    /** The whole environment serve.sh gets (PORT is added when it starts). */
    env: NodeJS.ProcessEnv;
    /** One line for the startup gate: where the copy is and what PATH holds. */
    description: string;
    remove(): Promise<void>;
}

/** Copies `folder` and prepares the environment; `extra` variables are added to it (e.g. SPECDRAFT_RUNTIME_DIR). */
export async function makeCleanEnvironment(folder: string, extra: NodeJS.ProcessEnv = {}): Promise<CleanEnvironment> {
    const root = await mkdtemp(path.join(tmpdir(), "specdraft-clean-env-"));
    try {
        const dir = path.join(root, "drafter");
        // a reflink where the file system has them: the copy of a 1 GB model is then instant
        await cp(path.resolve(folder), dir, { recursive: true, mode: constants.COPYFILE_FICLONE });
        const bin = path.join(root, "bin");
        const home = path.join(root, "home");
        const tmp = path.join(root, "tmp");
        await Promise.all([bin, home, tmp].map((d) => mkdir(d)));
        const linked: string[] = [];
        for (const tool of cleanEnvTools) {
            const found = findOnPath(tool) ?? (tool === "xz" ? findOnPath("python3") : undefined);
            if (found === undefined) continue;
            await symlink(found, path.join(bin, path.basename(found)));
            linked.push(path.basename(found));
        }
        return {
            dir,
            env: { PATH: bin, HOME: home, TMPDIR: tmp, LANG: "C.UTF-8", ...extra },
            description: `a copy in ${dir}; PATH: ${linked.join(", ")} (no node); HOME empty`,
            remove: () => rm(root, { recursive: true, force: true }),
        };
    } catch (error) {
        await rm(root, { recursive: true, force: true });
        throw error;
    }
}

/** The first `name` on this process's PATH. */
function findOnPath(name: string): string | undefined {
    for (const dir of (process.env.PATH ?? "").split(path.delimiter))
        if (dir && existsSync(path.join(dir, name))) return path.join(dir, name);
    return undefined;
}
