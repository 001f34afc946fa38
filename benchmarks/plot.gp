# plot.gp: throughput and scaling efficiency of a sweep against GPU count.
#
#   gnuplot -e "datafile='plot.dat'; outdir='DIR'; nseries=N; titles='a b'" plot.gp
#
# datafile comes from plotdata.awk: one block per series with columns
# GPUS TOKENS/S/GPU TOKENS/S EFFICIENCY TFLOP/S/GPU.  Writes
#   DIR/throughput.png  total tokens/s (left) and tokens/s per GPU (right)
#   DIR/efficiency.png  scaling efficiency in percent, 100% dashed
set terminal pngcairo size 1200,500 noenhanced font ",10"
set datafile missing "NaN"
set key top left
set grid
set logscale x 2
set xlabel "GPUs"
set offsets graph 0.05, graph 0.05, 0, 0

set output outdir."/throughput.png"
set multiplot layout 1,2 title "Throughput"
set logscale y
set ylabel "tokens/s (all GPUs)"
plot for [i=1:nseries] datafile index (i-1) using 1:3 with linespoints pt 7 title word(titles, i)
unset logscale y
set ylabel "tokens/s per GPU"
set yrange [0:*]
plot for [i=1:nseries] datafile index (i-1) using 1:2 with linespoints pt 7 title word(titles, i)
unset multiplot

set terminal pngcairo size 700,500 noenhanced font ",10"
set output outdir."/efficiency.png"
set title "Scaling efficiency (tokens/s/GPU against the smallest run of each series)"
set ylabel "efficiency (%)"
set yrange [0:*]
plot for [i=1:nseries] datafile index (i-1) using 1:($4*100) with linespoints pt 7 title word(titles, i), \
     100 with lines dt 2 lc "gray" title "linear"
unset output
