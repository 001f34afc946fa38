# plot.gp: the FP8 convergence runs of issue 12 on one H200, made by
# ../run.sh (`run.sh OUT fp8-blockwise bf16` in one device call,
# `run.sh OUT fp8-delayed fp8-tensorwise` in the next): training loss per
# logged iteration (the mean of the 10 iterations before it) and
# validation loss, bf16 against each recipe.
#   gnuplot plot.gp     (in this directory; writes loss.png)
set terminal pngcairo size 1000,600
set output 'loss.png'
set title '300M Llama-style model, synthetic corpus, 2000 iterations of 8 x 1024 tokens (H200)'
set xlabel 'iteration'
set ylabel 'lm loss'
set logscale y
set grid
set key top right
tr(f) = sprintf("< awk -F'[:,]' '/tokens_per_sec/ {print $2, $6}' %s", f)
va(f) = sprintf("< awk -F'[:,}]' '/valid_loss/ {print $2, $4}' %s", f)
plot tr('bf16.jsonl') with lines lw 2 title 'bf16 (train)', \
     tr('fp8-delayed.jsonl') with lines title 'FP8 hybrid, delayed (train)', \
     tr('fp8-tensorwise.jsonl') with lines title 'FP8 hybrid, tensorwise (train)', \
     tr('fp8-blockwise.jsonl') with lines title 'FP8 hybrid, blockwise (train)', \
     va('bf16.jsonl') with points pt 7 ps 1.5 title 'bf16 (validation)', \
     va('fp8-delayed.jsonl') with points pt 5 ps 1.2 title 'delayed (validation)', \
     va('fp8-tensorwise.jsonl') with points pt 9 ps 1.5 title 'tensorwise (validation)', \
     va('fp8-blockwise.jsonl') with points pt 13 ps 1.5 title 'blockwise (validation)'
