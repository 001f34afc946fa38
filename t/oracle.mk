# t/oracle.mk: end-to-end tests against independent oracles --
# transformers' Llama forward written in numpy (t/eval-hf.py) for
# imported Hugging Face models, and planted NaNs in gridlm-train.
dist_check_SCRIPTS += %reldir%/eval-hf.t %reldir%/train-nan.t
EXTRA_DIST += %reldir%/eval-hf.py
TESTS += %reldir%/eval-hf.t %reldir%/train-nan.t
