/**
 * CPU threads for a llama.cpp context when the user names none: the CPUs less one, at least 1 and at most 8. ggml's
 * threads spin while they wait for each other, so every thread beyond the free cores costs far more than it gives:
 * on a 2-core machine node-llama-cpp's own default (4 threads) made one decode of a 7M-parameter model take 490 ms
 * where 1 thread takes 1.3 ms.
 */
import { availableParallelism } from "node:os";

export function defaultThreads(): number {
    return Math.max(1, Math.min(availableParallelism() - 1, 8));
}
