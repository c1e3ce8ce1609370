"""Files the stages hand each other, each with its writer and reader (manifests, documents, prompts, vocab, GGUF)."""
