# model-flags.sh: the flags of the Llama form of gridlm-train's model
# (sourced by the t/*.t scripts that give a model's shape by hand).
# Megatron's defaults, and gridlm's since issue 16, are its GPT (LayerNorm,
# GeLU, learned positions, biases, dropout 0.1); the tests written for the
# Llama model keep training it by passing these.  (--model presets set
# them themselves.)
# (one line: sweep files take it inside theirs)
llama_form="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
