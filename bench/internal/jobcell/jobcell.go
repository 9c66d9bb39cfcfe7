// Package jobcell holds the two ends of a cell of the job benchmarks
// (bench-jobs, bench-keys): Baton's and asynq's, each on keys of its own on
// the private server, with the commands of its measured clients counted
// (package cmdcount). The commands add their own jobs, workers and
// wrappers.
package jobcell
