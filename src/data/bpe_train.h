/*
 * bpe_train.h: learn a byte-level BPE tokenizer from a corpus
 * (gridlm-prep --train-tokenizer) and write it as a Hugging Face
 * tokenizer.json (plus tokenizer_config.json naming the eos token).
 *
 * The model is GPT-2's: ByteLevel pre-tokenization with the GPT-2 regex,
 * an alphabet of all 256 byte characters, then merges learned greedily:
 * at each step the adjacent pair with the highest count over the corpus
 * (ties: the smaller left id, then the smaller right id) becomes a new
 * token, until the vocabulary (special tokens + 256 bytes + merges)
 * reaches the requested size or no pair occurs min_frequency times.
 * Deterministic: the same corpus gives the same file.
 */
#ifndef GL_DATA_BPE_TRAIN_H
#define GL_DATA_BPE_TRAIN_H

typedef struct {
    const char *input;          /* JSONL corpus (.gz/.zst allowed) */
    const char *json_key;       /* the text key ("text") */
    const char *output;         /* tokenizer.json path */
    long vocab_size;
    const char *special_tokens; /* comma-separated, ids 0.. */
    long min_frequency;
    int quiet;
} gl_bpe_train_opts;

void gl_bpe_train(const gl_bpe_train_opts *o);

#endif
