/** Loads llama.cpp through node-llama-cpp for the `--gpu auto|cuda|cpu` choice. */
import { getLlama, type Llama, LlamaLogLevel } from "node-llama-cpp";

export type GpuChoice = "auto" | "cuda" | "cpu";

export const gpuChoices: readonly GpuChoice[] = ["auto", "cuda", "cpu"];

/**
 * `cpu`: the prebuilt CPU binaries. `auto`/`cuda`: the last build made with `node-llama-cpp source build` if any (how the
 * GPU machine installs its CUDA build, see shared/gpu/README.md), else the best prebuilt binary; `cuda` then insists
 * on CUDA. Only llama.cpp errors are logged.
 */
export async function loadLlama(gpu: GpuChoice): Promise<Llama> {
    if (gpu === "cpu") return getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
    const llama = await getLlama("lastBuild", { logLevel: LlamaLogLevel.error });
    if (gpu === "cuda" && llama.gpu !== "cuda") {
        const found = llama.gpu === false ? "the CPU" : llama.gpu;
        await llama.dispose();
        throw new Error(
            `--gpu cuda: expected a CUDA build of llama.cpp, found ${found} (build one with \`npx node-llama-cpp source build --gpu cuda\`)`,
        );
    }
    return llama;
}
