# plot.gp: the FP8 convergence runs of issue 12 (run.sh here made the
# .jsonl files on one H100): training loss per logged iteration (the mean
# of the 10 iterations before it) and validation loss, bf16 against FP8.
#   gnuplot plot.gp     (in this directory; writes loss.png)
set terminal pngcairo size 1000,600
set output 'loss.png'
set title '300M Llama-style model, synthetic corpus, 2000 iterations of 8 x 1024 tokens (H100)'
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
     va('bf16.jsonl') with points pt 7 ps 1.5 title 'bf16 (validation)', \
     va('fp8-delayed.jsonl') with points pt 5 ps 1.2 title 'delayed (validation)', \
     va('fp8-tensorwise.jsonl') with points pt 9 ps 1.5 title 'tensorwise (validation)'
