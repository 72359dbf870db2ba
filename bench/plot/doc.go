// Package plot draws a run's two figures with gonum/plot, log-log: the
// roofline (achieved FLOP/s against arithmetic intensity, one point per
// step, under the run's roof) and the sweep (median step latency against
// batch size, measured beside the roofline floors). Every point is one the
// report holds; the figures add no number of their own.
package plot
